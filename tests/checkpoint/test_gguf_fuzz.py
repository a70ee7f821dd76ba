"""GGUF files that are cut, corrupted or not GGUF at all: each is refused with one
HeaderError naming the file (never numpy's or struct's words, never a hang); a Git LFS
pointer says so; a truncated file says where it ends. The benchmark-sized campaign is
benchmarks/fuzz_parsers.py (figures in benchmarks/RESULTS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from tests.bench.cli import servelab

from servelab.checkpoint.gguf_extent import gguf_extent
from servelab.checkpoint.gguf_format import load_gguf
from servelab.checkpoint.sources import load_checkpoint
from servelab.errors import HeaderError
from servelab.testing.gguf_seed import gguf_mutations, write_seed_gguf

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
pytestmark = pytest.mark.timeout(300)

LFS = (b"version https://git-lfs.github.com/spec/v1\noid sha256:"
       + b"4d7a" * 16 + b"\nsize 2400000000\n")


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_seed_gguf(tmp_path_factory.mktemp("seed") / "seed.gguf").read_bytes()


def test_every_truncation_says_where_the_file_ends(seed: bytes, tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    (tmp_path / "whole.gguf").write_bytes(seed)
    assert gguf_extent(tmp_path / "whole.gguf") == len(seed)
    for n in range(len(seed)):
        path.write_bytes(seed[:n])
        with pytest.raises(HeaderError) as exc:
            load_gguf(path, str(path))
        msg = str(exc.value)
        assert exc.value.rule == "gguf-truncated", msg
        assert msg.startswith(f"{path}: truncated: the file ends at byte {n:,}, before "), msg
        assert "reshape" not in msg and "out of bounds" not in msg


def test_a_git_lfs_pointer_says_run_git_lfs_pull(tmp_path: Path) -> None:
    for name in ("model.gguf", "model.safetensors"):
        path = tmp_path / name
        path.write_bytes(LFS)
        with pytest.raises(HeaderError, match="this is a Git LFS pointer") as exc:
            load_checkpoint(str(path))
        assert exc.value.rule == "lfs-pointer" and "git lfs pull" in str(exc.value)
        proc = servelab("inspect", str(path))
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1, err
        assert str(path) in err and "Git LFS pointer" in err and "git lfs pull" in err


def test_a_truncated_gguf_from_the_command_line(seed: bytes, tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(seed[: len(seed) - 100])
    proc = servelab("inspect", str(path))
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"truncated: the file ends at byte {len(seed) - 100:,}" in err
    assert "Traceback" not in err and "reshape" not in err


def test_mutated_files_are_read_or_refused_with_a_header_error(seed: bytes,
                                                               tmp_path: Path) -> None:
    path = tmp_path / "fuzz.gguf"

    @FUZZ
    @given(gguf_mutations(seed))
    def check(raw: bytes) -> None:
        path.write_bytes(raw)
        try:
            load_gguf(path, str(path))
        except HeaderError as exc:
            assert exc.rule and str(path) in str(exc)

    check()
