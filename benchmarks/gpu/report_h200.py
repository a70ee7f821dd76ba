"""Measured vs predicted for the H200 run, from the committed results (no GPU needed).

Reads ``benchmarks/gpu/results/``: the exported run (``run-h200-qwen3-30b-a3b-fp8.json``,
schema servelab.runs/1, with the prediction ``servelab run`` made before serving), the probe
(``probe-h200.json``) and the plan made with the probe's ceilings (``plan-h200-probe.json``).
Prints, per single-stream prompt length: measured decode / prefill tok/s, the pure-roofline
predictions (published h200 figures; probe-measured ceilings), the calibrated prediction
(efficiency fitted from this run's own single-stream points, median of three, so IN-SAMPLE),
achieved bandwidth (measured tok/s x bytes read per token) as % of the probe's copy
bandwidth; then the engine facts and the KV pool, predicted vs the engine log.

    .venv/bin/python benchmarks/gpu/report_h200.py [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from servelab.store.exchange import run_from_dict  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _cost(kind: str, pt: dict[str, Any]) -> float:
    """Bytes read per decoded token, or FLOPs per prefilled token, of one predicted point."""
    if kind == "decode":
        return float(pt["weight_bytes"]) + float(pt["kv_bytes"]) + float(pt["state_bytes"])
    return float(pt["flops"]) / int(pt["prompt_len"])


def rows() -> tuple[list[list[str]], dict[str, Any]]:
    """The comparison table and the facts block (all computed from the result files)."""
    run = run_from_dict(_load("run-h200-qwen3-30b-a3b-fp8.json")["runs"][0])
    probe = _load("probe-h200.json")
    plan_probe = _load("plan-h200-probe.json")
    copy_bw = float(probe["copy_bandwidth_bytes_per_s"]["best"])
    pred = run.prediction or {}
    speed = pred["speed"]
    speed_probe = plan_probe["speed"]
    # In-sample calibration: median efficiency of this run's three single-stream points per
    # kind, against the ceilings the run's own prediction used (published h200 figures).
    # Bytes per decode token = weights + KV + state read (the stored prediction's own
    # ``bytes_per_token`` field is masked by the store's secret redaction: its name contains
    # "token"), prefill FLOPs per token = flops / prompt length.
    ceiling = {"decode": float(speed["bandwidth"]), "prefill": float(speed["compute_rate"])}
    eff = {
        kind: statistics.median(
            run.metric(f"{kind}_tok_s", f"p{pt[key]}-c1").value  # type: ignore[union-attr]
            * _cost(kind, pt)
            / ceiling[kind]
            for pt in speed[kind]
        )
        for kind, key in (("decode", "context_len"), ("prefill", "prompt_len"))
    }
    table: list[list[str]] = []
    for kind, key in (("decode", "context_len"), ("prefill", "prompt_len")):
        for pt, ptp in zip(speed[kind], speed_probe[kind], strict=True):
            n = int(pt[key])
            metric = run.metric(f"{kind}_tok_s", f"p{n}-c1")
            assert metric is not None
            measured = metric.value
            roof, roof_p = float(pt["roofline_tok_s"]), float(ptp["roofline_tok_s"])
            cost = _cost(kind, pt)
            achieved = measured * cost
            if kind == "decode":
                extra = f"{achieved / 1e9:,.0f} GB/s = {100 * achieved / copy_bw:.1f}% of copy"
            else:
                extra = f"{achieved / 1e12:,.0f} TFLOP/s ({pt['bound']}-bound by plan)"
            calibrated = eff[kind] * ceiling[kind] / cost
            table.append(
                [
                    kind,
                    f"{n:,}",
                    f"{measured:,.1f}" if kind == "decode" else f"{measured:,.0f}",
                    f"{metric.ci_low:,.1f}–{metric.ci_high:,.1f}"
                    if kind == "decode"
                    else f"{metric.ci_low:,.0f}–{metric.ci_high:,.0f}",
                    f"{roof:,.0f}",
                    f"{roof_p:,.0f}",
                    f"{calibrated:,.1f}" if kind == "decode" else f"{calibrated:,.0f}",
                    f"{100 * measured / roof_p:.1f}%",
                    extra,
                ]
            )
    facts = run.engine_facts or {}
    kv_pred = pred["kv_pool"]
    info = {
        "engine": f"vllm {run.engine_version}",
        "attention backend": facts.get("attention_backend"),
        "MoE backend": f"{facts.get('moe_backend')} {facts.get('moe_quant')}",
        "weights (log)": f"{facts.get('weights_gib')} GiB in {facts.get('weights_load_s')} s",
        "KV pool predicted": f"{kv_pred['tokens']:,} tokens, {kv_pred['max_concurrency']:.2f}x",
        "KV pool engine log": f"{facts.get('kv_pool_tokens'):,} tokens, "
        f"{facts.get('max_concurrency')}x",
        "KV pool equal": kv_pred["tokens"] == facts.get("kv_pool_tokens"),
        "startup": f"{facts.get('startup_s')} s (init engine {facts.get('init_engine_s')} s, "
        f"graphs {facts.get('graph_capture_s')} s)",
        "probe copy bandwidth": f"{copy_bw / 1e12:.2f} TB/s",
        "probe bf16 / fp8 matmul": f"{probe['matmul_flops_per_s']['bf16']['best'] / 1e12:,.0f} / "
        f"{probe['matmul_flops_per_s']['fp8']['best'] / 1e12:,.0f} TFLOP/s",
        "calibrated efficiency (in-sample)": f"decode {eff['decode']:.3f}, "
        f"prefill {eff['prefill']:.3f} of the published ceilings",
    }
    return table, info


HEAD = [
    "kind",
    "prompt",
    "measured tok/s",
    "95% CI",
    "roofline (h200 published)",
    "roofline (probe ceilings)",
    "calibrated (in-sample)",
    "% of probe roofline",
    "achieved",
]


def main(argv: list[str] | None = None) -> int:
    """Print the table (plain or Markdown)."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = ap.parse_args(argv)
    table, info = rows()
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |")
        print("|" + "---|" * len(HEAD))
        for r in table:
            print("| " + " | ".join(r) + " |")
        print()
        print("| engine fact | value |\n|---|---|")
        for k, v in info.items():
            print(f"| {k} | {v} |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(HEAD)]
        print("  ".join(h.ljust(w) for h, w in zip(HEAD, widths, strict=True)))
        for r in table:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        for k, v in info.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
