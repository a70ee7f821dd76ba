"""How long ``servelab --help`` takes to start, side by side with the floor it cannot beat.

The floor is a bare ``python -c "import typer"`` (the CLI framework alone). ``servelab --help``
adds Typer's rich help renderer and the root's command list (from summaries, importing no
command module); ``--version`` adds nothing; ``servelab plan --help`` builds one command's
options. Each is run ``--runs`` times as a fresh process; the script prints min and median
wall time, median CPU time and the CPU ratio to the floor, and which heavy libraries
``--help`` imported (it should import none of them). To time another checkout's code with
the same interpreter, put its ``src`` first: ``PYTHONPATH=/path/to/checkout/src``.

    python benchmarks/cli_startup.py --runs 20

``--inspect CKPT`` times instead where ``servelab inspect CKPT`` spends its start-up: the
import of transformers' config classes (``hf_config``) and of torch, which transformers
imports whenever torch is installed, side by side with the same commands in a process where
torch cannot be found (``sys.modules["torch"] = None``: what an install without torch pays;
an experiment, not something servelab does), and whether that changes the report (``--json``
output compared). transformers 5 imports torch from ``configuration_utils`` (through
``generation.configuration_utils`` -> ``logits_process``), from ``utils.type_validators`` (->
``activations``) and in ``PreTrainedConfig.__post_init__`` (``dtype`` turned into a
``torch.dtype``), each behind ``is_torch_available()``, a ``find_spec`` with no setting.

    python benchmarks/cli_startup.py --inspect CKPT --runs 5
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


def heavy_imports_of(argv: list[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The ``heavy`` modules a ``servelab ARGV`` process has loaded when it exits."""
    code = ("import sys, contextlib, io\nfrom servelab.cli.app import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
            "print('\\n'.join(sorted(m for m in sys.modules)))")
    mods = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout.splitlines()
    return sorted({h for h in heavy for m in mods if m == h or m.startswith(h + ".")})


#: Runs ``python -c`` code, or ``-m servelab``, in a process where torch cannot be found.
NO_TORCH = "import sys; sys.modules['torch'] = None; "


def no_torch_servelab(argv: list[str]) -> list[str]:
    """``servelab ARGV`` in a process where ``import torch`` fails as if it were not
    installed (transformers' ``is_torch_available()`` then says False)."""
    code = (NO_TORCH + "import runpy; sys.argv = ['servelab', *sys.argv[1:]]; "
            "runpy.run_module('servelab', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", code, *argv]


def _table(rows: list[tuple[str, tuple[list[float], list[float]]]]) -> None:
    floor = rows[0][1]
    print(f"{'command':<58} {'wall min':>9} {'wall med':>9} {'cpu med':>8} {'× floor':>8}")
    for name, (wall, cpu) in rows:
        ratio = statistics.median(cpu) / statistics.median(floor[1])
        print(f"{name:<58} {min(wall):9.3f} {statistics.median(wall):9.3f} "
              f"{statistics.median(cpu):8.3f} {ratio:8.2f}")


def inspect_startup(ckpt: str, runs: int) -> None:
    """``servelab inspect CKPT`` and the imports it pays, with torch findable and not,
    interleaved run by run so both see the same load on a shared box."""
    config = "from transformers import AutoConfig, PreTrainedConfig"  # as hf_config imports
    cases = [
        ("python -c 'import typer' (floor)", [sys.executable, "-c", "import typer"]),
        ("python -c 'import torch'", [sys.executable, "-c", "import torch"]),
        ("python -c 'import transformers' (its __init__ alone)",
         [sys.executable, "-c", "import transformers"]),
        ("  same, torch not findable", [sys.executable, "-c", NO_TORCH + "import transformers"]),
        ("transformers' config classes (hf_config's import)", [sys.executable, "-c", config]),
        ("  same, torch not findable", [sys.executable, "-c", NO_TORCH + config]),
        ("servelab inspect CKPT --json", [sys.executable, "-m", "servelab", "inspect", ckpt,
                                          "--json"]),
        ("  same, torch not findable", no_torch_servelab(["inspect", ckpt, "--json"])),
    ]
    times: list[tuple[list[float], list[float]]] = [([], []) for _ in cases]
    for _ in range(runs):
        for (_, argv), (wall, cpu) in zip(cases, times, strict=True):
            w, c = _time(argv, 1)
            wall.extend(w)
            cpu.extend(c)
    _table([(name, t) for (name, _), t in zip(cases, times, strict=True)])
    with_torch, without = (subprocess.run(argv, check=True, capture_output=True, text=True).stdout
                           for argv in (cases[-2][1], cases[-1][1]))
    print("inspect --json output identical without torch:", with_torch == without)
    print("torch imported by servelab inspect:",
          "yes" if heavy_imports_of(["inspect", ckpt], ("torch",)) else "no")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--inspect", metavar="CKPT",
                    help="time servelab inspect CKPT and its imports, with and without torch")
    args = ap.parse_args()
    if args.inspect:
        inspect_startup(args.inspect, args.runs)
        return
    floor = _time([sys.executable, "-c", "import typer"], args.runs)
    servelab = [sys.executable, "-m", "servelab"]
    rows = [("python -c 'import typer' (floor)", floor)]
    for argv in (["--help"], ["--version"], ["plan", "--help"]):
        rows.append(("servelab " + " ".join(argv), _time([*servelab, *argv], args.runs)))
    _table(rows)
    heavy = heavy_imports_of(["--help"])
    print("heavy modules imported by --help:", ", ".join(heavy) or "none")


if __name__ == "__main__":
    main()
