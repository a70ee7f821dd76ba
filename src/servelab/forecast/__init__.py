"""A build's forecast on one hardware: the plan arithmetic (:mod:`servelab.plan`: memory,
the engine's KV pool, bytes and FLOPs) and the speed model (:mod:`servelab.predict`) put
together.

Modules: ``build`` (:func:`~servelab.forecast.build.build_plan` -> ``Plan``: memory, KV pool,
start-up checks, single-stream speed), ``load`` (a plan under concurrent load: TPOT, TTFT,
throughput, SLO capacity), ``explain`` (why two builds differ), ``markdown`` (a plan as
Markdown). This layer sits above both halves it composes, so neither imports the other's
consumer (issue 34: no circles).
"""
