"""Log facts against the corpus of real and source-reproduced vLLM logs."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.facts import EngineFacts, Phase
from servelab.engines.vllm.logfacts import LogParser, parse_log
from servelab.redact import REDACTED

LOGS = Path(__file__).resolve().parents[1] / "logs"


def _facts(name: str) -> EngineFacts:
    return parse_log((LOGS / name).read_text(encoding="utf-8"))


def test_cpu_qwen3_moe_real_log() -> None:
    f = _facts("vllm-0.32.0-cpu-qwen3_moe.log")
    assert f.version == "0.32.0"
    assert f.architecture == "Qwen3MoeForCausalLM"
    assert f.max_model_len == 4096
    assert f.non_default_args == {
        "port": 18001,
        "model": "/tmp/tinytest/qwen3_moe",
        "max_model_len": 4096,
        "kv_cache_memory_bytes": 268435456,
    }
    assert (f.moe_backend, f.moe_quant) == ("CPU", "Unquantized")
    assert f.moe_experts_kernel == "X86CPUUnquantizedExperts"
    assert f.attention_backend is None  # the CPU build does not print it
    assert (f.kv_device, f.kv_pool_tokens) == ("CPU", 1_048_576)
    assert (f.max_concurrency, f.concurrency_at_tokens) == (256.0, 4096)
    assert f.kv_available_gib == 0.25
    assert f.weights_load_s == 0.01 and f.weights_gib is None
    assert f.init_engine_s == 27.62
    assert f.startup_s == 50.0  # 15:39:55 -> 15:40:45
    assert f.server_url == "http://0.0.0.0:18001"
    # The shutdown's EngineDeadError is not an engine error worth surfacing.
    assert f.errors == ()
    assert f.mamba_padding_pct is None and f.graph_capture_s is None


def test_gpu_fp8_spark_lines_from_source_formats() -> None:
    f = _facts("vllm-gpu-fp8-spark.log")
    assert f.version == "0.26.0"
    assert f.attention_backend == "FLASH_ATTN"
    assert (f.moe_backend, f.moe_quant) == ("TRITON", "Fp8")
    assert not f.marlin_fallback
    assert (f.weights_gib, f.weights_load_s) == (35.28, 82.53126)
    assert f.kv_available_gib == 6.0
    assert (f.kv_device, f.kv_pool_tokens, f.max_concurrency) == ("GPU", 308_955, 1.18)
    assert f.concurrency_at_tokens == 262_144
    assert (f.attention_block_size, f.mamba_padding_pct) == (1056, 1.52)
    assert (f.graph_capture_s, f.graph_capture_gib) == (12.0, 0.45)
    assert [w.kind for w in f.warnings] == ["kv-profiling-skipped"]
    assert f.non_default_args["default_chat_template_kwargs"] == {"enable_thinking": False}


def test_gpu_nvfp4_marlin_fallback() -> None:
    f = _facts("vllm-gpu-nvfp4-marlin.log")
    assert f.version == "0.24.0"
    assert (f.moe_backend, f.moe_quant) == ("MARLIN", "NvFp4")
    assert f.marlin_fallback
    assert f.padding_layers == 2
    kinds = [w.kind for w in f.warnings]
    assert kinds == ["marlin-weight-only", "default-moe-config"]


def test_request_time_engine_error_is_surfaced() -> None:
    f = _facts("vllm-0.32.0-cpu-head-dim-16-request-error.log")
    assert f.kv_pool_tokens == 1_048_576
    assert any("Unsupported CPU attention configuration: head_dim=16" in e.text for e in f.errors)


def test_kv_budget_too_small_root_cause_real_log() -> None:
    f = _facts("vllm-0.32.0-cpu-kv-too-small.log")
    assert f.kv_pool_tokens is None
    root = f.root_error()
    assert root is not None
    assert root.text.startswith("ValueError: To serve at least one request with the model's max")
    assert "estimated maximum model length is 1920" in root.text
    assert any("Engine core initialization failed" in e.text for e in f.errors)


def test_kv_budget_below_one_block_real_log() -> None:
    f = _facts("vllm-0.32.0-cpu-kv-no-blocks.log")
    assert f.kv_pool_tokens is None
    assert f.kv_available_gib == 0.0
    assert f.errors[0].text.startswith("ValueError: No available memory for the cache blocks.")


def test_cpu_qwen3_next_real_log() -> None:
    f = _facts("vllm-0.32.0-cpu-qwen3_next.log")
    assert f.architecture == "Qwen3NextForCausalLM"
    assert f.mamba_padding_pct == 9.92
    assert f.scheduler_block_size == 1152
    assert (f.kv_pool_tokens, f.max_concurrency, f.concurrency_at_tokens) == (372_736, 91.0, 4096)
    assert f.errors == ()


def test_older_moe_backend_format_and_oom() -> None:
    text = "\n".join(
        [
            "INFO 03-01 10:00:00 [fp8.py:99] Using Marlin backend for FP8 MoE",
            "(EngineCore_DP0 pid=1) ERROR 03-01 10:00:05 [core.py:700] torch.OutOfMemoryError: "
            "CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    f = parse_log(text)
    assert (f.moe_backend, f.moe_quant) == ("MARLIN", "FP8")
    assert [e.kind for e in f.errors] == ["out-of-memory"]


def test_cpu_memory_utilisation_error_is_surfaced() -> None:
    msg = (
        "ValueError: Available memory on node 0 (3.1/23.4 GiB) on startup is less than "
        "desired CPU memory utilization (0.9, 21.06 GiB)."
    )
    f = parse_log(msg)
    assert f.errors and f.errors[0].text == msg
    assert [w.kind for w in f.warnings] == ["cpu-memory-low"]


def test_phases_advance_in_order_and_never_back() -> None:
    parser = LogParser()
    seen = []
    for line in (LOGS / "vllm-0.32.0-cpu-qwen3_moe.log").read_text().splitlines():
        phase = parser.feed(line)
        if phase is not None:
            seen.append(phase)
    assert seen == [
        Phase.LOADING_WEIGHTS,
        Phase.PROFILING,
        Phase.KV_ALLOCATION,
        Phase.SERVER_STARTING,
    ]
    assert parser.phase is Phase.SERVER_STARTING
    assert parser.feed("INFO 12-02 15:40:17 [x.py:1] Starting to load model foo...") is None


def test_incremental_equals_whole() -> None:
    text = (LOGS / "vllm-gpu-fp8-spark.log").read_text()
    parser = LogParser()
    for line in text.splitlines(keepends=True):
        parser.feed(line)
    assert parser.facts() == parse_log(text)


def test_ansi_colours_and_unknown_lines() -> None:
    line = (
        "\x1b[1;36m(EngineCore_DP0 pid=9)\x1b[0;0m INFO 07-28 09:14:10 [kv_cache_utils.py:2327] "
        "GPU KV cache size: 12,345 tokens, Maximum concurrency for 1,024 tokens per request: 12.06x"
    )
    f = parse_log("garbage line\n\x00\x01 binary\n" + line + "\n{not a log}")
    assert (f.kv_pool_tokens, f.max_concurrency, f.concurrency_at_tokens) == (12_345, 12.06, 1024)


def test_non_literal_args_are_ignored() -> None:
    f = parse_log("INFO 01-01 00:00:00 [a.py:1] non-default args: {'x': SomeEnum.A}")
    assert f.non_default_args == {}


def test_to_dict_is_json_ready() -> None:
    import json

    f = _facts("vllm-gpu-nvfp4-marlin.log")
    data = json.loads(json.dumps(f.to_dict()))
    assert data["moe_backend"] == "MARLIN"
    assert data["warnings"][0]["kind"] == "marlin-weight-only"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_without_error(text: str) -> None:
    parse_log(text)


def test_secret_args_are_masked() -> None:
    f = parse_log(
        "INFO 01-01 00:00:00 [a.py:1] non-default args: {'api_key': ['sk-1'], 'hf_token': 'hf_x', "
        "'port': 1}"
    )
    assert f.non_default_args == {"api_key": REDACTED, "hf_token": REDACTED, "port": 1}


def test_qwen3_next_request_time_gdn_error() -> None:
    f = _facts("vllm-0.32.0-cpu-qwen3_next-gdn-head-dim-16-error.log")
    assert f.mamba_padding_pct == 573.68
    assert f.scheduler_block_size == 128
    assert (f.kv_pool_tokens, f.max_concurrency) == (883_011, 215.58)
    assert any("chunk_gated_delta_rule_cpu" in e.text for e in f.errors)
