"""``synth tiny`` and ``synth replica`` never overwrite a checkpoint without --force (issue
33: real shards were silently replaced by sparse zeros)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tests.bench.cli import servelab


def _digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.mark.timeout(300)
def test_an_existing_checkpoint_is_kept_without_force(tmp_path: Path) -> None:
    ckpt = tmp_path / "tiny"
    first = servelab("synth", "tiny", "llama", str(ckpt), "--seed", "1")
    assert first.returncode == 0, first.stderr
    before = _digest(ckpt)
    assert "config.json" in before and "model.safetensors" in before
    for argv in (["synth", "tiny", "llama", str(ckpt), "--seed", "2"],
                 ["synth", "replica", str(ckpt), "--max-shard-bytes", "1000000000"]):
        proc = servelab(*argv)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1, err
        assert f"{ckpt}: already holds a checkpoint (config.json, model.safetensors" in err
        assert "--force" in err
        assert _digest(ckpt) == before  # untouched
    forced = servelab("synth", "tiny", "llama", str(ckpt), "--seed", "2", "--force")
    assert forced.returncode == 0, forced.stderr
    assert _digest(ckpt)["model.safetensors"] != before["model.safetensors"]
