"""Score the pre-registered operator composition on AIConfigurator's tables
(benchmarks/prereg/2026-12-05-ops-aic-before.json, commit f2ebc2a) against the published
measurements collected afterwards (benchmarks/prereg/ops_aic_published.py).

    .venv/bin/python benchmarks/prereg/ops_aic_score.py [--commit f2ebc2a] [--out OUT.json]

Each measurement is a closed loop of N clients at (ISL, OSL) with its mean TPOT and TTFT.
servelab's prediction is computed by the pre-registration commit's own code (``ops_aic_gpus.py
at ... serving N ISL OSL``, run from a git worktree of that commit: nothing written after it
enters), with its interval (TPOT: the decode width, TTFT: the prefill width). Beside it,
AIConfigurator 0.12.0's own static-batch estimate for the same build and GPU (its vLLM 0.24.0
tables): TPOT = ``predict_decode_latency(N, ISL, OSL) / OSL``, TTFT =
``predict_prefill_latency(1, ISL)`` (one prompt, no queueing: a lower bound by its
construction). A point whose clients' KV (N x (ISL + OSL) tokens) exceeds the GPU's KV room
(0.9 of memory less the weights, at the build's KV bytes per token) is marked: vLLM then
queues clients, which the closed-loop model does not.

Errors are predicted / measured - 1 of the time (positive: predicted slower).

``post hoc``: the same points by the working tree's code, written AFTER this scoring first
ran (benchmarks/RESULTS.md says what changed and why); its errors are not pre-registered.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import ops_aic_published as published  # noqa: E402

DRIVER = r"""
import json, sys
import servelab
sys.path.insert(0, sys.argv[1])
import ops_aic_gpus as pre
pts = json.loads(sys.stdin.read())
out = {"servelab_file": servelab.__file__, "results": []}
for p in pts:
    r = pre.at(p["build"], p["gpu"], "serving", [p["n"], p["isl"], p["osl"]])
    b = [b for b in pre.BUILDS if b.name == p["build"]][0]
    r["weights_bytes"] = b.weight_bytes()
    out["results"].append(r)
json.dump(out, sys.stdout)
"""


def prereg_predictions(commit: str, pts: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the pre-registration commit's ``at`` for every point, in a worktree of it."""
    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "wt"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt),
                        commit], check=True, capture_output=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(wt / "src")}
            proc = subprocess.run(
                [sys.executable, "-c", DRIVER, str(wt / "benchmarks" / "prereg")],
                input=json.dumps(pts), capture_output=True, text=True, env=env, check=True,
                cwd=wt)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)],
                           check=False, capture_output=True)
    res: dict[str, Any] = json.loads(proc.stdout)
    if not res["servelab_file"].startswith(str(wt)):
        raise SystemExit(f"the driver imported servelab from {res['servelab_file']}, not the "
                         "pre-registration worktree")
    return res


def aic_estimates(pts: list[dict[str, Any]]) -> list[dict[str, float | str]]:
    """AIConfigurator's own static-batch TPOT and single-prompt TTFT for each point."""
    import ops_aic_gpus as pre
    from aiconfigurator_core.sdk.engine import EngineHandle

    from servelab.ops import aic

    handles: dict[tuple[str, str], Any] = {}
    out: list[dict[str, float | str]] = []
    for p in pts:
        key = (p["build"], p["gpu"])
        try:
            if key not in handles:
                [b] = [b for b in pre.BUILDS if b.name == p["build"]]
                d = tempfile.mkdtemp()
                (Path(d) / "config.json").write_text(json.dumps(dict(b.config())))
                kw = {k: v for k, v in (("gemm_quant_mode", b.aic_gemm),
                                        ("moe_quant_mode", b.aic_moe)) if v}
                handles[key] = EngineHandle.compile(d, aic.SYSTEMS[p["gpu"]], "vllm", **kw)
            h = handles[key]
            out.append({"tpot_ms": h.predict_decode_latency(p["n"], p["isl"], p["osl"]) /
                        p["osl"], "ttft_ms": h.predict_prefill_latency(1, p["isl"])})
        except Exception as e:  # its refusal, said
            out.append({"error": f"{type(e).__name__}: {e}"[:160]})
    return out


