"""No third-party warning reaches the user (issue 41): log records of libraries that install
their own stderr handler (transformers, huggingface_hub), Python warnings, tqdm bars.
A fresh install without torch is tests/cli/test_fresh_install.py."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from servelab.quiet import quiet_libraries


def _library_logger(name: str) -> logging.Logger:
    """A logger as transformers and huggingface_hub set theirs up: a stderr handler of its
    own, not propagating (a handler on the root logger never sees its records)."""
    logger = logging.getLogger(name)
    logger.handlers = [logging.StreamHandler(sys.stderr)]
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    return logger


def test_library_records_and_warnings_are_dropped_inside_and_restored_after(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVELAB_DEBUG", raising=False)
    logger = _library_logger("servelab_test_library")
    with quiet_libraries():
        logger.warning("PyTorch was not found. Models won't be available")
        warnings.warn("a library's deprecation", FutureWarning, stacklevel=1)  # no error
        logger.error("a library's error still shows")
    err = capsys.readouterr().err
    assert "PyTorch" not in err and "error still shows" in err
    logger.warning("after the command")  # the test process is as it was
    assert "after the command" in capsys.readouterr().err
    with pytest.raises(FutureWarning):  # the suite's filterwarnings=error is back
        warnings.warn("again", FutureWarning, stacklevel=1)


def test_servelab_debug_shows_the_libraries_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_DEBUG", "1")
    logger = _library_logger("servelab_test_library_debug")
    with quiet_libraries():
        logger.warning("shown when debugging")
    assert "shown when debugging" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_synth_tiny_draws_no_progress_bar(tmp_path: Path) -> None:
    # transformers' save_pretrained draws "Writing model shards: 100%|███…" on stderr
    proc = subprocess.run(
        [sys.executable, "-c", "from servelab.cli.app import main; main()", "synth", "tiny",
         "llama", str(tmp_path / "tiny")],
        capture_output=True, text=True, timeout=280, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (tmp_path / "tiny" / "config.json").is_file()


def _in_a_terminal(argv: list[str], cwd: Path, columns: int = 80) -> str:
    """``servelab ARGV`` with stdout on a pseudo-terminal ``columns`` wide: what it wrote."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with subprocess.Popen([sys.executable, "-c", "from servelab.cli.app import main; main()",
                           *argv], stdout=follower, stderr=follower, cwd=cwd, env=env) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.timeout(300)
def test_servelabs_own_warning_is_one_line_in_an_80_column_terminal(tmp_path: Path) -> None:
    from servelab.synth.replica import write_replica
    from servelab.synth.replica_presets import preset_config, preset_layout

    write_replica(tmp_path / "nem", preset_config("nemotron-nano-9b-v2"),
                  preset_layout("nemotron-nano-9b-v2", None, None))
    out = _in_a_terminal(["plan", "nem", "-H", "dgx-spark", "--no-store",
                          "--kv-cache-memory-bytes", "1GiB", "--fits"], tmp_path)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    rows = plain.replace("\r", "").splitlines()
    # issue 41: every row fits the terminal (servelab wraps at words, so that a terminal
    # never cuts a row), and the warning is one message: one "warning:", its fix in it
    assert max(map(len, rows)) <= 80, plain
    # (a GB10 plan also warns about vLLM's start-up memory check: one message of its own)
    [at] = [i for i, ln in enumerate(rows) if ln.startswith("warning: max_num_seqs")]
    after = re.sub(r"\s+", " ", " ".join(rows[at:]))
    ends = [i for i in (after.find("CUDA graphs up to"), after.find("warning:", 1)) if i > 0]
    message = after[:min(ends)]  # up to the next message
    assert "fix: pass --max-num-seqs" in message and message.count("warning") == 1, plain
