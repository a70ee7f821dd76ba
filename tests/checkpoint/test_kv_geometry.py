"""A config key that decides the KV pool is checked against the tensor shapes (issue 41):
Qwen2.5-7B's config without ``num_attention_heads`` was planned with transformers' default
of 32 heads (head_dim 112, a 14 % too large KV pool per token... of the wrong geometry)
although its ``k_proj`` says 4 x 128."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors

from servelab.checkpoint.kv_geometry import check_kv_geometry
from servelab.cli.app import main
from servelab.errors import ConfigError
from servelab.families import model_dims
from servelab.synth.replica import replica_tensors, write_replica
from servelab.synth.replica_presets import preset_config, preset_layout, preset_names


def _tensors(name: str) -> list[tuple[str, tuple[int, ...]]]:
    plan = replica_tensors(preset_config(name), preset_layout(name, None, None))
    return [(t.name, t.shape) for t in plan.tensors]


@pytest.mark.parametrize("name", preset_names())
def test_every_published_config_agrees_with_its_tensors(name: str) -> None:
    cfg = preset_config(name)  # gemma-3-4b leaves its heads to transformers' defaults
    check_kv_geometry(model_dims(cfg), cfg, _tensors(name), f"{name}/config.json")


@pytest.mark.parametrize(("change", "needle"), [
    ({"num_attention_heads": None}, "num_key_value_heads x head_dim = 4 x 112 = 448 rows "
     "(num_attention_heads 32, head_dim: not in the file, transformers' defaults), but "
     "model.layers.0.self_attn.k_proj.weight has 512; the tensors say head_dim 128 (28 heads"),
    ({"num_key_value_heads": 8}, "8 x 128 = 1024 rows"),
    ({"head_dim": 64}, "4 x 64 = 256 rows"),
    ({"num_hidden_layers": 40}, "num_hidden_layers 40 but the tensors hold 28 decoder layers"),
])
def test_a_contradicting_or_missing_key_is_refused(change: dict[str, int | None],
                                                    needle: str) -> None:
    cfg = {k: v for k, v in {**preset_config("qwen2.5-7b"), **change}.items() if v is not None}
    with pytest.raises(ConfigError) as exc:
        check_kv_geometry(model_dims(cfg), cfg, _tensors("qwen2.5-7b"), "q/config.json")
    assert str(exc.value).startswith("q/config.json: ") and needle in str(exc.value)


def test_a_fused_qkv_projection_is_checked_too() -> None:
    cfg = {**preset_config("phi-4"), "num_key_value_heads": 8}  # phi-4: 40 heads, 10 KV
    with pytest.raises(ConfigError, match=r"\(num_attention_heads \+ 2 x num_key_value_heads\)"):
        check_kv_geometry(model_dims(cfg), cfg, _tensors("phi-4"), "phi/config.json")


def test_plan_and_choose_refuse_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "q25"
    write_replica(out, preset_config("qwen2.5-7b"), preset_layout("qwen2.5-7b", None, None))
    cfg = json.loads((out / "config.json").read_text())
    del cfg["num_attention_heads"]
    (out / "config.json").write_text(json.dumps(cfg))
    assert_one_line_errors([
        (["plan", str(out), "-H", "h100", "--no-store"],
         f"{out}/config.json: layer 0: num_key_value_heads x head_dim = 4 x 112"),
    ], capsys)
    with pytest.raises(SystemExit):  # choose ranks the others and says why this one is out
        main(["choose", str(out), "-H", "h100", "--no-store", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "the tensors say head_dim 128" in doc["builds"][0]["refused"]
    assert doc["pick"] is None
