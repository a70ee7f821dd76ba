"""Pre-register servelab's operator-model predictions for two H200 builds of families servelab
has never timed on the H200 (issue 39): Gemma-3-27B (62 layers, 5 sliding of window 1,024
per full one) and Nemotron-Nano-9B-v2 (Mamba2 hybrid: 27 Mamba2 + 4 attention + 25 ReLU^2
MLP layers), both BF16 at published dimensions, vLLM 0.26.0's dummy loader.

    PYTHONPATH=src .venv/bin/python benchmarks/prereg/ops_h200_families.py \\
        -o benchmarks/prereg/ops-h200-families/ops-before.json

What is predicted, for each build, with the operator model exactly as it stood at the commit
this file was written in (servelab.ops over the shipped H200 tables; corrections from
benchmarks/peer_aiconfigurator.py's method, fitted on EVERY family the project holds, since
neither build's family is among them):

* single stream: decode TPOT (ms) at prompts of 512 and 2,048 tokens with 128 output tokens
  (one decode step at the prompt plus half the output), and prefill TTFT (ms) at 512 and
  2,048 (one step of the whole prompt, no CUDA graph);
* closed loop (servelab.ops.serving.closed_loop over the same corrected step times): TPOT,
  TTFT and output tok/s at 1, 4, 16 and 64 clients, prompts of 512 and 2,048, 128 output;
* the interval: the 90th percentile of |log error| of the family-left-out predictions of
  every stored H200 point (decode and prefill separately); load points borrow the decode
  width for TPOT / throughput and the prefill width for TTFT (no load run was ever scored by
  the operator model when this was written).

The device then runs benchmarks/gpu/gemma-3-27b-bf16-h200.toml and
nemotron-nano-9b-v2-bf16-h200.toml (device_steps.sh CAL_SPECS/CAL_RECIPES); score with
benchmarks/prereg/ops_h200_families_score.py.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

from gen_checkpoint import ARCHS  # noqa: E402
from peer_aiconfigurator import (  # noqa: E402
    HALF_OUTPUT,
    _fit_isolation,
    _ops_ms,
    points,
    predict_ops,
    probe_floors,
)

from servelab.ops.costs import Costs  # noqa: E402
from servelab.ops.model import step_model  # noqa: E402
from servelab.ops.serving import closed_loop  # noqa: E402
from servelab.ops.step import EngineSteps, StepShape, step_time  # noqa: E402
from servelab.ops.tables import shipped  # noqa: E402

BUILDS = {"gemma-3-27b-bf16-random": "gemma-3-27b",
          "nemotron-nano-9b-v2-bf16-random": "nemotron-nano-9b-v2"}
PROMPTS = (512, 2048)
OUTPUT = 128
CONCURRENCY = (1, 4, 16, 64)


def _p90_log(errs: list[float]) -> float:
    a = sorted(abs(math.log(1 + e)) for e in errs)
    return a[min(len(a) - 1, math.ceil(0.9 * len(a)) - 1)]


def corrections(costs: Costs) -> tuple[dict[str, float], dict[str, float]]:
    """(corrections fitted on every stored point, held-out widths per kind)."""
    ps = points()
    predict_ops(ps, None)  # family-left-out corrected predictions of the stored points
    width = {kind: _p90_log([p.corrected_ms / p.measured_ms - 1 for p in ps
                             if p.kind == kind and not p.device_only])
             for kind in ("decode", "prefill")}
    # a family none of the stored points belongs to: every point and probe enters
    from builds import build
    models = {p.build: build(p.build).model() for p in ps}  # type: ignore[union-attr]
    iso = _fit_isolation([(q, models[q.build]) for q in ps if q.device_only], costs)
    floor = statistics.median(ms for _, ms in probe_floors())
    adj = {id(q): _ops_ms(q, models[q.build], costs, iso) for q in ps}
    c = {"floor_ms": floor, "isolation_frac": iso[0], "isolation_cap_ms": iso[1]}
    for kind in ("decode", "prefill"):
        c[kind] = statistics.median(
            q.measured_ms - adj[id(q)] for q in ps
            if q.kind == kind and not q.device_only and (kind == "prefill" or adj[id(q)] > floor))
    return c, width


def _interval(ms: float, w: float) -> list[float]:
    return [ms * math.exp(-w), ms * math.exp(w)]


def predict(name: str, arch: str, costs: Costs, c: dict[str, float],
            width: dict[str, float]) -> dict[str, Any]:
    model = step_model(json.loads(json.dumps(ARCHS[arch])), None, name=name)
    eng = EngineSteps(isolation_frac=c["isolation_frac"], isolation_cap_ms=c["isolation_cap_ms"])
    eager = EngineSteps(cuda_graph_max=0, isolation_frac=c["isolation_frac"],
                        isolation_cap_ms=c["isolation_cap_ms"])

    def step_ms(shape: StepShape) -> float:
        st = step_time(model, costs, shape, eng)
        if shape.decode_only:
            return max(st.total_ms + c["decode"], c["floor_ms"])
        return st.total_ms + c["decode"]

    single = []
    for p in PROMPTS:
        dec = step_ms(StepShape.decode(1, p + HALF_OUTPUT))
        pre = step_time(model, costs, StepShape.prefill(p), eager).total_ms + c["prefill"]
        single.append({"prompt": p, "output": OUTPUT,
                       "tpot_ms": dec, "tpot_ms_interval": _interval(dec, width["decode"]),
                       "ttft_ms": pre, "ttft_ms_interval": _interval(pre, width["prefill"])})
    load = []
    request_ms = max(c["prefill"] - c["decode"], 0.0)
    for p in PROMPTS:
        for n in CONCURRENCY:
            s = closed_loop(step_ms, n, p, OUTPUT, request_ms=request_ms)
            load.append({"concurrency": n, "prompt": p, "output": OUTPUT,
                         "tpot_ms": s.tpot_ms,
                         "tpot_ms_interval": _interval(s.tpot_ms, width["decode"]),
                         "ttft_ms": s.ttft_ms,
                         "ttft_ms_interval": _interval(s.ttft_ms, width["prefill"]),
                         "output_tok_s": s.output_tok_s,
                         "output_tok_s_interval": _interval(s.output_tok_s, width["decode"]),
                         "kv_tokens_needed": s.kv_tokens, "notes": list(s.notes)})
    return {"build": name, "arch": arch, "family": model.family, "layers": len(model.layers),
            "single_stream": single, "closed_loop": load}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args(argv)
    costs = Costs([shipped()["h200-vllm-0.26.0"]])
    c, width = corrections(costs)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    doc = {"written": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit,
           "tables": shipped()["h200-vllm-0.26.0"].provenance.label(),
           "corrections": c, "width_p90_log": width,
           "method": (__doc__ or "").strip().splitlines()[0],
           "builds": [predict(n, a, costs, c, width) for n, a in BUILDS.items()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for b in doc["builds"]:
        for s in b["single_stream"]:
            print(f"{b['build']} P={s['prompt']}: TPOT {s['tpot_ms']:.2f} ms "
                  f"({1e3 / s['tpot_ms']:.1f} tok/s), TTFT {s['ttft_ms']:.1f} ms")
        for s in b["closed_loop"]:
            print(f"  c={s['concurrency']:>2} P={s['prompt']}: TPOT {s['tpot_ms']:.2f} ms, "
                  f"TTFT {s['ttft_ms']:.0f} ms, {s['output_tok_s']:.0f} tok/s")
    print(f"corrections {c}; widths {width}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
