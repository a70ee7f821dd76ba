"""Planning: vLLM's KV-pool arithmetic, memory budget, roofline and calibrated speed.

Modules: ``modelcfg`` (dimensions from config.json), ``rules`` (per-version vLLM rules),
``kv`` (:func:`~servelab.plan.kv.plan_kv_pool`), ``memory``, ``weights`` (from inspect's
report), ``predict`` (roofline decode/prefill/MTP), ``calibrate`` (efficiency fits from
measured runs), ``build`` (:func:`~servelab.plan.build.build_plan` -> ``Plan``),
``explain`` (two builds), ``check`` (plan vs an engine's log facts), ``markdown``.
"""
