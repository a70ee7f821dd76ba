"""Planning: memory budget, the engine's KV pool, roofline and calibrated speed.

Each engine's KV arithmetic lives with that engine (``servelab.engines.vllm.kv``,
``servelab.engines.llamacpp.kv``); the planner asks it through ``kvseam`` and reads the
pool it returns (``kvpool``). Modules: ``memory``, ``weights`` (from inspect's
report), ``predict`` (roofline decode/prefill/MTP), ``calibrate`` (efficiency fits from
measured runs), ``build`` (:func:`~servelab.plan.build.build_plan` -> ``Plan``),
``explain`` (two builds), ``check`` (plan vs an engine's log facts), ``markdown``.
"""
