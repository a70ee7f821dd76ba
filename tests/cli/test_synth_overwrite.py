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


@pytest.mark.timeout(300)
def test_a_replica_records_the_build_it_replicates(tmp_path: Path) -> None:
    """``--source-repo`` writes servelab-build.json, the explicit identity published figures
    match a local folder by (issue 40); a bad repo id writes nothing."""
    from servelab.published.identity import identify

    bad = servelab("synth", "replica", str(tmp_path / "bad"), "--source-repo", "not-a-repo")
    assert bad.returncode == 2 and not (tmp_path / "bad").exists(), bad.stderr
    out = tmp_path / "fast"
    proc = servelab("synth", "replica", str(out), "--targets", "nvfp4-fast", "--mtp", "fused",
                    "--source-repo", "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast")
    assert proc.returncode == 0, proc.stderr
    ident = identify(str(out))
    assert ident is not None and ident.repo_id == "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast"
