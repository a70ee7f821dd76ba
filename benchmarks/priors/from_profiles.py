"""Turn H200 decode profiles into device-only rows of the shipped priors table.

    .venv/bin/python benchmarks/priors/from_profiles.py \
        benchmarks/gpu/results/profile-2026-12-03/*/profile.json

A profile (benchmarks/gpu/profile_decode.py) measures a decode step's GPU busy time: the
device's work alone, without the host's time per step that bounds a small model. Each becomes
one ``[[sample]]`` row with ``device_only = true`` and ``tok_s`` = 1 / that time, the build's
costs (layers, expert slots, bytes per token) taken from the table's own 512-token decode row
of the same build (the profile's context was under 120 tokens; the KV cache it reads there is
under 1 % of those bytes). Paste them into src/servelab/predict/priors.toml and bump its version.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from from_runs import _toml  # this folder's sibling script: one TOML spelling for both

ROOT = Path(__file__).resolve().parents[2]
PRIORS = ROOT / "src" / "servelab" / "predict" / "priors.toml"
RECIPES = ROOT / "benchmarks" / "gpu"
KEYS = ("model", "engine", "engine_version", "kernel_path", "compute", "hardware", "kind",
        "length", "layers", "expert_slots", "linear_layers", "platform", "bytes_read", "flops")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("profiles", nargs="+", type=Path)
    args = ap.parse_args(argv)
    rows = tomllib.loads(PRIORS.read_text(encoding="utf-8"))["sample"]
    for path in args.profiles:
        doc = json.loads(path.read_text(encoding="utf-8"))
        recipe = tomllib.loads((RECIPES / f"{doc['recipe']}.toml").read_text(encoding="utf-8"))
        served = recipe["model"]["served_name"]
        ref = [r for r in rows if r["model"] == served and r["hardware"] == "h200"
               and r["kind"] == "decode" and r["length"] == 512 and not r.get("device_only")
               and "speculative" not in r.get("note", "")]
        if not ref:
            print(f"{path}: no 512-token decode row for {served} in {PRIORS.name}",
                  file=sys.stderr)
            return 1
        busy_s = doc["summary"]["gpu_busy_us_per_step"] * 1e-6
        out = {k: ref[0][k] for k in KEYS if k in ref[0]}
        out["tok_s"] = round(1.0 / busy_s, 2)
        out["device_only"] = True
        out["source"] = ("servelab's own H200 decode profiles, vLLM 0.26.0 torch profiler "
                         "(benchmarks/gpu/results/profile-2026-12-03)")
        out["note"] = (f"GPU busy {busy_s * 1e3:.3f} ms per decode step over "
                       f"{doc['summary']['steps']} steps ({doc['recipe']})")
        print("[[sample]]")
        for k, v in out.items():
            print(f"{k} = {_toml(v)}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
