"""Write what servelab's operator-model calibration needs of the stored H200 runs into the
package (``src/servelab/ops/data/h200-vllm-0.26.0/runs.json``): each stored build's config
(benchmarks/gpu/gen_checkpoint.py's ARCHS entry cut to the build's layers, as
benchmarks/ops/builds.py rebuilds it) and storage layout, and the host floors the stored
2-4-layer probe runs measured (benchmarks/gpu/results/*/probes-h200.json: the median decode
step of each), then the calibration servelab.predict.ops_source fits on them
(``calibration.json``: the corrections on every family, each stored point predicted with its
family left out, the stage kept per kind and its interval). The runs' measured points
themselves are the shipped priors' H200 vLLM rows (servelab.predict.priors);
servelab.predict.ops_source joins the two.

    .venv/bin/python benchmarks/ops/export_runs.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from builds import build  # noqa: E402

from servelab.predict.ops_source import calibration_doc, refit  # noqa: E402
from servelab.predict.priors import load_priors  # noqa: E402

KEY = "h200-vllm-0.26.0"
OUT = ROOT / "src" / "servelab" / "ops" / "data" / KEY / "runs.json"
CAL = OUT.with_name("calibration.json")
PROBES = sorted((ROOT / "benchmarks" / "gpu" / "results").glob("*/probes-h200.json"))
_PROBE_FAMILY = {"llama": "llama", "qwen3-30b": "qwen3_moe", "qwen3-next": "qwen3_hybrid"}


def floors() -> list[dict[str, Any]]:
    out = []
    for f in PROBES:
        doc = json.loads(f.read_text())
        for r in doc["runs"] if isinstance(doc, dict) else doc:
            fam = next((v for k, v in _PROBE_FAMILY.items() if r["model_id"].startswith(k)),
                       None)
            tpots = [s["tpot_s"] for s in r.get("samples", []) if s.get("tpot_s")]
            if fam and tpots:
                out.append({"family": fam, "ms": statistics.median(tpots) * 1e3,
                            "model": r["model_id"],
                            "source": str(f.relative_to(ROOT))})
    return out


def main() -> int:
    builds: dict[str, Any] = {}
    for s in load_priors().samples:
        if s.hardware != "h200" or s.engine != "vllm" or s.spec_method:
            continue
        b = build(str(s.build))
        if b is None:
            raise SystemExit(f"no operator model for build {s.build}")
        builds[b.name] = {"config": b.config, "layout": b.fmt}
    doc = {"schema": "servelab.ops.runs/1",
           "source": "benchmarks/ops/export_runs.py: configs from benchmarks/gpu/"
                     "gen_checkpoint.py (ARCHS), floors from stored probe runs",
           "builds": dict(sorted(builds.items())), "floors": floors()}
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(builds)} builds, {len(doc['floors'])} floors")
    cal = refit(KEY)
    CAL.write_text(json.dumps(calibration_doc(cal), indent=1) + "\n")
    print(f"wrote {CAL.relative_to(ROOT)}: " + "; ".join(
        f"{ch.kind}: {ch.stage}, +-{ch.percent:.0f}% ({ch.points} points, {ch.families} "
        "families)" for ch in (cal.decode, cal.prefill)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
