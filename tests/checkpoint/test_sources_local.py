"""Local checkpoints: single file, sharded directory with its index, config files."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors import safe_open

from servelab.checkpoint import load_checkpoint, quantization_config, text_config, vision_config
from servelab.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    HeaderError,
    ShardIndexError,
    UsageError,
)

Copy = Callable[[Path], Path]


def _ref_tensors(directory: Path) -> dict[str, tuple[str, tuple[int, ...], str]]:
    """What the safetensors library itself sees: name -> (dtype, shape, shard)."""
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), framework="numpy") as st:
            for k in st.keys():  # noqa: SIM118
                sl = st.get_slice(k)
                out[k] = (sl.get_dtype(), tuple(sl.get_shape()), f.name)
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "qwen3_next"])
def test_single_file_checkpoint_matches_safetensors(
    tiny_checkpoint: Callable[..., Path], arch: str
) -> None:
    d = tiny_checkpoint(arch)
    src = load_checkpoint(d)
    assert src.kind == "dir" and src.revision is None and src.commit is None
    assert [s.file for s in src.shards] == ["model.safetensors"]
    assert {t.name: (t.dtype, t.shape, t.shard) for t in src.tensors} == _ref_tensors(d)
    assert src.config is not None and src.config["model_type"] == arch
    assert src.generation_config == json.loads((d / "generation_config.json").read_text())
    assert src.quant_config is None and src.index_metadata is None
    size = (d / "model.safetensors").stat().st_size
    assert sum(t.nbytes for t in src.tensors) + 8 + src.shards[0].header_len == size
    side = sum((d / f).stat().st_size for f in ("config.json", "generation_config.json"))
    assert src.bytes_fetched == 8 + src.shards[0].header_len + side
    assert src.warnings == ()


def test_file_path_reads_sibling_configs(tiny_checkpoint: Callable[..., Path]) -> None:
    d = tiny_checkpoint("llama")
    src = load_checkpoint(d / "model.safetensors")
    assert src.kind == "file" and src.config is not None
    assert src.header_sha256 == load_checkpoint(d).header_sha256


def test_sharded_checkpoint(tiny_checkpoint: Callable[..., Path]) -> None:
    d = tiny_checkpoint("qwen3_moe", max_shard_size="300KB")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    src = load_checkpoint(d)
    assert len(src.shards) == len(set(index["weight_map"].values())) > 1
    assert [s.file for s in src.shards] == sorted(s.file for s in src.shards)
    assert {t.name: t.shard for t in src.tensors} == index["weight_map"]
    assert {t.name: (t.dtype, t.shape, t.shard) for t in src.tensors} == _ref_tensors(d)
    assert src.index_metadata == index["metadata"]
    assert sum(t.nbytes for t in src.tensors) == index["metadata"]["total_size"]
    assert src.warnings == ()
    # Identity is the set of headers, not the location.
    single = load_checkpoint(tiny_checkpoint("qwen3_moe"))
    assert single.header_sha256 != src.header_sha256


def _rewrite_index(d: Path, edit: Callable[[dict[str, object]], None]) -> Path:
    p = d / "model.safetensors.index.json"
    index = json.loads(p.read_text())
    edit(index)
    p.write_text(json.dumps(index))
    return p


@pytest.fixture
def sharded(tiny_checkpoint: Callable[..., Path], copy_checkpoint: Copy) -> Path:
    return copy_checkpoint(tiny_checkpoint("llama", max_shard_size="100KB"))


def _first_two_shards(d: Path) -> tuple[str, str]:
    names = sorted(p.name for p in d.glob("model-*.safetensors"))
    return names[0], names[1]


def test_index_lists_a_tensor_no_shard_has(sharded: Path) -> None:
    a, _ = _first_two_shards(sharded)

    def add(index: dict[str, object]) -> None:
        wm = index["weight_map"]
        assert isinstance(wm, dict)
        wm["ghost.weight"] = a

    _rewrite_index(sharded, add)
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(sharded)
    assert info.value.rule == "index-missing-tensor"
    assert "ghost.weight" in str(info.value) and "index.json" in str(info.value)


def test_index_puts_a_tensor_in_the_wrong_shard(sharded: Path) -> None:
    def move(index: dict[str, object]) -> None:
        wm = index["weight_map"]
        assert isinstance(wm, dict)
        shards = sorted(set(wm.values()), key=list(wm.values()).count)
        crowded, other = shards[-1], shards[0]  # keep every shard in the index
        name = next(k for k, v in wm.items() if v == crowded)
        wm[name] = other

    _rewrite_index(sharded, move)
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(sharded)
    assert info.value.rule == "index-wrong-shard"


def test_unlisted_tensor_and_total_size_are_warnings(sharded: Path) -> None:
    def edit(index: dict[str, object]) -> None:
        wm = index["weight_map"]
        meta = index["metadata"]
        assert isinstance(wm, dict) and isinstance(meta, dict)
        crowded = max(set(wm.values()), key=list(wm.values()).count)
        del wm[next(k for k, v in wm.items() if v == crowded)]
        meta["total_size"] += 2

    _rewrite_index(sharded, edit)
    src = load_checkpoint(sharded)
    assert [w.code for w in src.warnings] == ["index-unlisted-tensor", "index-total-size"]


def test_safetensors_file_outside_the_index_is_a_warning(sharded: Path) -> None:
    a, _ = _first_two_shards(sharded)
    shutil.copy(sharded / a, sharded / "consolidated.safetensors")
    src = load_checkpoint(sharded)
    assert [w.code for w in src.warnings] == ["index-unlisted-file"]
    assert "consolidated.safetensors" in src.warnings[0].message
    assert "consolidated.safetensors" not in {s.file for s in src.shards}


def test_index_naming_a_missing_shard(sharded: Path) -> None:
    a, _ = _first_two_shards(sharded)
    (sharded / a).unlink()
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(sharded)
    assert info.value.rule == "missing-shard" and a in str(info.value)


@pytest.mark.parametrize("bad", ["../outside.safetensors", "/etc/passwd", "sub/../../x"])
def test_index_with_unsafe_shard_name(sharded: Path, bad: str) -> None:
    def edit(index: dict[str, object]) -> None:
        wm = index["weight_map"]
        assert isinstance(wm, dict)
        wm[next(iter(wm))] = bad

    _rewrite_index(sharded, edit)
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(sharded)
    assert info.value.rule == "index-unsafe-shard-name"


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        ('{"metadata": {}}', "index-bad-weight-map"),
        ('{"weight_map": {"a": 3}}', "index-bad-weight-map"),
        (json.dumps({"weight_map": {f"t{i}": f"s{i}.safetensors" for i in range(5000)}}),
         "index-too-many-shards"),
        ('{"weight_map": {"a": "model-00001-of-00004.safetensors"}, "metadata": 1}',
         "index-bad-metadata"),
    ],
)  # fmt: skip
def test_malformed_index(sharded: Path, content: str, rule: str) -> None:
    (sharded / "model.safetensors.index.json").write_text(content)
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(sharded)
    assert info.value.rule == rule


def test_index_that_is_not_json(sharded: Path) -> None:
    (sharded / "model.safetensors.index.json").write_text('{"weight_map": {"a": "b",')
    with pytest.raises(ConfigError) as info:
        load_checkpoint(sharded)
    assert "index.json" in str(info.value) and "rule: json" in str(info.value)


def test_duplicate_tensor_across_shards(sharded: Path) -> None:
    """Two shards holding the same tensor, with no index to arbitrate."""
    a, _ = _first_two_shards(sharded)
    (sharded / "model.safetensors.index.json").unlink()
    shutil.copy(sharded / a, sharded / "model-copy.safetensors")
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(sharded)
    assert info.value.rule == "duplicate-tensor"


def test_dir_without_index_reads_all_shards_and_warns(sharded: Path) -> None:
    (sharded / "model.safetensors.index.json").unlink()
    src = load_checkpoint(sharded)
    assert len(src.shards) == 4 and [w.code for w in src.warnings] == ["no-index"]


def test_malformed_shard_names_the_shard(sharded: Path) -> None:
    a, _ = _first_two_shards(sharded)
    with (sharded / a).open("r+b") as f:
        f.truncate(20)
    with pytest.raises(HeaderError) as info:
        load_checkpoint(sharded)
    assert str(sharded / a) in str(info.value) and info.value.rule == "header-beyond-file"


def test_bad_config_json(tiny_checkpoint: Callable[..., Path], copy_checkpoint: Copy) -> None:
    d = copy_checkpoint(tiny_checkpoint("llama"))
    (d / "config.json").write_text('{"model_type": "llama", "model_type": "x"}')
    with pytest.raises(ConfigError) as info:
        load_checkpoint(d)
    assert "config.json" in str(info.value) and "duplicate-key" in str(info.value)
    (d / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not an object"):
        load_checkpoint(d)


def test_missing_and_unusable_locations(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointNotFoundError):
        load_checkpoint(tmp_path)  # empty directory
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not read")
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_checkpoint(tmp_path)
    with pytest.raises(UsageError):
        load_checkpoint(tmp_path, revision="main")


def test_text_config_views() -> None:
    cfg = {
        "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False,
        "quantization_config": {"quant_method": "fp8"},
        "text_config": {"hidden_size": 2048, "num_hidden_layers": 40, "model_type": "q_text"},
        "vision_config": {"depth": 27},
    }
    view = text_config(cfg)
    assert view["hidden_size"] == 2048 and view["model_type"] == "q_text"
    assert view["tie_word_embeddings"] is False
    assert "vision_config" not in view and "text_config" not in view
    assert vision_config(cfg) == {"depth": 27}
    assert quantization_config(cfg, None) == {"quant_method": "fp8"}
    assert text_config(None) == {} and vision_config({"a": 1}) is None
    modelopt = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}}
    assert quantization_config({"model_type": "llama"}, modelopt) == {"quant_algo": "NVFP4"}
    assert quantization_config({"model_type": "llama"}, None) is None
