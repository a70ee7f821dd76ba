"""Each family read from its published config: layer kinds, windows, latents, state,
experts, tied embeddings and context as vLLM sees them (transformers' config classes)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from servelab.errors import ConfigError
from servelab.families import (
    CHUNKED,
    FULL,
    MAMBA,
    MLA,
    NONE,
    SLIDING,
    ModelDims,
    model_dims,
    presets,
)


def _dims(name: str) -> ModelDims:
    return model_dims(presets()[name][1].config())


def _kinds(d: ModelDims) -> dict[str, int]:
    return dict(Counter(d.layer_types))


def test_gemma_3_27b_implicit_pattern_tie_and_context() -> None:
    d = _dims("gemma-3-27b")
    assert _kinds(d) == {SLIDING: 52, FULL: 10}
    # every 6th layer is global (5, 11, ...): the pattern transformers and vLLM derive
    assert [i for i, t in enumerate(d.layer_types) if t == FULL][:3] == [5, 11, 17]
    assert {a.window for a in d.attention if a and a.kind == SLIDING} == {1024}
    assert d.tie_word_embeddings is True
    assert d.max_position_embeddings == 131072
    assert (d.num_kv_heads, d.head_dim, d.vocab_size) == (16, 128, 262208)


@pytest.mark.parametrize(("name", "sliding", "full", "heads"), [
    ("gemma-3-12b", 40, 8, 8), ("gemma-3-4b", 29, 5, 4),
])
def test_gemma_3_smaller(name: str, sliding: int, full: int, heads: int) -> None:
    d = _dims(name)
    assert _kinds(d) == {SLIDING: sliding, FULL: full}
    assert d.num_kv_heads == heads and d.head_dim == 256


@pytest.mark.parametrize(("name", "layers", "experts"), [
    ("gpt-oss-120b", 36, 128), ("gpt-oss-20b", 24, 32),
])
def test_gpt_oss_alternates_windows_with_sinks(name: str, layers: int, experts: int) -> None:
    d = _dims(name)
    assert _kinds(d) == {SLIDING: layers // 2, FULL: layers // 2}
    assert d.layer_types[:2] == (SLIDING, FULL)
    assert all(a is not None and a.sinks for a in d.attention)
    assert {a.window for a in d.attention if a and a.kind == SLIDING} == {128}
    assert (d.num_experts, d.experts_per_token) == (experts, 4)
    assert (d.num_kv_heads, d.head_dim, d.tie_word_embeddings) == (8, 64, False)


def test_nemotron_nano_9b_v2_pattern() -> None:
    d = _dims("nemotron-nano-9b-v2")
    assert _kinds(d) == {MAMBA: 27, FULL: 4, NONE: 25}
    assert d.num_layers == 56
    assert [i for i, t in enumerate(d.layer_types) if t == FULL] == [14, 21, 30, 39]
    assert d.mamba is not None
    assert (d.mamba.num_heads, d.mamba.head_dim, d.mamba.n_groups, d.mamba.state_size) == (
        128, 80, 8, 128)
    assert d.mamba.conv_dim == 128 * 80 + 2 * 8 * 128
    assert d.mamba_ssm_dtype == "float32"
    assert d.num_experts == 0  # no E block: the config class's default of 8 is not read


def test_llama_4_scout_chunked_layers() -> None:
    d = _dims("llama-4-scout")
    assert _kinds(d) == {CHUNKED: 36, FULL: 12}
    assert [i for i, t in enumerate(d.layer_types) if t == FULL][:2] == [3, 7]
    assert {a.chunk for a in d.attention if a and a.kind == CHUNKED} == {8192}
    assert (d.num_experts, d.experts_per_token) == (16, 1)
    assert d.max_position_embeddings == 10485760
    # the published rope parameters draw a transformers warning: kept as a note
    assert any("low_freq_factor" in n for n in d.notes)


@pytest.mark.parametrize(("name", "experts", "mtp", "heads"), [
    ("deepseek-v3", 256, 1, 128), ("kimi-k2", 384, 0, 64),
])
def test_mla_families(name: str, experts: int, mtp: int, heads: int) -> None:
    d = _dims(name)
    assert _kinds(d) == {MLA: 61}
    assert d.mla is not None
    assert (d.mla.kv_lora_rank, d.mla.qk_rope_head_dim, d.mla.latent_dim) == (512, 64, 576)
    assert d.mla.q_lora_rank == 1536
    assert (d.num_experts, d.experts_per_token, d.mtp_layers) == (experts, 8, mtp)
    assert d.num_attention_heads == heads
    assert all(a is None for a in d.attention)


@pytest.mark.parametrize(("name", "kinds", "experts", "top_k", "extra"), [
    ("glm-4.5", {FULL: 92}, 160, 8, {"mtp_layers": 1, "max_position_embeddings": 131072}),
    ("glm-4.6", {FULL: 92}, 160, 8, {"mtp_layers": 1, "max_position_embeddings": 202752}),
    ("minimax-m2", {FULL: 62}, 256, 8, {"max_position_embeddings": 196608}),
    ("mixtral-8x7b", {FULL: 32}, 8, 2, {"sliding_window": None}),
    ("mistral-7b", {SLIDING: 32}, 0, 0, {"sliding_window": 4096}),
    ("qwen2.5-7b", {FULL: 28}, 0, 0, {"sliding_window": None, "num_kv_heads": 4}),
    ("phi-4", {FULL: 40}, 0, 0, {"num_kv_heads": 10, "head_dim": 128}),
])
def test_softmax_families(
    name: str, kinds: dict[str, int], experts: int, top_k: int, extra: dict[str, Any]
) -> None:
    d = _dims(name)
    assert _kinds(d) == kinds
    assert (d.num_experts, d.experts_per_token) == (experts, top_k)
    for key, value in extra.items():
        assert getattr(d, key) == value, key


def test_mistral_model_level_window_applies_to_every_layer() -> None:
    d = _dims("mistral-7b")
    assert {a.window for a in d.attention if a} == {4096}


def test_refusals_name_the_key_and_file() -> None:
    with pytest.raises(ConfigError, match=r"x/config.json: model_type 'falcon' is not a model"):
        model_dims({"model_type": "falcon", "num_hidden_layers": 2}, "x/config.json")
    with pytest.raises(ConfigError, match=r"config.json: no 'model_type'"):
        model_dims({"num_hidden_layers": 2})
    gpt = presets()["gpt-oss-20b"][1].config()
    gpt["layer_types"] = ["sliding_attention", "linear_attention"] * 12
    with pytest.raises(ConfigError, match=r"layer_types\[1\] = 'linear_attention'"):
        model_dims(gpt)
    qwen = {**presets()["qwen2.5-7b"][1].config(), "use_sliding_window": True}
    with pytest.raises(ConfigError, match="use_sliding_window"):
        model_dims(qwen)
    mm = presets()["minimax-m2"][1].config()
    mm["attn_type_list"] = [0] + [1] * 61
    with pytest.raises(ConfigError, match=r"attn_type_list\[0\] = 0"):
        model_dims(mm)
    llama = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        model_dims(llama)
    with pytest.raises(ConfigError, match="kv_lora_rank"):
        model_dims({**llama, "num_hidden_layers": 2, "kv_lora_rank": 512})


def test_gguf_architectures_are_read_as_their_family() -> None:
    from servelab.families import family_for_gguf, gguf_model_type

    assert gguf_model_type("gemma3") == "gemma3_text"  # a GGUF's flat config is the text one
    assert gguf_model_type("qwen3moe") == "qwen3_moe"
    assert gguf_model_type("deepseek2") == "deepseek_v2"
    assert gguf_model_type("llama") == "llama"
    assert gguf_model_type("rwkv7") == "rwkv7"  # no family: reading it is refused, named
    fam = family_for_gguf("gpt-oss")
    assert fam is not None and fam.name == "gpt_oss"
    flat = {"model_type": "gemma3_text", "hidden_size": 5376, "num_hidden_layers": 62,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
            "sliding_window": 1024, "vocab_size": 262208}
    assert Counter(model_dims(flat).layer_types) == {SLIDING: 52, FULL: 10}


def test_deepseek_v2_lite_without_q_lora() -> None:
    # deepseek-ai/DeepSeek-V2-Lite config.json (huggingface.co/deepseek-ai/DeepSeek-V2-Lite)
    cfg = {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 102400, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    }
    d = model_dims(cfg)
    assert _kinds(d) == {MLA: 27}
    assert d.mla is not None and d.mla.q_lora_rank is None and d.mla.latent_dim == 576
    assert (d.num_experts, d.experts_per_token, d.mtp_layers) == (64, 6, 0)
    assert (d.num_kv_heads, d.head_dim) == (1, 576)  # one latent "head", as vLLM sizes MLA


def test_a_quantization_servelab_cannot_size_is_refused_naming_the_key() -> None:
    from servelab.checkpoint.quant import detect_quant
    from servelab.sizing.weights import weight_scheme

    with pytest.raises(ConfigError, match=r"quantization_config: quant_method 'hqq'"):
        weight_scheme(detect_quant({"quantization_config": {"quant_method": "hqq"}}))
