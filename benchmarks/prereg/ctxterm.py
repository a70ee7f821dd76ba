"""llama.cpp's decode context term (issue 30): the fit's own decode numbers without the term
and with it, against the held-out points (benchmarks/RESULTS.md).

    .venv/bin/python benchmarks/prereg/ctxterm.py CPU_BEFORE.json CPU_AFTER.json \\
        SPARK_BEFORE.json SPARK_AFTER.json EXPORT.json [EXPORT ...]

``CPU_*``: ``llamacpp_sets.py predict cpu`` files (the twelve host builds; the check set is the
qwen2 family and the llama Q5_K_M build); ``SPARK_*``: ``builds.py predict`` files (the DGX
Spark's gpt-oss-20b MXFP4 decode at a held-out depth, 8,208, and NVIDIA's figure at 2,112);
``EXPORT``: the three passes' run exports (benchmarks/cpu/results/runs-llamacpp-cpu*.json).
Before and after are planned from the same priors table by servelab without and with the term.
Prints Markdown: per point the measured value(s), each fit's number and its error
(measured / fit - 1), and the median and largest |error| per context length.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from llamacpp_sets import measured  # benchmarks/prereg/llamacpp_sets.py


def _points(path: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return {(p.get("recipe") or p["build"] + "@" + p["hardware"], p["kind"], p["length"]): p
            for p in doc["points"]}


def _summary(name: str, errs: dict[int, list[tuple[float, float]]]) -> None:
    for n, pairs in sorted(errs.items()):
        b = [abs(x) for x, _ in pairs]
        a = [abs(y) for _, y in pairs]
        print(f"| {name} | {n} | {len(pairs)} | {statistics.median(b):.1%} / {max(b):.1%} "
              f"| {statistics.median(a):.1%} / {max(a):.1%} "
              f"| {statistics.mean(x for x, _ in pairs):+.1%} | "
              f"{statistics.mean(y for _, y in pairs):+.1%} |")


def main(args: list[str]) -> int:
    if len(args) < 5:
        sys.exit(__doc__)
    cpu_b, cpu_a, sp_b, sp_a = (_points(a) for a in args[:4])
    passes = [measured(Path(e)) for e in args[4:]]
    print("| build | role | len | measured (passes) | fit without the term | error | "
          "fit with the term | error |")
    print("|---|---|---|---|---|---|---|---|")
    held: dict[int, list[tuple[float, float]]] = {}
    calib: dict[int, list[tuple[float, float]]] = {}
    for key, b in cpu_b.items():
        recipe, kind, n = key
        a = cpu_a.get(key)
        if kind != "decode" or a is None or not b["fitted_tok_s"] or not a["fitted_tok_s"]:
            continue
        got = [p[key] for p in passes if key in p]
        good = [m for m, lo, hi, _ in got if (hi - lo) / 2 / m <= 0.10]  # a wide CI: flagged
        eb = [m / b["fitted_tok_s"] - 1 for m in good]
        ea = [m / a["fitted_tok_s"] - 1 for m in good]
        into = held if b["role"] == "check" else calib
        into.setdefault(n, []).extend(zip(eb, ea, strict=True))
        cells = " / ".join(f"{m:,.0f}" + ("" if m in good else " (wide CI)") for m, *_ in got)
        print(f"| {recipe.removeprefix('llamacpp-')} | {b['role']} | {n} | {cells} "
              f"| {b['fitted_tok_s']:,.0f} | {' / '.join(f'{e:+.0%}' for e in eb)} "
              f"| {a['fitted_tok_s']:,.0f} | {' / '.join(f'{e:+.0%}' for e in ea)} |")
    spark: dict[int, list[tuple[float, float]]] = {}
    for key, b in sp_b.items():
        build, kind, n = key
        a = sp_a.get(key)
        if (kind != "decode" or not build.endswith("@dgx-spark") or b["engine"] != "llamacpp"
                or a is None or not b.get("fitted_tok_s") or not a.get("fitted_tok_s")):
            continue
        m = b["measured_tok_s"]
        eb, ea = m / b["fitted_tok_s"] - 1, m / a["fitted_tok_s"] - 1
        if b["role"] == "check":
            spark.setdefault(n, []).append((eb, ea))
        print(f"| {build.removesuffix('@dgx-spark')} (DGX Spark) | {b['role']} | {n} | {m:,.2f} "
              f"| {b['fitted_tok_s']:,.1f} | {eb:+.1%} | {a['fitted_tok_s']:,.1f} | {ea:+.1%} |")
    print("\n| set | context | points | without: median / max abs. error "
          "| with: median / max | mean error without | with |")
    print("|---|---|---|---|---|---|---|")
    _summary("CPU check set (held out)", held)
    _summary("CPU calibration builds (in the fit)", calib)
    _summary("DGX Spark checks (held out)", spark)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
