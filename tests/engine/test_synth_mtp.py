"""``[model] synth_mtp``: the tiny model servelab builds, plus a random MTP head, cached apart
from the model without one (real files, real safetensors headers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.serve.recipe import ModelSection
from servelab.serve.resolved import ensure_synth_model, synth_model_dir

OVERRIDES: dict[str, object] = {"head_dim": 32}


def test_synth_mtp_adds_a_head_to_the_same_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path))
    plain = synth_model_dir("qwen3_next", OVERRIDES)
    with_head = synth_model_dir("qwen3_next", OVERRIDES, mtp=True)
    assert plain != with_head
    assert ensure_synth_model("qwen3_next", OVERRIDES, mtp=True) == with_head
    assert (plain / "config.json").exists()  # the base model, built on the way
    cfg = json.loads((with_head / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1
    base, head = (build_report(load_checkpoint(d)) for d in (plain, with_head))
    assert head.mtp_tensors > 0 and base.mtp_tensors == 0 and head.mtp_declared_layers == 1
    assert head.total_bytes == base.total_bytes + head.mtp_bytes
    # built once: a second call is the cache
    mtime = (with_head / "config.json").stat().st_mtime_ns
    assert ensure_synth_model("qwen3_next", OVERRIDES, mtp=True) == with_head
    assert (with_head / "config.json").stat().st_mtime_ns == mtime


def test_synth_mtp_only_where_an_mtp_head_exists() -> None:
    ModelSection(synth="qwen3_next", synth_mtp=True)
    with pytest.raises(ValidationError, match="synth_mtp applies to"):
        ModelSection(synth="llama", synth_mtp=True)
