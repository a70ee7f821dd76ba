"""The GPU profiler's prefill summary (benchmarks/gpu/profile_decode.py), on a written trace.

A prefill step replays many piecewise CUDA graphs, or none; its summary must count it as one
step either way, and say how long the host and the kernels took.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "profile_decode.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("profile_decode", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_a_traced_prefill_step_is_one_step_with_its_host_and_kernel_spans(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "execute_context_1(2048)", 0.0, 1000.0),
        _x("cpu_op", "aten::mm", 10.0, 5.0),
        _x("cuda_runtime", "cudaGraphLaunch", 20.0, 3.0),
        _x("cuda_runtime", "cudaGraphLaunch", 400.0, 3.0),
        _x("cuda_runtime", "cudaLaunchKernel", 500.0, 4.0),
        _x("cuda_driver", "cuLaunchKernel", 600.0, 4.0),  # Triton's launcher
        # kernels: 100 us busy in all, overlapping pairs counted once, idle gaps between
        _x("kernel", "fused_moe_kernel", 100.0, 40.0),
        _x("kernel", "fused_moe_kernel", 120.0, 40.0),  # overlaps the first by 20 us
        _x("kernel", "nvjet_sm90_gemm", 800.0, 40.0),
        _x("gpu_memcpy", "Memcpy HtoD", 1100.0, 0.0),
    ]
    trace = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    mod = _script()
    one = mod.summarise(trace, 1, one_step=True)
    assert one["steps"] == 1 and one["steps_from"] == "one traced step"
    assert one["gpu_busy_us_per_step"] == 100.0  # 60 + 40, the overlap once
    assert one["step_period_us"] == 1000.0  # first kernel start to last kernel end
    assert one["host_span_us"] == 1000.0  # first to last CPU event
    assert one["launches"] == {"cudaLaunchKernel": 1, "cuLaunchKernel": 1, "cudaGraphLaunch": 2}
    assert one["categories_us_per_step"]["moe"] == 80.0
    # the decode reading divides by the graphs replayed: two steps here
    assert mod.summarise(trace, 64)["steps"] == 2


def test_prefill_prompts_are_fresh_draws_inside_the_vocabulary(tmp_path: Path) -> None:
    mod = _script()
    a, b = mod.token_prompt(2048, 1, 32000), mod.token_prompt(2048, 2, 32000)
    assert len(a) == len(b) == 2048 and a[:16] != b[:16]  # no shared prefix-cache block
    assert mod.token_prompt(2048, 1, 32000) == a
    assert all(1600 <= t < 31999 for t in a + b)
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 248320}}))
    assert mod.vocab_size(str(tmp_path)) == 248320
    assert mod.vocab_size(str(tmp_path / "missing")) == 32000
