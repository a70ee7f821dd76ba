"""Every command that writes a file checks its output path before any long work (issue 33).

Real unwritable paths, no patches: a path through a regular file, an existing directory given
as a file name, and a directory of sysfs (where even root may not create files). Each case ends
in one line naming the path and exit 2, and the measuring commands send no request first.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tests.bench.cli import servelab

from servelab.errors import OutputPathError
from servelab.outfile import check_output_dir, check_output_file, write_json, write_text
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


def _bad_files(tmp: Path) -> list[tuple[Path, str]]:
    (tmp / "afile").write_text("x")
    (tmp / "adir").mkdir(exist_ok=True)
    cases = [(tmp / "afile" / "out.json", "not a directory"),
             (tmp / "adir", "is a directory")]
    if Path("/sys/kernel").is_dir():
        cases.append((Path("/sys/kernel/servelab-out.json"), "cannot write here"))
    return cases


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], path: Path, needle: str) -> None:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in proc.stderr, err
    assert len(err.splitlines()) == 1 and str(path) in err and needle in err, err


def test_checks_name_the_path_and_the_reason(tmp_path: Path) -> None:
    for path, needle in _bad_files(tmp_path):
        with pytest.raises(OutputPathError, match=needle) as exc:
            check_output_file(path)
        assert str(path) in str(exc.value)
    with pytest.raises(OutputPathError, match="not a directory"):
        check_output_dir(tmp_path / "afile")
    check_output_file(tmp_path / "new" / "deeper" / "out.json")  # creatable: fine
    assert not (tmp_path / "new").exists()  # a check writes nothing that stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_written_files_have_normal_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        write_text(tmp_path / "sub" / "b.txt", "hi\n")
    finally:
        os.umask(old)
    for p in (tmp_path / "a.json", tmp_path / "sub" / "b.txt"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert (tmp_path / "a.json").read_text() == '{\n "x": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "sub"]  # no temp left


_WRITE_BIG = """
import resource, signal, sys
from pathlib import Path
from servelab.errors import OutputPathError
from servelab.outfile import write_text
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_text(Path(sys.argv[1]), "y" * 100_000)
except OutputPathError as exc:
    print(exc)
"""


def test_a_failed_write_keeps_the_old_file_and_says_why(tmp_path: Path) -> None:
    """The kernel refuses the write (file-size limit: the same path as a full disk)."""
    target = tmp_path / "result.json"
    target.write_text("old\n")
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    assert hard == resource.RLIM_INFINITY or hard > 4096
    proc = subprocess.run([sys.executable, "-c", _WRITE_BIG, str(target)], capture_output=True,
                          text=True, timeout=60, check=True)
    assert str(target) in proc.stdout and "cannot write: File too large" in proc.stdout
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@pytest.mark.timeout(120)
def test_bench_and_capacity_check_their_outputs_before_sending_a_request(
        tmp_path: Path) -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.001)) as srv:
        base = ["--model", "synthetic", "--prompt-lens", "8", "--output-len", "4"]
        for path, needle in _bad_files(tmp_path):
            _one_line_exit_2(servelab("bench", srv.base_url, *base, "--out", str(path)),
                             path, needle)
            _one_line_exit_2(servelab("capacity", srv.base_url, "--slo", "ttft_p50=500",
                                      "--prompt-lens", "8", "--model", "synthetic",
                                      "--out", str(path)), path, needle)
        export = tmp_path / "afile"
        _one_line_exit_2(servelab("bench", srv.base_url, *base, "--export-vllm", str(export)),
                         export, "not a directory")
        assert srv.counters()["generation_requests"] == 0


@pytest.mark.timeout(120)
def test_file_writing_commands_fail_in_one_line(tmp_path: Path) -> None:
    for path, needle in _bad_files(tmp_path):
        if path.is_dir():
            continue  # recipe new: an existing path needs --force (its own message)
        _one_line_exit_2(servelab("recipe", "new", str(path)), path, needle)
        _one_line_exit_2(servelab("hardware", "probe", "--copy-mib", "1", "--reps", "1",
                                  "--matmul-n", "8", "-o", str(path)), path, needle)
    bad_dir = tmp_path / "afile" / "replica"
    _one_line_exit_2(servelab("synth", "replica", str(bad_dir)), bad_dir, "not a directory")
    db = tmp_path / "results.db"
    from servelab.store import open_store

    with open_store(f"sqlite:///{db}"):
        pass
    for site in (tmp_path / "afile", tmp_path / "afile" / "site"):
        proc = servelab("site", "build", str(site), "--db", str(db))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert str(tmp_path / "afile") in proc.stderr and len(proc.stderr.splitlines()) == 1
