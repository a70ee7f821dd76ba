"""Plan arithmetic: memory budget, the engine's KV pool, bytes and FLOPs per point.

Each engine's KV arithmetic lives with that engine (``servelab.engines.vllm.kv``,
``servelab.engines.llamacpp.kv``); the planner asks it through ``kvseam`` and reads the
pool it returns (``kvpool``). Modules: ``memory``, ``weights`` (from inspect's
report), ``costs`` (bytes read and FLOPs per decode token and prompt), ``layout`` and
``parallel`` (GPUs), ``startup`` (CUDA graphs, batched tokens), ``document`` (a stored plan's
reader), ``check`` (plan vs an engine's log facts), ``request`` (one resolved plan request).
The speed model is :mod:`servelab.predict`; a whole plan with its predictions is put together
in :mod:`servelab.forecast`.
"""
