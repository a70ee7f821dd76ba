"""How long ``servelab plan --concurrency --slo`` takes over AIConfigurator's H200 tables at two
revisions, side by side in one run (the capacity search prices thousands of engine steps).

    .venv/bin/python benchmarks/ops/plan_slo_speed.py BASE_REV [NEW_REV] [--repeats N]

Each revision is checked out into a temporary git worktree and its sources run under this
checkout's Python (``PYTHONPATH=<worktree>/src``) on the same gpt-oss-120b header replica
(``servelab synth replica --model gpt-oss-120b``), alternating revisions per repeat; the JSON
outputs must be identical. Prints each wall time, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARGS = ("-H", "h200", "--no-store", "--json", "--prompt-lens", "1024", "--concurrency",
        "1,16,64", "--slo", "tpot_p99=100,ttft_p99=3000")


def _run(src: Path, replica: Path) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "servelab", "plan", str(replica), *ARGS],
                         capture_output=True, text=True, check=False,
                         env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    if out.returncode not in (0, 1):
        raise SystemExit(f"{src}: {out.stderr}")
    return time.perf_counter() - t, out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new", nargs="?", default="HEAD")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for name, rev in (("base", a.base), ("new", a.new)):
            tree = Path(tmp) / name
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                            str(tree), rev], check=True)
            trees[name] = tree
        try:
            replica = Path(tmp) / "gpt-oss-120b"
            subprocess.run([sys.executable, "-m", "servelab", "synth", "replica", str(replica),
                            "--model", "gpt-oss-120b"], check=True, capture_output=True,
                           env={"PYTHONPATH": str(trees["new"] / "src"), "PATH": "/usr/bin"})
            times: dict[str, list[float]] = {"base": [], "new": []}
            outs: dict[str, str] = {}
            for i in range(a.repeats):
                for name in (("base", "new") if i % 2 == 0 else ("new", "base")):
                    s, out = _run(trees[name] / "src", replica)
                    times[name].append(s)
                    outs[name] = out
                    print(f"{name} ({a.base if name == 'base' else a.new}): {s:.1f} s",
                          flush=True)
            same = outs["base"] == outs["new"]
            b, n = statistics.median(times["base"]), statistics.median(times["new"])
            print(f"median: base {b:.1f} s, new {n:.1f} s, ratio base/new {b / n:.2f}x; "
                  f"outputs {'identical' if same else 'DIFFER'}")
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tree)], check=False)


if __name__ == "__main__":
    main()
