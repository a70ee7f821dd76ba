"""How long ``servelab --help`` takes to start, side by side with the floor it cannot beat.

The floor is a bare ``python -c "import typer"`` (the CLI framework alone). ``servelab --help``
adds Typer's rich help renderer and the root's command list (from summaries, importing no
command module); ``--version`` adds nothing; ``servelab plan --help`` builds one command's
options. Each is run ``--runs`` times as a fresh process; the script prints min and median
wall time, median CPU time and the CPU ratio to the floor, and which heavy libraries
``--help`` imported (it should import none of them). To time another checkout's code with
the same interpreter, put its ``src`` first: ``PYTHONPATH=/path/to/checkout/src``.

    python benchmarks/cli_startup.py --runs 20
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

HEAVY = ("sqlalchemy", "numpy", "matplotlib", "jinja2", "httpx", "pydantic", "orjson",
         "huggingface_hub", "scipy", "servelab.store", "servelab.pipeline", "servelab.site")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run; CPU time is what a loaded box
    (the 2-core reference machine shared by several jobs) distorts least."""
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        c0, t0 = _cpu(), time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall.append(time.perf_counter() - t0)
        cpu.append(_cpu() - c0)
    return wall, cpu


def heavy_imports_of_help() -> list[str]:
    """The heavy modules a ``servelab --help`` process has loaded when it exits."""
    code = ("import sys\nfrom servelab.cli.app import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print('\\n'.join(sorted(m for m in sys.modules)))")
    mods = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout.splitlines()
    return sorted({h for h in HEAVY for m in mods if m == h or m.startswith(h + ".")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    floor = _time([sys.executable, "-c", "import typer"], args.runs)
    servelab = [sys.executable, "-m", "servelab"]
    rows = [("python -c 'import typer' (floor)", floor)]
    for argv in (["--help"], ["--version"], ["plan", "--help"]):
        rows.append(("servelab " + " ".join(argv), _time([*servelab, *argv], args.runs)))
    print(f"{'command':<34} {'wall min':>9} {'wall med':>9} {'cpu med':>8} {'× floor':>8}")
    for name, (wall, cpu) in rows:
        ratio = statistics.median(cpu) / statistics.median(floor[1])
        print(f"{name:<34} {min(wall):9.3f} {statistics.median(wall):9.3f} "
              f"{statistics.median(cpu):8.3f} {ratio:8.2f}")
    heavy = heavy_imports_of_help()
    print("heavy modules imported by --help:", ", ".join(heavy) or "none")


if __name__ == "__main__":
    main()
