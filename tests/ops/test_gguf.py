"""A GGUF build's operators: each GEMM in the GGML type its header gives the tensor."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.checkpoint.sources import load_checkpoint
from servelab.errors import ConfigError
from servelab.ops.gguf import gguf_step_model
from servelab.synth.gguf_replica import GPT_OSS_20B, LLAMA3_8B, Arch, write_replica


def _read(tmp: Path, arch: Arch, ftype: str) -> tuple[dict[str, object], dict[str, str]]:
    src = load_checkpoint(write_replica(arch, ftype, tmp / f"{ftype}.gguf"))
    assert src.config is not None
    return dict(src.config), {t.name: t.dtype for t in src.tensors}


def test_a_q4_k_m_llama_keeps_each_tensors_type(tmp_path: Path) -> None:
    cfg, types = _read(tmp_path, LLAMA3_8B, "Q4_K_M")
    m = gguf_step_model(cfg, types, name="llama3-8b-Q4_K_M")
    fmts = {g.name.rsplit(".", 1)[-1]: g.fmt for g in m.layers[0].gemms}
    assert fmts["qkv_proj"] == "gguf:Q4_K" and fmts["o_proj"] == "gguf:Q4_K"
    # llama.cpp's Q4_K_M keeps ffn_down of the first layers in Q6_K
    assert fmts["down_proj"] == f"gguf:{types['blk.0.ffn_down.weight']}"
    assert m.lm_head.fmt == "gguf:Q6_K" and len(m.layers) == 32


def test_gpt_oss_mxfp4_moe_experts_and_q8_attention(tmp_path: Path) -> None:
    cfg, types = _read(tmp_path, GPT_OSS_20B, "MXFP4_MOE")
    m = gguf_step_model(cfg, types)
    assert m.layers[0].moe is not None and m.layers[0].moe.fmt == "gguf:MXFP4"
    assert {g.fmt for g in m.layers[0].gemms if g.role != "router"} == {"gguf:Q8_0"}


def test_a_tensor_the_gguf_lacks_is_an_error(tmp_path: Path) -> None:
    cfg, types = _read(tmp_path, LLAMA3_8B, "Q4_0")
    del types["blk.3.attn_output.weight"]
    with pytest.raises(ConfigError, match=r"blk\.3\.attn_output\.weight"):
        gguf_step_model(cfg, types)
