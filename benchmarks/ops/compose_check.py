"""Does an engine step cost the sum of its operators timed one by one? Measured ON THE GPU
with plain PyTorch (no vLLM), with measure.py's own timer.

measure.py times each operator alone: a CUDA-graph replay of that one op between two CUDA
events, L2 flushed before. A decode step runs hundreds of kernels back to back in one graph,
so each isolated time carries a fixed cost the step does not pay per op (the events, the
graph launch, an idle GPU's ramp). This script measures, side by side in one run:

* ``floor``: the same timer around a graph of one trivial kernel (a 16-element add);
* ``per_node``: a graph of N trivial kernels over N (its slope);
* a synthetic decoder stack (Llama-3.2-3B and Llama-3.1-8B shapes, BF16, distinct weights per
  layer, torch kernels: QKV, RMSNorm, SiLU-and-mul, output and MLP GEMMs) at 1..512 tokens:
  the whole stack captured as one graph, timed once per repetition, against the sum of its
  operators timed alone.

    python compose_check.py --out compose.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import Timer

SHAPES = {  # hidden, q heads, kv heads, head dim, intermediate, layers
    "llama-3.2-3b": (3072, 24, 8, 128, 8192, 28),
    "llama-3.1-8b": (4096, 32, 8, 128, 14336, 32),
}


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


def stack_ops(name: str, m: int) -> tuple[list[Callable[[], Any]], Callable[[], Any]]:
    """(the stack's ops, one closure each, and the whole stack as one closure)."""
    h, hq, hkv, d, inter, layers = SHAPES[name]
    dt = torch.bfloat16
    x = torch.randn(m, h, dtype=dt, device="cuda")
    ops: list[Callable[[], Any]] = []
    for _ in range(layers):
        wn1 = torch.randn(h, dtype=dt, device="cuda")
        wqkv = torch.randn((hq + 2 * hkv) * d, h, dtype=dt, device="cuda") * 0.02
        wo = torch.randn(h, hq * d, dtype=dt, device="cuda") * 0.02
        wn2 = torch.randn(h, dtype=dt, device="cuda")
        wgu = torch.randn(2 * inter, h, dtype=dt, device="cuda") * 0.02
        wd = torch.randn(h, inter, dtype=dt, device="cuda") * 0.02
        attn_out = torch.randn(m, hq * d, dtype=dt, device="cuda")
        act = torch.randn(m, 2 * inter, dtype=dt, device="cuda")
        mid = torch.randn(m, inter, dtype=dt, device="cuda")
        ops += [
            lambda wn1=wn1: rms(x, wn1),
            lambda wqkv=wqkv: torch.nn.functional.linear(x, wqkv),
            lambda wo=wo, a=attn_out: torch.nn.functional.linear(a, wo),
            lambda wn2=wn2: rms(x, wn2),
            lambda wgu=wgu: torch.nn.functional.linear(x, wgu),
            lambda a=act: torch.nn.functional.silu(a[:, :inter]) * a[:, inter:],
            lambda wd=wd, a=mid: torch.nn.functional.linear(a, wd),
        ]

    def whole() -> None:
        for op in ops:
            op()

    return ops, whole


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    timer = Timer()
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    a = torch.ones(16, device="cuda")
    out["floor_ms"] = timer(lambda: a.add_(1e-6))["latency"]
    nodes = {}
    for n in (1, 10, 100, 1000):
        def chain(n: int = n) -> None:
            for _ in range(n):
                a.add_(1e-6)
        nodes[n] = timer(chain)["latency"]
    out["trivial_graph_ms"] = nodes
    out["per_node_ms"] = (nodes[1000] - nodes[100]) / 900
    rows = []
    for name in SHAPES:
        for m in (1, 4, 16, 64, 256, 512):
            ops, whole = stack_ops(name, m)
            isolated = [timer(op)["latency"] for op in ops]
            together = [timer(whole)["latency"] for _ in range(3)]
            row = {"model": name, "m": m, "ops": len(ops), "sum_isolated_ms": sum(isolated),
                   "stack_ms": statistics.median(together), "isolated_ms": isolated}
            row["excess_per_op_ms"] = (row["sum_isolated_ms"] - row["stack_ms"]) / len(ops)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "isolated_ms"}), flush=True)
            del ops, whole
            torch.cuda.empty_cache()
    out["stacks"] = rows
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "stacks"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
