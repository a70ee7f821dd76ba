"""servelab's H200 operator tables (vLLM 0.26.0, measured by benchmarks/ops/measure.py) against
AIConfigurator's H200 tables (vLLM 0.24.0, aiconfigurator-core 0.12.0) where both measured
the same operator at the same shape: the ratio servelab / AIConfigurator per point, summarized
per operator and kernel (median, quartiles, count), printed as Markdown.

Run with a Python that has the optional extra (``servelab[aiconfigurator]``, or the scratch
venv the extra was tried in):

    /tmp/aic-venv/bin/python benchmarks/ops/compare_aic.py [--hardware h200]

Points are joined exactly on GEMM (dtype, kernel, m, n, k) and fused-MoE (dtype, experts,
top-k, hidden, intermediate, tokens; AIConfigurator's ``balanced`` routing against servelab's
uniform); attention is read from AIConfigurator's table at servelab's measured (batch,
context) by the same log-space interpolation servelab uses (AIConfigurator's decode contexts
are 2^k - 1, servelab's 2^k), same heads, head dim, window, BF16 KV, FlashAttention 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from servelab.ops import aic
from servelab.ops.interp import interp2
from servelab.ops.tables import TableSet, shipped


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summarize(pairs: Mapping[str, list[tuple[float, float]]]) -> list[str]:
    lines = ["| operator / kernel | points | servelab / AIC median | p25 | p75 | min | max |",
             "|---|---|---|---|---|---|---|"]
    for key in sorted(pairs):
        rs = [a / b for a, b in pairs[key] if b > 0]
        if not rs:
            continue
        lines.append(f"| {key} | {len(rs)} | {statistics.median(rs):.2f} | {_q(rs, .25):.2f} | "
                     f"{_q(rs, .75):.2f} | {min(rs):.2f} | {max(rs):.2f} |")
    return lines


def gemm_pairs(ours: TableSet, theirs: TableSet) -> dict[str, list[tuple[float, float]]]:
    idx = {(r["gemm_dtype"], r["kernel_source"], r["m"], r["n"], r["k"]): r["latency"]
           for r in theirs.table("gemm").rows}
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in ours.table("gemm").rows:
        hit = idx.get((r["gemm_dtype"], r["kernel_source"], r["m"], r["n"], r["k"]))
        if hit:
            band = "m<=64" if r["m"] <= 64 else ("m<=1024" if r["m"] <= 1024 else "m>1024")
            out[f"gemm {r['gemm_dtype']} {r['kernel_source']} ({band})"].append(
                (r["latency"], hit))
    return out


def moe_pairs(ours: TableSet, theirs: TableSet) -> dict[str, list[tuple[float, float]]]:
    idx = {(r["moe_dtype"], r["num_experts"], r["topk"], r["hidden_size"], r["inter_size"],
            r["num_tokens"]): r["latency"] for r in theirs.table("moe").rows}
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in ours.table("moe").rows:
        hit = idx.get((r["moe_dtype"], r["num_experts"], r["topk"], r["hidden_size"],
                       r["inter_size"], r["num_tokens"]))
        if hit:
            band = "tokens<=64" if r["num_tokens"] <= 64 else "tokens>64"
            out[f"moe {r['moe_dtype']} E{r['num_experts']} k{r['topk']} "
                f"{r['hidden_size']}x{r['inter_size']} ({band})"].append((r["latency"], hit))
    return out


def _heads(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (r["num_heads"], r["num_key_value_heads"], r["head_dim"], r.get("window_size") or 0,
            r.get("kv_cache_dtype") or "bfloat16", r.get("kernel_source"))


def attn_pairs(ours: TableSet, theirs: TableSet, table: str, a_col: str, b_col: str,
               ) -> dict[str, list[tuple[float, float]]]:
    grids: dict[tuple[Any, ...], dict[tuple[float, float], float]] = defaultdict(dict)
    for r in theirs.table(table).rows:
        if r.get("sinks") or (table == "context_attention" and r.get("batch_size") != 1):
            continue
        grids[_heads(r)][(float(r[a_col]), float(r[b_col]))] = float(r["latency"])
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in ours.table(table).rows:
        if r.get("sinks"):
            continue
        grid = grids.get(_heads(r))
        if not grid:
            continue
        a, b = float(r[a_col]), float(r[b_col])
        amax = max(k[0] for k in grid)
        bmax = max(k[1] for k in grid)
        if a > amax or b > bmax or (table == "context_attention" and b > 0):
            continue
        read = interp2(grid, a, b)
        if read.extrapolated:
            continue
        out[f"{table} {r['num_heads']}/{r['num_key_value_heads']}x{r['head_dim']}"
            f"{' w' + str(r['window_size']) if r.get('window_size') else ''}"].append(
            (r["latency"], read.ms))
    return out


def gdn_pairs(ours: TableSet, theirs: TableSet) -> dict[str, list[tuple[float, float]]]:
    """Gated DeltaNet per phase (AIConfigurator's kernels of a phase summed; its prefill core
    is FlashInfer's chunk kernel, servelab's the FLA Triton one vLLM 0.26 runs without
    FlashInfer)."""
    def key(r: Mapping[str, Any]) -> tuple[Any, ...]:
        x = r["batch_size"] if r["phase"] == "generation" else r["num_tokens"]
        return (r["phase"], r["num_k_heads"], r["head_k_dim"], r["num_v_heads"],
                r["head_v_dim"], x)

    idx = {key(r): r["latency"] for r in theirs.table("gdn").rows
           if r["phase"] == "generation" or r["batch_size"] == 1}
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in ours.table("gdn").rows:
        hit = idx.get(key(r))
        if hit:
            out[f"gdn {r['phase']} {r['num_k_heads']}/{r['num_v_heads']}x{r['head_k_dim']} "
                f"state {r['state_dtype']}"].append((r["latency"], hit))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hardware", default="h200")
    args = ap.parse_args(argv)
    ours = shipped()[f"{args.hardware}-vllm-0.26.0"]
    theirs = aic.load(args.hardware, "vllm")
    print(f"servelab: {ours.provenance.label()}\nAIConfigurator: {theirs.provenance.label()} "
          f"{dict(theirs.provenance.details)}\n")
    sections: Iterable[tuple[str, dict[str, list[tuple[float, float]]]]] = (
        ("GEMM (exact shapes)", gemm_pairs(ours, theirs)),
        ("fused MoE (exact shapes)", moe_pairs(ours, theirs)),
        ("decode attention (FA3, read at servelab's points)",
         attn_pairs(ours, theirs, "generation_attention", "batch_size", "step")),
        ("prefill attention (FA3, no cached prefix)",
         attn_pairs(ours, theirs, "context_attention", "isl", "prefix")),
        ("Gated DeltaNet (conv + core, per phase)", gdn_pairs(ours, theirs)),
    )
    for title, pairs in sections:
        print(f"### {title}\n")
        print("\n".join(summarize(pairs)))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
