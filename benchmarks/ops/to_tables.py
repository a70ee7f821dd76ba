"""Turn the device's measurement rows (measure.py's JSON lines) into a shipped table set.

    .venv/bin/python benchmarks/ops/to_tables.py RESULTS.jsonl[.gz]... \
        --jobs benchmarks/ops/jobs.json --out src/servelab/ops/data/h200-vllm-0.26.0 \
        --command "the device command" [--commit SHA]

Writes ``meta.json`` (provenance: GPU, driver, torch, CUDA, Triton, vLLM, date, script,
commit, command, row counts, errors) and one ``<table>.csv.gz`` per operator file in the
layout :mod:`servelab.ops.tables` documents. Every row is one measured point (the median of
its repetitions); points that failed are counted in ``meta.json`` and left out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from servelab.ops.tables import write_csv  # noqa: E402

GEMM_DTYPE = {
    "bf16": "bfloat16", "fp8_block_cutlass": "fp8_block", "fp8_block_deepgemm": "fp8_block",
    "fp8_tensor": "fp8", "fp8_channel": "fp8_channel", "w4a16_machete": "w4a16",
    "w4a16_marlin": "w4a16", "w8a16_marlin": "w8a16",
}
COLUMNS: dict[str, list[str]] = {
    "gemm": ["kernel_source", "gemm_dtype", "m", "n", "k"],
    "moe": ["kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
            "num_experts", "distribution"],
    "generation_attention": ["kernel_source", "batch_size", "isl", "step", "num_heads",
                             "num_key_value_heads", "head_dim", "window_size", "sinks",
                             "attn_dtype", "kv_cache_dtype"],
    "context_attention": ["kernel_source", "batch_size", "isl", "prefix", "num_heads",
                          "num_key_value_heads", "head_dim", "window_size", "sinks",
                          "attn_dtype", "kv_cache_dtype"],
    "gdn": ["kernel_source", "phase", "batch_size", "num_tokens", "num_k_heads", "head_k_dim",
            "num_v_heads", "head_v_dim", "d_conv", "state_dtype"],
    "mamba": ["kernel_source", "phase", "batch_size", "num_tokens", "num_heads", "head_dim",
              "n_groups", "d_state", "d_conv"],
    "elementwise": ["op_name", "kernel_source", "num_tokens", "width", "heads", "head_dim",
                    "num_experts", "topk"],
    "sampler": ["kernel_source", "batch_size", "vocab", "mode"],
    "host": ["kernel_source", "kernels", "mode", "launch_ms"],
}
TAIL = ["latency", "latency_min", "latency_max", "reps", "timing"]


def read_rows(paths: Iterable[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(provenance headers, measurement rows) of measure.py output files."""
    heads, rows = [], []
    for p in paths:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            for line in fh:
                if not line.strip():
                    continue
                r = json.loads(line)
                (heads if r.get("schema") == "servelab.ops-run/1" else rows).append(r)
    return heads, rows


