"""GGUF k-quant file types written by servelab (Q6_K, Q5_K_M, Q4_K_M; Q4_0 and Q5_0 through
``gguf.quants``): the blocks read back through the ``gguf`` package's own decoders (ggml's
reference layouts), each tensor of the type llama.cpp's quantizer gives it, the file's
bytes as servelab reports them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from servelab.checkpoint.sources import load_checkpoint
from servelab.errors import UsageError
from servelab.synth.gguf import write_gguf
from servelab.synth.gguf_types import quantize, tensor_type, use_more_bits

TinyFactory = Callable[..., Path]

# relative RMS error of each type on Gaussian weights: 4 bits about 8 %, 8 bits under 1 %;
# a wrong nibble, scale or sign order gives errors near 100 %
_BOUND = {"Q4_K": 0.10, "Q5_K": 0.05, "Q6_K": 0.03, "Q4_0": 0.10, "Q5_0": 0.05, "Q8_0": 0.01}


@pytest.mark.parametrize("kind", sorted(_BOUND))
def test_blocks_decode_to_the_weights_through_ggmls_layout(kind: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(0.0, 0.02, (8, 512)).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero sub-block: scale 0, no division by zero
    packed = quantize(x, kind)
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[kind]]
    assert packed.dtype == np.uint8 and packed.shape == (8, 512 // block * size)
    back = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType[kind])
    err = float(np.sqrt(np.mean((back - x) ** 2)) / x.std())
    assert err < _BOUND[kind], (kind, err)
    assert np.all(back[0, :32] == 0.0)


def test_a_k_quant_row_must_hold_whole_super_blocks() -> None:
    with pytest.raises(UsageError, match="multiple of 256"):
        quantize(np.zeros((4, 384), np.float32), "Q4_K")


def test_the_m_mixes_follow_llama_cpps_use_more_bits() -> None:
    # 8 layers: the first and last eighth, and every third layer between them
    assert [i for i in range(8) if use_more_bits(i, 8)] == [0, 3, 6, 7]
    assert tensor_type("blk.3.attn_v.weight", 2, "Q4_K_M", 8) == "Q6_K"
    assert tensor_type("blk.4.attn_v.weight", 2, "Q4_K_M", 8) == "Q4_K"
    assert tensor_type("blk.6.ffn_down.weight", 2, "Q5_K_M", 8) == "Q6_K"
    assert tensor_type("blk.6.ffn_up.weight", 2, "Q5_K_M", 8) == "Q5_K"
    assert tensor_type("output.weight", 2, "Q4_0", 8) == "Q6_K"
    assert tensor_type("output.weight", 2, "Q8_0", 8) == "Q8_0"
    assert tensor_type("token_embd.weight", 2, "Q4_K_M", 8) == "Q4_K"
    assert tensor_type("blk.0.attn_norm.weight", 1, "Q4_K_M", 8) == "F32"
    assert tensor_type("blk.0.attn_q.bias", 1, "Q6_K", 8) == "F32"


@pytest.mark.parametrize("ftype", ["Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"])
def test_a_written_file_carries_the_mix_and_servelab_reads_its_bytes(
    ftype: str, tiny_checkpoint: TinyFactory, tmp_path: Path
) -> None:
    hf = tiny_checkpoint("llama", overrides={"hidden_size": 256, "intermediate_size": 512,
                                             "num_hidden_layers": 8, "head_dim": 64})
    out = write_gguf(hf, tmp_path / f"tiny-{ftype}.gguf", qtype=ftype)  # type: ignore[arg-type]
    reader = gguf.GGUFReader(out)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    for t in reader.tensors:
        n_layers = 8
        assert types[t.name] == tensor_type(t.name, len(t.shape), ftype, n_layers), t.name
    assert types["output.weight"] == "Q6_K"
    ft = int(reader.fields["general.file_type"].parts[-1][0])
    assert gguf.LlamaFileType(ft).name == f"MOSTLY_{ftype}"
    src = load_checkpoint(str(out))
    nbytes = {t.name: t.end - t.begin for s in src.shards for t in s.tensors}
    assert nbytes == {t.name: int(t.n_bytes) for t in reader.tensors}
    if ftype.endswith("_M"):  # layers 0, 3, 6, 7 keep attn_v and ffn_down at Q6_K
        assert types["blk.3.ffn_down.weight"] == "Q6_K"
        assert types["blk.4.ffn_down.weight"] == ftype.removesuffix("_M")
