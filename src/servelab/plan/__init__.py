"""A build's plan on one hardware: the sizing arithmetic (:mod:`servelab.sizing`: memory,
the engine's KV pool) and the speed model (:mod:`servelab.predict`) put together.

Modules: ``request`` (:class:`~servelab.plan.request.PlanRequest`: what to plan, every choice
resolved), ``build`` (:func:`~servelab.plan.build.build_plan` -> ``Plan``: memory, KV pool,
start-up checks, single-stream speed), ``load`` (a plan under concurrent load: TPOT, TTFT,
throughput, SLO capacity), ``explain`` (why two builds differ), ``markdown`` (a plan as
Markdown). This layer sits above both halves it composes, so neither imports the other's
consumer (issue 34: no circles); what stored runs say reaches it as values
(:mod:`servelab.evidence`).
"""
