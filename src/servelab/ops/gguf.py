"""A llama.cpp build's operators: the decoder step of its config with each linear layer's
GGML type, as its GGUF header states it.

servelab reads a GGUF header into an HF-style config and tensor entries (``servelab
checkpoint``: ``load_checkpoint(path).config`` / ``.tensors``); :func:`gguf_step_model` takes
the config and ``{tensor name: GGML type}`` and returns the
:class:`~servelab.ops.model.StepModel` of the same family with every GEMM's format set to
``gguf:<TYPE>`` (:data:`servelab.ops.roofline.WEIGHT_BITS` has their sizes):

=====================================  ==========================================
StepModel operator                     GGUF tensor
=====================================  ==========================================
``self_attn.qkv_proj``                 ``blk.N.attn_q.weight`` (llama.cpp runs q, k, v
                                       as three matmuls; a Q4_K_M ``attn_v`` in Q6_K
                                       is read at ``attn_q``'s type: <1 % of the bytes)
``self_attn.o_proj``                   ``blk.N.attn_output.weight``
``mlp.gate_up_proj`` / ``down_proj``   ``blk.N.ffn_gate`` / ``ffn_down`` ``.weight``
routed experts                         ``blk.N.ffn_gate_exps.weight``
router                                 ``blk.N.ffn_gate_inp.weight``
``lm_head``                            ``output.weight`` (``token_embd.weight`` when tied)
=====================================  ==========================================

Pure: mappings in, a frozen :class:`StepModel` out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from servelab.errors import ConfigError
from servelab.ops.model import Gemm, LayerOps, StepModel, step_model

_ROLE_TENSOR = (
    ("qkv_proj", "attn_q"),
    ("q_proj", "attn_q"),
    ("k_proj", "attn_k"),
    ("v_proj", "attn_v"),
    ("o_proj", "attn_output"),
    ("gate_up_proj", "ffn_gate"),
    ("down_proj", "ffn_down"),
    ("gate", "ffn_gate_inp"),
    ("router", "ffn_gate_inp"),
)


def _tensor_for(gemm: Gemm, index: int) -> str:
    leaf = gemm.name.rsplit(".", 1)[-1]
    for role, tensor in _ROLE_TENSOR:
        if leaf == role:
            return f"blk.{index}.{tensor}.weight"
    raise ConfigError(f"no GGUF tensor known for operator {gemm.name}")


def gguf_step_model(config: Mapping[str, Any], types: Mapping[str, str], *,
                    name: str = "model") -> StepModel:
    """The operators of a GGUF build: ``config`` (servelab's reading of its header) and
    ``types`` (tensor name -> GGML type)."""
    cfg = {k: v for k, v in config.items() if k != "quantization_config"}
    base = step_model(cfg, None, name=name)

    def fmt(tensor: str) -> str:
        t = types.get(tensor)
        if t is None:
            raise ConfigError(f"{name}: the GGUF has no tensor {tensor}")
        return f"gguf:{t}"

    layers: list[LayerOps] = []
    for layer in base.layers:
        gemms = tuple(dataclasses.replace(g, fmt=fmt(_tensor_for(g, layer.index)))
                      for g in layer.gemms)
        moe = layer.moe
        if moe is not None:
            moe = dataclasses.replace(moe, fmt=fmt(f"blk.{layer.index}.ffn_gate_exps.weight"))
        layers.append(dataclasses.replace(layer, gemms=gemms, moe=moe))
    head = "output.weight" if "output.weight" in types else "token_embd.weight"
    lm_head = dataclasses.replace(base.lm_head, fmt=fmt(head))
    kinds = {t for t in types.values()}
    return dataclasses.replace(base, layers=tuple(layers), lm_head=lm_head,
                               fmt="gguf:" + "+".join(sorted(kinds)))
