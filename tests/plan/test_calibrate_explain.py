"""Predictions from the shipped priors (the seed's Spark figures), and explaining two builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.plan.inputs import plan_of, planning_inputs
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.evidence.runs import samples_from_runs
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import BUILTIN
from servelab.plan.build import Plan
from servelab.plan.explain import explain
from servelab.predict.calibration import calibration_for
from servelab.predict.form import Sample
from servelab.predict.ledger import ledger
from servelab.predict.priors import shipped_priors
from servelab.predict.roofline import roofline_coefficients
from servelab.predict.speed import model_expert_slots
from servelab.store.exchange import run_from_dict

runner = CliRunner()

GIB = 1 << 30
SPARK = BUILTIN["dgx-spark"]
LENS = (512, 2048, 8192)
# The seed recipe's measured FP8 figures on one Spark (vLLM 0.24.0 / 0.26.0).
SEED_DECODE = {512: (38.63, 38.97), 2048: (38.27, 38.70), 8192: (37.42, 37.76)}
SEED_PREFILL = {2048: 5122.0, 8192: 6081.0}


def _plan(path: Path, *, calibrated: bool = True) -> Plan:
    config, weights = planning_inputs(path)
    cal = calibration_for([], SPARK, weights) if calibrated else None
    return plan_of(config, weights, SPARK, max_model_len=262_144,
                      kv_cache_memory_bytes=6 * GIB, engine_version="0.26.0", prompt_lens=LENS,
                      calibration=cal)


def test_seed_case_from_the_shipped_priors_alone(qwen36_fp8: Path) -> None:
    plan = _plan(qwen36_fp8)
    sp = plan.speed
    assert sp.decode_fit is not None and sp.decode_fit.level == "prior"
    assert sp.decode_fit.source.startswith("prior from servelab seed recipe page")
    for point in sp.decode:
        assert point.predicted_tok_s is not None and point.predicted_low is not None
        assert point.predicted_high is not None
        for measured in SEED_DECODE[point.context_len]:
            assert abs(point.predicted_tok_s / measured - 1) < 0.10
            assert point.predicted_low <= measured <= point.predicted_high
        assert point.predicted_tok_s < point.roofline_tok_s
        # one model on the Spark: the interval is the error of a fit from one family on the
        # H200, and says so
        assert "1 family on dgx-spark: too few to bound a new build" in sp.decode_fit.label()
        assert "fitted from one family, the others predicted on h200" in sp.decode_fit.label()
    # A prefill fitted from one model missed other families by up to 87 % on the H200: wider
    # than 4x, no prediction; the roofline stays as the bound, and a note says why.
    assert sp.prefill_fit is not None and sp.prefill_fit.refused
    for point in sp.prefill:
        assert point.predicted_tok_s is None and point.roofline_tok_s > 0
        if point.prompt_len in SEED_PREFILL:
            assert point.roofline_tok_s > SEED_PREFILL[point.prompt_len]
    assert any(n.startswith("prefill: no prediction") for n in sp.notes)
    assert any("shipped priors table" in n for n in sp.notes)


def test_seed_fp8_left_out_of_the_priors_is_still_predicted_within_ten_percent() -> None:
    table = shipped_priors()
    rows = ledger(
        table.samples, [],
        lambda kind, s: roofline_coefficients(get_profile(s.hardware), s.compute)[kind],
        origin="shipped priors",
    )
    fp8 = [r for r in rows if r.model == "Qwen/Qwen3.6-35B-A3B-FP8" and r.kind == "decode"]
    assert len(fp8) == 6
    for r in fp8:
        assert r.error is not None and abs(r.error) < 0.10
        assert r.inside and r.level == "shipped priors, pooled"
        assert "fallback: no TRITON Fp8 W8A8 data" in r.source


def test_h200_priors_are_the_committed_runs() -> None:
    """The H200 rows are benchmarks/priors/from_runs.py over the committed exports: same
    builds (runs of one checkpoint under one name, an MTP run's speculative steps included),
    same costs (expert slots, eager prefills), same measured tok/s, newest run first."""
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results"
    runs = []
    for export in (results / "run-h200-qwen3-30b-a3b-fp8.json",
                   *sorted(results.glob("calibration-*/runs-h200-calibration.json"))):
        doc = json.loads(export.read_text(encoding="utf-8"))
        runs += [run_from_dict(r, source=str(export)) for r in doc["runs"]]
    runs.sort(key=lambda r: r.started_at, reverse=True)
    measured: dict[tuple[str, str, int, bool, bool], Sample] = {}
    for s in samples_from_runs(runs):
        step = s.build.is_step
        measured.setdefault((s.build.model, s.kind, s.length, s.eager, step), s)
    rows = [s for s in shipped_priors().samples
            if s.hardware == "h200" and not s.device_only and s.engine == "vllm"]
    assert len(rows) == len(measured) == 114  # eighteen builds, one with an MTP run
    for r in rows:
        name = r.build.model
        m = measured[(name, r.kind, r.length, r.eager, r.layers != m_layers(name))]
        assert (r.layers, r.expert_slots, r.bytes_read) == (m.layers, m.expert_slots,
                                                           int(m.bytes_read))
        assert r.expert_flops == m.expert_flops
        assert r.tok_s == pytest.approx(m.tok_s, abs=0.01)
    assert {r.expert_slots for r in rows if r.build.model.startswith("qwen3.6")} >= {40 * 256}
    # the routed experts' FLOPs: every prompt token through 8 of 128 experts (3 x 2048 x 768
    # parameters each) in each of 48 layers, from the run's own checkpoint report
    qwen30 = {r.length: r.expert_flops for r in rows
              if r.build.model == "qwen3-30b-a3b-fp8-random" and r.kind == "prefill"}
    assert qwen30[2048] == 2 * 48 * 8 * 3 * 2048 * 768 * 2048
    assert all(r.expert_flops == 0 for r in rows if r.build.model.startswith("llama"))
    # the same Llama-3.2-3B prompt with and without a CUDA graph (--max-num-seqs 64 vs default)
    llama = {r.eager: r.tok_s for r in rows
             if r.build.model == "llama-3.2-3b-bf16-random" and r.kind == "prefill"
             and r.length == 512}
    assert llama[False] > 1.5 * llama[True]


def test_h200_llamacpp_priors_are_the_committed_calibration_runs() -> None:
    """The H200's llama.cpp rows are the calibration-role runs of the pre-registered set
    (benchmarks/prereg/llamacpp_sets.py "h200"; its check build Q5_K_M stays out), named by
    base model (from_runs.py --gguf-base): same kernel path per GGUF type, bytes, layers and
    measured tok/s as the committed export."""
    export = (Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results"
              / "llamacpp-h200-2026-12-05" / "runs-llamacpp-h200.json")
    doc = json.loads(export.read_text(encoding="utf-8"))
    runs = [run_from_dict(r, source=str(export)) for r in doc["runs"]
            if r["recipe_name"] != "llamacpp-llama3-8b-q5-k-m-h200"]
    assert len(runs) == 5
    measured = {(s.kernel_path, s.kind, s.length): s for s in samples_from_runs(runs)}
    rows = [s for s in shipped_priors().samples
            if s.hardware == "h200" and s.engine == "llamacpp" and s.build.model == "llama3-8b"]
    assert len(rows) == len(measured) == 20  # five GGUF types x decode/prefill x 512/4096
    for r in rows:
        assert r.build.model == "llama3-8b" and r.build.family == "llama"
        m = measured[(r.kernel_path, r.kind, r.length)]
        assert (r.layers, r.bytes_read) == (m.layers, int(m.bytes_read)) and r.layers == 32
        assert r.tok_s == pytest.approx(m.tok_s, abs=0.01)
    paths = {r.kernel_path.split()[0] for r in rows}
    assert paths == {"gguf-f16", "gguf-q8_0", "gguf-q6_k", "gguf-q4_k_m", "gguf-q4_0"}


def test_h200_llamacpp_qwen_rows_are_the_printed_figures_and_replica_costs(
    tmp_path: Path,
) -> None:
    """The same set's Qwen2.5-7B rows: tok/s is what `servelab run` printed on the device
    (the records were lost; the file keeps the tables), bytes and layers servelab's plan of
    the header replica, which matches llama-quantize's files byte for byte on Llama-3-8B."""
    from servelab.synth.gguf_replica import QWEN25_CODER_7B, write_replica

    results = (Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results"
               / "llamacpp-h200-2026-12-05")
    printed: dict[tuple[str, str, int], float] = {}
    ftype = ""
    for line in (results / "call-2-output-qwen.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("llamacpp-qwen2.5-coder-7b-"):
            ftype = {"f16": "F16", "q4-k-m": "Q4_K_M"}.get(
                line.split()[0].removeprefix("llamacpp-qwen2.5-coder-7b-").removesuffix("-h200"),
                "")
        parts = line.split()
        if ftype and len(parts) == 5 and parts[0] in ("decode", "prefill"):  # measured rows
            printed[(ftype, parts[0], int(parts[1].replace(",", "")))] = float(
                parts[2].replace(",", ""))
    assert len(printed) == 8
    rows = [s for s in shipped_priors().samples
            if s.hardware == "h200" and s.build.model == "qwen2.5-coder-7b"]
    assert len(rows) == 8 and {r.build.family for r in rows} == {"qwen2"}
    for ftype in ("F16", "Q4_K_M"):
        path = write_replica(QWEN25_CODER_7B, ftype, tmp_path / f"q-{ftype}.gguf")
        doc = json.loads(runner.invoke(app, [
            "plan", str(path), "--engine", "llamacpp", "-H", "h200", "--no-store",
            "-c", "8192", "--prompt-lens", "512,4096", "--json"]).output)
        planned = {("decode", int(r["context_len"])): int(r["bytes_per_token"])
                   for r in doc["speed"]["decode"]}
        planned |= {("prefill", int(r["prompt_len"])): int(r["bytes_read"])
                    for r in doc["speed"]["prefill"]}
        mine = [r for r in rows if r.kernel_path.startswith(f"gguf-{ftype.lower()} ")]
        assert len(mine) == 4
        for r in mine:
            assert r.tok_s == printed[(ftype, r.kind, r.length)]
            assert r.bytes_read == planned[(r.kind, r.length)] and r.layers == 28


def m_layers(model: str) -> int:
    """Decoder layers of a committed H200 build (a speculative step's row counts more)."""
    return {"llama-3.1-8b-bf16-random": 32, "llama-3.2-3b-bf16-random": 28,
            "qwen3-235b-a22b-bf16-16l-random": 16, "qwen3-235b-a22b-fp8-16l-random": 16,
            "qwen3-30b-a3b-bf16-24l-random": 24, "qwen3-30b-a3b-fp8-random": 48,
            "qwen3-next-bf16-12l-random": 12, "qwen3.6-35b-a3b-bf16-random": 40,
            "llama-3.1-8b-fp8-random": 32, "llama-3.1-70b-bf16-16l-random": 16,
            "llama-3.1-70b-fp8-32l-random": 32, "qwen3-235b-a22b-fp8-32l-random": 32,
            "qwen3-4b-bf16-random": 36, "qwen3-4b-fp8-random": 36,
            "qwen3-32b-bf16-random": 64, "qwen3-30b-a3b-bf16-random": 48,
            "qwen3-next-fp8-12l-random": 12, "qwen3.6-35b-a3b-fp8-random": 40}[model]


def test_priors_table_costs_are_servelab_arithmetic(
    qwen36_fp8: Path, qwen36_bf16: Path, qwen36_nvfp4a16: Path
) -> None:
    builds = {"Qwen/Qwen3.6-35B-A3B-FP8": qwen36_fp8, "Qwen/Qwen3.6-35B-A3B": qwen36_bf16,
              "nvidia/Qwen3.6-35B-A3B-NVFP4": qwen36_nvfp4a16}
    rows = [s for s in shipped_priors().samples if s.hardware == "dgx-spark" and s.engine == "vllm"]
    assert {s.build.model for s in rows} == set(builds)
    for name, path in builds.items():
        plan = _plan(path, calibrated=False)
        sp = plan.speed
        decode = {d.context_len: d.bytes_per_token for d in sp.decode}
        prefill = {p.prompt_len: (p.flops, p.expert_flops, p.bytes_read) for p in sp.prefill}
        # every prompt token through 8 of 256 experts (3 x 2048 x 512 parameters each) in 40
        # layers, whatever the weights' format
        assert prefill[2048][1] == 2 * 40 * 8 * (3 * 2048 * 512) * 2048
        for s in (s for s in rows if s.build.model == name):
            assert s.kernel_path == sp.kernel_path.key and s.layers == 40
            assert s.expert_slots == model_expert_slots(plan.dims) == 40 * 256
            if s.kind == "decode":
                assert s.bytes_read == decode[s.length]
            else:
                assert (s.flops, s.expert_flops, s.bytes_read) == prefill[s.length]
                assert 0 < s.expert_flops < s.flops


def test_explain_fp8_vs_nvfp4a16_says_bytes_beat_kernels(
    qwen36_fp8: Path, qwen36_nvfp4a16: Path
) -> None:
    fp8 = _plan(qwen36_fp8)
    nv = _plan(qwen36_nvfp4a16)
    e = explain(fp8, nv, context_index=1)
    # vLLM's own selection on the GB10 (TRITON Fp8 MoE, MARLIN NvFp4 MoE: the seed's logs)
    assert e.a.kernel_path == "TRITON W8A8" and e.b.kernel_path == "MARLIN W4A16"
    assert e.bytes_ratio < 1  # the FP4 build reads fewer bytes per token
    assert e.speed_ratio == pytest.approx(e.bytes_ratio * e.efficiency_ratio)
    assert e.verdict.startswith("Bytes beat kernels")
    # The seed measured FP8 / NVFP4A16 = 38.27 / 42.57 = 0.90 on the same node and day.
    assert e.speed_ratio == pytest.approx(38.27 / 42.57, rel=0.05)
    assert e.a.efficiency is not None and "prior from" in e.a.efficiency_source
    assert e.a.routed_expert_bits is not None and e.a.routed_expert_bits > 8
    assert e.b.routed_expert_bits is not None and e.b.routed_expert_bits == pytest.approx(4.5, 0.01)
    assert e.to_dict()["predicted"] is True


#: The hardware whose vLLM priors are published figures of preset builds (issue 30's GPUs
#: people own; the H200's rows are servelab's runs, the Spark's the seed's, host's the box's).
PUBLISHED_VLLM = {"rtx-pro-6000"}


@pytest.fixture(scope="module")
def presets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Full-dimension header replicas of the preset builds behind those rows."""
    from servelab.synth.replica import write_replica
    from servelab.synth.replica_presets import preset_config, preset_layout

    root = tmp_path_factory.mktemp("presets")
    out = {}
    for name in {s.build.model for s in shipped_priors().samples
                 if s.engine == "vllm" and s.hardware in PUBLISHED_VLLM}:
        out[name] = root / name
        write_replica(out[name], preset_config(name), preset_layout(name, None, ()))
    return out


def _plan_json(path: Path, hardware: str, length: int) -> dict[str, object]:
    from typer.testing import CliRunner

    from servelab.cli.app import app

    res = CliRunner().invoke(app, ["plan", str(path), "-H", hardware, "--json", "--no-store",
                                   "--prompt-lens", str(length),
                                   "--max-model-len", str(max(4096, length + 64))])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_published_vllm_priors_of_the_gpus_people_own_are_servelab_arithmetic(
    presets: dict[str, Path],
) -> None:
    """The RTX PRO 6000's vLLM rows (a published gpt-oss-20b figure): bytes per token, layers,
    expert slots and kernel path recomputed from the model's published config (a preset
    replica), each row sourced by URL and named with its family."""
    rows = [s for s in shipped_priors().samples
            if s.engine == "vllm" and s.hardware in PUBLISHED_VLLM]
    assert {s.hardware for s in rows} == PUBLISHED_VLLM and rows
    for s in rows:
        assert s.source.startswith("https://") and s.build.family == "gpt_oss"
        doc = _plan_json(presets[s.build.model], s.hardware, s.length)
        speed, dims = doc["speed"], doc["dims"]
        assert isinstance(speed, dict) and isinstance(dims, dict)
        path = speed["kernel_path"]
        assert s.kernel_path == (path["calibration"] or path["name"])
        assert s.layers == dims["num_layers"]
        assert s.expert_slots == dims["num_layers"] * dims["num_experts"]
        [d] = [r for r in speed["decode"] if r["context_len"] == s.length]
        assert s.bytes_read == d["bytes_per_token"]


def test_plan_on_a_gpu_people_own_names_its_source_or_says_why_not(
    presets: dict[str, Path],
) -> None:
    """`servelab plan -H rtx-pro-6000` predicts gpt-oss-20b's decode from the published
    figure, with an interval and the page it came from; one model of one family cannot bound
    a new build, so the interval is the one a one-family fit missed by on the H200, and says
    so. The RTX 5090 has no vLLM figure: the bound only, the engine named."""
    from typer.testing import CliRunner

    from servelab.cli.app import app

    path = str(presets["gpt-oss-20b"])
    res = CliRunner().invoke(app, ["plan", path, "-H", "rtx-pro-6000", "--no-store",
                                   "--max-model-len", "4096"], terminal_width=250)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "decode predicted from prior from https://www.millstoneai.com/" in text
    # the whole URL, wherever the console folds it
    assert ("https://www.millstoneai.com/inference-benchmark/gpt-oss-20b-mxfp4-1x-rtx-pro-6000-"
            "blackwell") in "".join(res.output.split())
    assert "(vllm / mxfp4 (default) / rtx-pro-6000)" in text
    assert "1 model of 1 family on rtx-pro-6000: too few to bound a new build at 90 %" in text
    doc = _plan_json(presets["gpt-oss-20b"], "rtx-pro-6000", 1536)
    speed = doc["speed"]
    assert isinstance(speed, dict)
    [d] = [r for r in speed["decode"] if r["context_len"] == 1536]
    assert d["predicted_low"] < d["predicted_tok_s"] < d["predicted_high"] <= d["roofline_tok_s"]
    res = CliRunner().invoke(app, ["plan", path, "-H", "rtx-5090", "--no-store",
                                   "--max-model-len", "4096"], terminal_width=250)
    assert res.exit_code == 0, res.output
    assert ("decode: no stored vLLM decode run or shipped vLLM decode prior for rtx-5090 (the "
            "shipped priors "
            "for rtx-5090 are llama.cpp only): roofline bound only"
            in " ".join(res.output.split()))