def kv_bytes_per_token(build: str) -> float:
    """KV bytes one token of the build holds over its layers (BF16 KV; a sliding layer
    counted in full, an upper bound)."""
    import ops_aic_gpus as pre

    [b] = [b for b in pre.BUILDS if b.name == build]
    m = b.model()
    return float(sum(2 * la.attention.num_kv_heads * la.attention.head_dim * 2
                     for la in m.layers if la.attention is not None))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commit", default="f2ebc2a")
    ap.add_argument("--out", type=Path,
                    default=HERE / "2026-12-05-ops-aic-after.json")
    args = ap.parse_args(argv)
    import ops_aic_gpus as pre

    pts = [{"build": m.build, "gpu": m.gpu, "n": m.concurrency, "isl": m.prompt,
            "osl": m.output} for m in published.POINTS]
    pred = prereg_predictions(args.commit, pts)
    aic = aic_estimates(pts)
    # the same points by the working tree's code (after the scoring: said as post hoc)
    now = [pre.at(p["build"], p["gpu"], "serving", [p["n"], p["isl"], p["osl"]])
           for p in pts]
    rows = []
    for m, r, a, h in zip(published.POINTS, pred["results"], aic, now, strict=True):
        kv_room = 0.9 * pre.memory_bytes(m.gpu) - r["weights_bytes"]
        kv_need = m.concurrency * (m.prompt + m.output) * kv_bytes_per_token(m.build)
        rows.append({"measured": m.__dict__, "servelab": r, "aiconfigurator": a,
                     "post_hoc": h, "kv_limited": kv_need > kv_room})
    args.out.write_text(json.dumps({"prereg_commit": args.commit, "rows": rows}, indent=1) +
                        "\n", encoding="utf-8")

    print(f"pre-registration commit {args.commit}; servelab imported from the worktree "
          f"({Path(pred['servelab_file']).parts[-3:]})\n")
    print("| GPU | build | N | ISL/OSL | TPOT measured | servelab TPOT (err) [interval] | "
          "post hoc TPOT (err) | AIC TPOT (err) | TTFT measured | servelab TTFT (err) "
          "[interval] | post hoc TTFT (err) | AIC TTFT (err) | KV-limited | source |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    agg: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        m, r, a, h = row["measured"], row["servelab"], row["aiconfigurator"], row["post_hoc"]
        g = f"{m['gpu']} {m['build']}"

        def cell(v: float | None, meas: float | None, lo: float | None = None,
                 hi: float | None = None) -> str:
            if v is None or meas is None:
                return "—"
            s = f"{v:,.2f} ({v / meas - 1:+.0%})"
            if lo is not None and hi is not None:
                s += f" [{lo:,.1f}-{hi:,.1f}]"
            return s

        if "refused" in r:
            print(f"| {m['gpu']} | {m['build']} | {m['concurrency']} | {m['prompt']}/"
                  f"{m['output']} | {m['tpot_ms']} | refused: {r['refused'][:60]} | | | | | "
                  f"| {m['ident'][:40]} |")
            agg[g]["refused"].append(1)
            continue
        kvl = row["kv_limited"]
        for metric in ("tpot", "ttft"):
            meas = m[f"{metric}_ms"]
            if meas is None:
                continue
            v = r[f"{metric}_ms"]
            inside = r[f"{metric}_low_ms"] <= meas <= r[f"{metric}_high_ms"]
            agg[g][f"{metric}_err"].append(v / meas - 1)
            agg[g][f"{metric}_in"].append(inside)
            if not kvl:
                agg[g][f"{metric}_err_fit"].append(v / meas - 1)
            if a.get(f"{metric}_ms") is not None:
                agg[g][f"{metric}_aic"].append(float(a[f"{metric}_ms"]) / meas - 1)
            if h.get(f"{metric}_ms") is not None:
                agg[g][f"{metric}_post"].append(float(h[f"{metric}_ms"]) / meas - 1)
                agg[g][f"{metric}_post_in"].append(
                    h[f"{metric}_low_ms"] <= meas <= h[f"{metric}_high_ms"])
        tp = cell(r["tpot_ms"], m["tpot_ms"], r["tpot_low_ms"], r["tpot_high_ms"])
        print(f"| {m['gpu']} | {m['build']} | {m['concurrency']} | {m['prompt']}/{m['output']} "
              f"| {m['tpot_ms']:.2f} | {tp} | {cell(h.get('tpot_ms'), m['tpot_ms'])} "
              f"| {cell(a.get('tpot_ms'), m['tpot_ms'])} | {m['ttft_ms']:.1f} | "
              f"{cell(r['ttft_ms'], m['ttft_ms'], r['ttft_low_ms'], r['ttft_high_ms'])} | "
              f"{cell(h.get('ttft_ms'), m['ttft_ms'])} | "
              f"{cell(a.get('ttft_ms'), m['ttft_ms'])} | {'yes' if kvl else ''} | "
              f"{'AIC silicon' if 'silicon' in m['source'] else 'GPUStack'} |")

    def st(xs: list[float]) -> str:
        if not xs:
            return "—"
        a = [abs(x) for x in xs]
        return f"{statistics.median(a):.1%} / {max(a):.1%} (n={len(a)})"

    print("\n| GPU / build | TPOT servelab: median / max | TPOT inside | TPOT post hoc (inside) "
          "| TPOT AIC | TTFT servelab | TTFT inside | TTFT post hoc (inside) | TTFT AIC | TPOT "
          "servelab without KV-limited points |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    every: dict[str, list[Any]] = defaultdict(list)
    for g, d in sorted(agg.items()):
        for k, v in d.items():
            every[k].extend(v)
        print(f"| {g} | {st(d['tpot_err'])} | {sum(d['tpot_in'])}/{len(d['tpot_in'])} | "
              f"{st(d['tpot_post'])} ({sum(d['tpot_post_in'])}) | "
              f"{st(d['tpot_aic'])} | {st(d['ttft_err'])} | {sum(d['ttft_in'])}/"
              f"{len(d['ttft_in'])} | {st(d['ttft_post'])} ({sum(d['ttft_post_in'])}) | "
              f"{st(d['ttft_aic'])} | {st(d['tpot_err_fit'])} |")
    print(f"| **all** | {st(every['tpot_err'])} | {sum(every['tpot_in'])}/"
          f"{len(every['tpot_in'])} | {st(every['tpot_post'])} ({sum(every['tpot_post_in'])}) "
          f"| {st(every['tpot_aic'])} | {st(every['ttft_err'])} | "
          f"{sum(every['ttft_in'])}/{len(every['ttft_in'])} | {st(every['ttft_post'])} "
          f"({sum(every['ttft_post_in'])}) | {st(every['ttft_aic'])} | "
          f"{st(every['tpot_err_fit'])} |")
    if every["refused"]:
        print(f"\nrefused points: {len(every['refused'])}")
    print(f"\nwrote {args.out.resolve().relative_to(ROOT)}; the shipped priors model gives no vLLM "
          "prediction on these GPUs (no vLLM prior for them: roofline bound only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
