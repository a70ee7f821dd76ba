"""Sizing arithmetic: memory budget, the KV pool's vocabulary, weights per GPU, start-up limits.

Each engine's KV arithmetic lives with that engine (``servelab.engines.vllm.kv``,
``servelab.engines.llamacpp.kv``); the planner asks it through ``kvseam`` and reads the
pool it returns (``kvpool``). Modules: ``memory``, ``weights`` (from inspect's report),
``layout`` and ``parallel`` (GPUs: weights per GPU, the communication a layout adds),
``startup`` (CUDA graphs, batched tokens), ``document`` (a stored plan's reader), ``check``
(plan vs an engine's log facts), ``specsource`` (speculative decode's acceptance source).
Bytes and FLOPs per point are the speed model's (:mod:`servelab.predict.costs`); a whole plan
with its predictions is put together in :mod:`servelab.plan`.
"""
