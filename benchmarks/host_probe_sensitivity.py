"""How far a ``host`` llama.cpp prediction moves with what the probe of the machine reads.

    .venv/bin/python benchmarks/host_probe_sensitivity.py

The host's calibration rows were measured on servelab's 2-core reference box; a plan fits them
against the ceilings of the machine it plans for (the probe's bandwidth and matmul rate), as
prior and as the bound nothing beats. This plans the two calibrated host GGUFs (llama- and
qwen2-shaped, Q4_K_M) with ``--probe`` files that are the reference box's committed probe
(benchmarks/cpu/results/probe-llamacpp-cpu.json) with its bandwidth scaled, each plan in a
process of its own, and prints the decode interval, its basis, and the predicted tok/s at a
128-token context. Then the bandwidths the calibration runs' own quick probes read
(benchmarks/cpu/results/runs-llamacpp-cpu*.json), for the spread a machine's probe shows from
one run to the next. Deterministic but for the GGUF files, which the recipes make once.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "benchmarks" / "cpu"
PROBE = CPU / "results" / "probe-llamacpp-cpu.json"
FACTORS = (0.25, 0.4, 0.5, 0.75, 1.0, 2.0, 4.0)


def _scaled(doc: dict[str, object], factor: float, where: Path) -> Path:
    out = json.loads(json.dumps(doc))
    bw = out["copy_bandwidth_bytes_per_s"]
    bw["samples"] = [x * factor for x in bw["samples"]]
    bw["best"] *= factor
    bw["median"] *= factor
    path = where / f"probe-x{factor}.json"
    path.write_text(json.dumps(out), encoding="utf-8")
    return path


def _plan(recipe: Path, probe: Path) -> dict[str, object]:
    got = subprocess.run(
        [sys.executable, "-m", "servelab", "plan", str(recipe), "--json", "--no-store",
         "--probe", str(probe)], capture_output=True, text=True, check=False, timeout=600)
    if got.returncode not in (0, 1):
        raise SystemExit(f"plan {recipe.name} failed: {got.stderr.strip()}")
    speed: dict[str, object] = json.loads(got.stdout)["speed"]
    return speed


def main() -> None:
    doc = json.loads(PROBE.read_text(encoding="utf-8"))
    full = doc["copy_bandwidth_bytes_per_s"]["best"]
    print(f"reference box's full probe: {full / 1e9:.1f} GB/s ({PROBE.relative_to(ROOT)})")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'model':8} {'probe GB/s':>10} {'x':>5} {'decode ±':>9} {'tok/s @128':>10}  basis")
        for fam in ("llama", "qwen2"):
            recipe = CPU / f"llamacpp-{fam}-q4-k-m.toml"
            for f in FACTORS:
                speed = _plan(recipe, _scaled(doc, f, Path(tmp)))
                fit = speed["decode_fit"]
                assert isinstance(fit, dict)
                rows = speed["decode"]
                assert isinstance(rows, list)
                tok = rows[0]["predicted_tok_s"]
                rel = fit["rel_error"]
                print(f"{fam:8} {full * f / 1e9:10.1f} {f:5.2f} "
                      f"{'-' if rel is None else f'{rel * 100:.0f}%':>9} "
                      f"{'-' if tok is None else f'{tok:.1f}':>10}  {fit['error_basis']}")
    quick = []
    for path in sorted((CPU / "results").glob("runs-llamacpp-cpu*.json")):
        runs = json.loads(path.read_text(encoding="utf-8"))
        runs = runs["runs"] if isinstance(runs, dict) else runs
        quick += [r["prediction"]["speed"]["bandwidth"] for r in runs
                  if (r.get("prediction") or {}).get("speed", {}).get("bandwidth")]
    if quick:
        print(f"quick probes of the calibration runs: {len(quick)} runs, "
              f"{min(quick) / 1e9:.1f}-{max(quick) / 1e9:.1f} GB/s, "
              f"median {statistics.median(quick) / 1e9:.1f} GB/s "
              f"({statistics.median(quick) / full:.2f}x the full probe)")


if __name__ == "__main__":
    main()
