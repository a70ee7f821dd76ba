"""Operator costs and their composition into engine steps (issue 39).

* :mod:`~servelab.ops.model`: a model's operators per decoder layer (GEMM shapes grouped as
  vLLM groups them, fused MoE, attention / Gated DeltaNet / Mamba2 / MLA cores);
* :mod:`~servelab.ops.tables`: measured per-operator cost tables with their provenance
  (servelab's own, measured on a GPU with an engine's kernels, and AIConfigurator's);
* :mod:`~servelab.ops.interp`: reading a table at a shape (log-space in tokens, saying
  when it extrapolates);
* :mod:`~servelab.ops.step`: one engine step's time at (batch, context, new tokens) as the
  sum of its operators, with the breakdown and where each number came from.
"""
