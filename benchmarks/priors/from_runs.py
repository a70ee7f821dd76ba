"""Turn servelab's own run exports into rows of the shipped priors table.

    .venv/bin/python benchmarks/priors/from_runs.py EXPORT.json [EXPORT.json ...] \
        --source "servelab's own H200 runs (benchmarks/gpu/results, 2026-12-02/03)"

Prints one ``[[sample]]`` TOML row per measured single-stream point (the same samples
``servelab calibration report`` uses: servelab.evidence.runs.samples_from_run), with the
build, kernel path, layer count, bytes and FLOPs servelab planned for it. Paste them into
src/servelab/predict/priors.toml and bump its version.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servelab.evidence.runs import samples_from_runs
from servelab.predict.keys import BuildKey
from servelab.store.exchange import run_from_dict


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _base(name: str, kernel_path: str) -> str:
    """``name`` less the GGUF type its kernel path names (``gguf-q4_k_m`` -> ``-q4-k-m``)."""
    if not kernel_path.startswith("gguf-"):
        return name
    ftype = kernel_path.split()[0].removeprefix("gguf-").replace("_", "-")
    return name.removesuffix(f"-{ftype}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("exports", nargs="+", type=Path)
    ap.add_argument("--source", required=True, help="where the measurements come from")
    ap.add_argument("--engine-version", default=None, help="override the recorded version")
    ap.add_argument("--gguf-base", action="store_true", help=(
        "name a GGUF run's row by its base model: the served name less its '-<gguf type>' "
        "suffix (calib-llama-q4-k-m -> calib-llama), so that leave-one-model-out leaves "
        "every GGUF type of one model out together"))
    args = ap.parse_args(argv)
    runs = []
    for path in args.exports:
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs += [run_from_dict(r, source=str(path)) for r in doc["runs"]]
    versions = {r.model_id or r.recipe_name: r.engine_version for r in runs}
    seen: set[tuple[BuildKey, str, int, bool]] = set()
    newest_first = sorted(runs, key=lambda r: r.started_at, reverse=True)
    for s in samples_from_runs(newest_first):
        key = (s.build, s.kind, s.length, s.eager)
        if key in seen:  # a repeated run of the same build in the same regime: keep the newest
            continue
        seen.add(key)
        name = _base(s.build.model, s.kernel_path) if args.gguf_base else s.build.model
        row = {
            "model": name,
            **({"family": s.build.family} if s.build.family else {}),
            "engine": s.engine,
            "engine_version": (args.engine_version or versions.get(name)
                               or versions.get(s.build.model) or ""),
            "kernel_path": s.kernel_path,
            "compute": s.compute,
            "hardware": s.hardware,
            "kind": s.kind,
            "length": s.length,
            "layers": s.layers,
            "expert_slots": s.expert_slots,
            "platform": s.platform,
            **({"eager": True} if s.eager else {}),
            **({"linear_layers": s.linear_layers} if s.linear_layers else {}),
            "bytes_read": int(s.bytes_read),
            "flops": float(s.flops),
            **({"expert_flops": float(s.expert_flops)} if s.expert_flops else {}),
            "tok_s": round(s.tok_s, 2),
            "source": args.source,
        }
        if s.is_step:  # a drafting run: one verification step per row, tok_s in steps/s
            row["spec_method"] = s.spec_method
            row["draft_passes"] = s.draft_passes
            row["note"] = s.source[s.source.index("(") + 1 : -1]
        print("\n[[sample]]")
        for k, v in row.items():
            print(f"{k} = {_toml(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
