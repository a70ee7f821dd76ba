"""A measurement is never lost (issue 33): ``bench --out`` keeps a partial result on disk as
the run goes; Ctrl-C prints and writes what was measured and exits 130; a kill leaves the last
snapshot whole; a write the kernel refuses still prints the table and says why.

Real processes against a real (slow) local server; signals and resource limits are the
operating system's own.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.bench.result import load
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

SLOW = SyntheticConfig(ttft_s=0.02, itl_s=0.03)  # 20 tokens ≈ 0.6 s a request
ARGS = ("--model", "synthetic", "--prompt-lens", "8,16,24", "--output-len", "20",
        "--requests", "4", "--max-repeats", "1", "--warmup", "0")
CODE = "from servelab.cli.app import main; main()"


def _start(url: str, out: Path, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CODE, "bench", url, *ARGS, "--out", str(out),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)  # type: ignore[call-overload]


def _wait_for_points(out: Path, n: int, proc: subprocess.Popen[str]) -> dict[str, object]:
    """Wait until the partial file holds ``n`` finished points; return it."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        if out.exists():
            doc = json.loads(out.read_text())  # always whole: written by rename
            assert doc["partial"] == "running"
            if len([p for p in doc["points"] if not any("PARTIAL" in x for x in p["notes"])]) >= n:
                return dict(doc)
        time.sleep(0.05)
    raise AssertionError("no partial result appeared")


@pytest.mark.timeout(120)
def test_ctrl_c_keeps_every_completed_sample(tmp_path: Path) -> None:
    out = tmp_path / "res.json"
    with SyntheticServer(SLOW) as srv:
        proc = _start(srv.base_url, out)
        snap = _wait_for_points(out, 1, proc)
        time.sleep(0.8)  # into the second point: one or more of its requests done
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        sent = srv.counters()["generation_requests"]
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted: partial result kept" in stderr and str(out) in stderr
    res = load(out)
    assert res.partial == "interrupted (Ctrl-C)"
    assert any("PARTIAL" in n for n in res.notes)
    kept = [s for pr in res.points for s in pr.samples if s.ok]
    assert len(kept) >= sum(len(p["samples"]) for p in snap["points"])  # type: ignore[index, arg-type]
    assert len(res.points) == 2 and res.points[0].metrics.completed == 4
    assert 1 <= res.points[1].metrics.completed < 4  # the cut point keeps what finished
    assert sent - len(kept) <= 1  # only the request in flight at Ctrl-C is missing
    assert "prompt 8" in stderr and "prompt 16" in stderr  # the partial table, on stderr
    assert stdout == ""  # --out given: nothing else on stdout


@pytest.mark.timeout(120)
def test_ctrl_c_without_out_keeps_the_result_in_the_data_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "SERVELAB_HOME": str(home)}
    with SyntheticServer(SLOW) as srv:
        proc = subprocess.Popen([sys.executable, "-c", CODE, "bench", srv.base_url, *ARGS,
                                 "--no-record"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        # the first point (4 requests, one at a time) done and the second begun: the server
        # has seen a sixth request start (no file to watch without --out; a fixed sleep
        # missed the first point on a loaded machine)
        end = time.monotonic() + 60
        while srv.counters()["generation_requests"] < 6 and time.monotonic() < end:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    (kept,) = (home / "partial").glob("bench-*.json")
    assert f"written to {kept}" in stderr
    res = load(kept)
    assert res.partial == "interrupted (Ctrl-C)" and res.points[0].metrics.completed >= 1
    # the table, on stdout (no format asked for), whole although stdout is a pipe: the first
    # point's row with its four requests, and the note saying the run was cut
    assert "prompt" in stdout and "conc" in stdout and "…" not in stdout.split("\n•")[0]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in stdout.splitlines()
            if line.startswith("│")]
    assert rows[0][:4] == ["8", "20", "1", "4"]  # prompt, output, conc, ok
    assert "PARTIAL: interrupted (Ctrl-C)" in stdout


@pytest.mark.timeout(120)
def test_a_killed_run_leaves_its_last_snapshot_whole(tmp_path: Path) -> None:
    out = tmp_path / "res.json"
    with SyntheticServer(SLOW) as srv:
        proc = _start(srv.base_url, out)
        _wait_for_points(out, 1, proc)
        proc.kill()
        proc.communicate(timeout=30)
    res = load(out)
    assert res.partial == "running" and res.points[0].metrics.completed == 4
    assert [p.name for p in tmp_path.iterdir()] == ["res.json"]  # no temp file left


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))


@pytest.mark.timeout(120)
def test_a_refused_write_still_prints_the_table_and_says_why(tmp_path: Path) -> None:
    """The kernel refuses every write past 2 kB (as a full disk would refuse it)."""
    out = tmp_path / "res.json"
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        proc = subprocess.run(
            [sys.executable, "-c", CODE, "bench", srv.base_url, *ARGS, "--out", str(out),
             "--json"], capture_output=True, text=True, timeout=90,
            preexec_fn=_limit_file_size, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and str(out) in last and "File too large" in last
    assert "warning:" in proc.stderr  # said once while running, the run went on
    assert "prompt 24" in proc.stderr and proc.stdout == ""  # every point measured, shown
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)
def test_capacity_keeps_its_probes_on_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    with SyntheticServer(SLOW) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-c", CODE, "capacity", srv.base_url, "--slo", "ttft_p50=5000",
             "--variable", "concurrency", "--low", "1", "--high", "64", "--prompt-lens", "8",
             "--output-len", "20", "--model", "synthetic", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 60
        while not out.exists():
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted:" in stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "servelab.capacity-partial/1"
    assert doc["partial"] == "interrupted (Ctrl-C)" and doc["prompt_len"] == 8
    assert len(doc["probes"]) >= 1 and doc["probes"][0]["value"] == 1