def table_row(job: Mapping[str, Any], r: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(table name, row) of one measured point."""
    op, p = job["op"], r.get("point")
    base = {"kernel_source": r.get("kernel_source"), **{k: r.get(k) for k in TAIL}}
    if op == "gemm":
        return "gemm", {**base, "gemm_dtype": GEMM_DTYPE[job["fmt"]], "m": p, "n": job["n"],
                        "k": job["k"]}
    if op == "moe":
        return "moe", {**base, "moe_dtype": {"bf16": "bfloat16"}.get(job["fmt"], job["fmt"]),
                       "num_tokens": p, "hidden_size": job["hidden"],
                       "inter_size": job["inter"], "topk": job["topk"],
                       "num_experts": job["experts"], "distribution": "uniform"}
    heads = {"num_heads": job.get("hq"), "num_key_value_heads": job.get("hkv"),
             "head_dim": job.get("d"), "window_size": job.get("window"),
             "sinks": bool(job.get("sinks")), "attn_dtype": "bfloat16",
             "kv_cache_dtype": "bfloat16"}
    if op == "attn_decode":
        return "generation_attention", {**base, **heads, "batch_size": p[0], "isl": 1,
                                        "step": p[1]}
    if op == "attn_prefill":
        return "context_attention", {**base, **heads, "batch_size": 1, "isl": p[0],
                                     "prefix": p[1]}
    if op in ("gdn_prefill", "gdn_decode"):
        decode = op == "gdn_decode"
        return "gdn", {**base, "phase": "generation" if decode else "context",
                       "batch_size": p if decode else 1, "num_tokens": p,
                       "num_k_heads": job["hk"], "head_k_dim": job["dk"],
                       "num_v_heads": job["hv"], "head_v_dim": job["dv"],
                       "d_conv": job["conv"], "state_dtype": r.get("variant")}
    if op in ("mamba_prefill", "mamba_decode"):
        decode = op == "mamba_decode"
        return "mamba", {**base, "phase": "generation" if decode else "context",
                         "batch_size": p if decode else 1, "num_tokens": p,
                         "num_heads": job["heads"], "head_dim": job["hd"],
                         "n_groups": job["groups"], "d_state": job["state"],
                         "d_conv": job["conv"]}
    if op == "sampler":
        return "sampler", {**base, "batch_size": p[0], "vocab": job["vocab"], "mode": p[1]}
    if op == "host":
        return "host", {"kernel_source": r.get("kernel_source"), "kernels": r["kernels"],
                        "mode": r["mode"], "launch_ms": r.get("launch_ms"),
                        "latency": r["latency"]}
    width = {"rms_norm": job.get("hidden"), "silu_mul": job.get("width"),
             "embed": job.get("hidden")}.get(op)
    return "elementwise", {**base, "op_name": op, "num_tokens": p, "width": width,
                           "heads": job.get("heads") or (
                               (job.get("hq") or 0) + (job.get("hkv") or 0)
                               if op == "rope" else job.get("hkv")),
                           "head_dim": job.get("d"), "num_experts": job.get("experts"),
                           "topk": job.get("topk")}


def fit_isolation(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    """(fraction, cap) with which each operator's isolated time t, less min(fraction * t,
    cap), sums to the measured time of whole decoder stacks captured as one graph
    (compose_check.py): a grid search minimizing the squared log error over its stacks."""
    import math

    stacks = doc["stacks"]
    best = (float("inf"), 0.0, 0.0)
    for fi in range(51):
        frac = fi * 0.02
        for ci in range(81):
            cap = ci * 0.0005
            err = 0.0
            for st in stacks:
                pred = sum(max(t - min(frac * t, cap), 0.1 * t) for t in st["isolated_ms"])
                err += math.log(pred / st["stack_ms"]) ** 2
            if err < best[0]:
                best = (err, frac, cap)
    return {"frac": best[1], "cap_ms": best[2], "rms_log_error": (best[0] / len(stacks)) ** .5,
            "stacks": len(stacks), "source": source, "gpu": doc.get("gpu"),
            "floor_ms": doc.get("floor_ms"), "per_node_ms": doc.get("per_node_ms")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--jobs", type=Path, default=HERE / "jobs.json")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--compose", type=Path,
                    help="compose_check.py's output: fit the isolation adjustment on it")
    args = ap.parse_args(argv)
    jobs = {j["id"]: j for j in json.loads(args.jobs.read_text())["jobs"]}
    heads, rows = read_rows(args.results)
    if not heads:
        raise SystemExit("no provenance line in the results")
    h = heads[0]
    tables: dict[str, list[dict[str, Any]]] = defaultdict(list)
    errors: Counter[str] = Counter()
    seen: set[tuple[Any, ...]] = set()
    for r in rows:
        job = jobs.get(r.get("job"))
        if job is None:
            continue
        if "error" in r:
            errors[f"{job['op']}/{job.get('fmt', '')}: {r['error'][:80]}"] += 1
            continue
        if "latency" not in r:
            continue
        name, row = table_row(job, r)
        key = (name, *sorted((k, str(v)) for k, v in row.items() if k not in TAIL))
        if key in seen:  # a point measured twice (a re-run): keep the first
            continue
        seen.add(key)
        tables[name].append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rs in sorted(tables.items()):
        cols = COLUMNS[name] + (["latency"] if name == "host" else TAIL)
        with gzip.open(args.out / f"{name}.csv.gz", "wt", encoding="utf-8") as fh:
            fh.write(write_csv(rs, cols))
        counts[name] = len(rs)
    meta = {
        "source": "servelab",
        "gpu": h.get("gpu"),
        "engine": "vllm",
        "engine_version": h.get("vllm"),
        "date": h.get("date"),
        "driver": h.get("driver"),
        "torch": h.get("torch"),
        "cuda": h.get("cuda"),
        "triton": h.get("triton"),
        "python": h.get("python"),
        "capability": h.get("capability"),
        "sm_count": h.get("sm_count"),
        "nvidia_smi": h.get("nvidia_smi"),
        "script": "benchmarks/ops/measure.py (jobs: benchmarks/ops/jobs.json, grid.py)",
        "commit": args.commit or h.get("commit"),
        "command": args.command,
        "timing": "CUDA events around a CUDA-graph replay (eager where noted), L2 flushed "
                  "(256 MiB) before each repetition, median of 3-25 repetitions, ms",
        "sessions": [{k: x.get(k) for k in ("date", "jobs", "priority", "commit", "gpu",
                                            "driver", "vllm")} for x in heads],
        "rows": counts,
        "errors": dict(errors.most_common()),
    }
    if args.compose:
        meta["isolation"] = fit_isolation(json.loads(args.compose.read_text()),
                                          str(args.compose.resolve().relative_to(HERE.parents[1])))
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps({"rows": counts, "errors": sum(errors.values())}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
