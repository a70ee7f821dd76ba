"""llama.cpp's speed predictions: its own calibration per GGUF type from published llama-bench
figures (the priors table's llamacpp rows, costs recomputed here from GGUF header replicas),
the message when an engine has no data on a hardware, and a Qwen2 GGUF planned, not refused.
No timing is asserted: the rows' tok/s are published figures, the tests check arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.plan.inputs import assert_rows_are_the_plans
from typer.testing import CliRunner

from servelab.checkpoint.sources import load_checkpoint
from servelab.cli.app import app
from servelab.predict.form import TERMS, Sample, row_seconds
from servelab.predict.keys import BuildKey
from servelab.predict.levels import Target, calibrate
from servelab.predict.priors import shipped_priors
from servelab.synth.gguf_replica import (
    BUILDS,
    GPT_OSS_20B,
    QWEN25_CODER_7B,
    SIZES,
    write_replica,
)
from servelab.units import GIB

runner = CliRunner()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for model, (arch, types) in BUILDS.items():
        for ft in types:
            out[f"{model}-{ft}"] = write_replica(arch, ft, root / f"{model}-{ft}.gguf")
    return out


def _plan(path: Path, hardware: str, lengths: str, *extra: str) -> dict[str, object]:
    res = runner.invoke(app, ["plan", str(path), "-H", hardware, "--json", "--no-store",
                              "--prompt-lens", lengths, "-c", "16464", *extra])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def _replica_key(s: Sample) -> str:
    """The replica of a priors row: its model and the GGUF type its kernel path names
    (``gguf-q8_0 dense (default)`` -> ``llama2-7b-Q8_0``)."""
    ftype = s.kernel_path.split()[0].removeprefix("gguf-").upper()
    return f"{s.build.model}-{ftype}"


def test_replicas_carry_llama_cpps_type_mix(replicas: dict[str, Path]) -> None:
    """Each replica's tensor bytes equal the size llama-bench printed for the published
    build (to its two decimals): the GGML type of every tensor is llama.cpp's."""
    for (model, ft), gib in SIZES.items():
        src = load_checkpoint(str(replicas[f"{model}-{ft}"]))
        nbytes = sum(t.end - t.begin for s in src.shards for t in s.tensors)
        assert round(nbytes / GIB, 2) == gib, (model, ft)
    dtypes = {t.dtype for s in load_checkpoint(str(replicas["llama2-7b-Q4_0"])).shards
              for t in s.tensors}
    assert dtypes == {"Q4_0", "Q6_K", "F32"}  # the output matrix is kept at Q6_K


def test_llamacpp_priors_costs_are_servelab_arithmetic(replicas: dict[str, Path]) -> None:
    rows = [s for s in shipped_priors().samples
            if s.engine == "llamacpp" and s.hardware not in ("host", "h200")]
    # servelab's own runs: host in test_llamacpp_cpu.py, the H200 in test_calibrate_explain.py
    assert {s.hardware for s in rows} >= {"dgx-spark", "m1-ultra", "m2-max", "rtx-4090",
                                          "rtx-pro-6000", "rtx-5090"}
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in rows:
        assert s.source.startswith("https://")
        groups.setdefault((_replica_key(s), s.hardware), []).append(s)
    for (key, hardware), group in groups.items():
        lengths = ",".join(sorted({str(s.length) for s in group}))
        assert_rows_are_the_plans(group, _plan(replicas[key], hardware, lengths))


def test_one_published_llamacpp_model_on_the_spark_borrows_its_width_or_is_refused(
    replicas: dict[str, Path],
) -> None:
    """The Spark's llama.cpp figures are of one model (gpt-oss-20b): its fit is sourced, but
    one model cannot bound a new build, so its interval is the one measured on the H200 when
    a fit from one family predicted the others (issue 30), with that reason printed; where
    that width passes 4x (prefill) it is no prediction and the roofline stays the bound.
    Never "no data for this hardware"."""
    res = runner.invoke(app, ["plan", str(replicas["gpt-oss-20b-MXFP4_MOE"]), "-H", "dgx-spark",
                              "--no-store", "-c", "4096"], terminal_width=250)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "decode predicted from prior from https://jetsonhacks.com" in text
    assert "(llamacpp / gguf-mxfp4_moe (default) / dgx-spark)" in text
    assert "1 model of 1 family on dgx-spark: too few to bound a new build at 90 %" in text
    assert "fitted from one family, the others predicted on h200" in text
    assert "prefill: no prediction: the interval would span more than 4x" in text
    assert "no stored" not in text


def test_the_rtx_4090s_llamacpp_figures_give_a_sourced_decode_interval_and_no_prefill(
    replicas: dict[str, Path],
) -> None:
    """`servelab plan -H rtx-4090` on a CodeLlama-7B Q8_0 GGUF: its decode is predicted from
    the llama-bench table of llama.cpp PR #4766 with an interval that names why it is that
    wide (one model of one family there); its prefill interval would pass 4x, so it is no
    prediction and the roofline stays the bound."""
    res = runner.invoke(app, ["plan", str(replicas["codellama-7b-Q8_0"]), "-H", "rtx-4090",
                              "--no-store", "-c", "4096"], terminal_width=250)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert ("decode predicted from prior from https://github.com/ggml-org/llama.cpp/pull/4766"
            in text)
    assert "(llamacpp / gguf-q8_0 (default) / rtx-4090)" in text
    assert "1 model of 1 family on rtx-4090: too few to bound a new build at 90 %" in text
    assert "prefill: no prediction: the interval would span more than 4x" in text


def test_the_rtx_5090s_one_llamacpp_prefill_is_sourced_and_refused_as_too_wide(
    replicas: dict[str, Path],
) -> None:
    """The RTX 5090's one figure (a Llama-3-8B Q4_0 prefill, llama.cpp PR #20586) is its
    prefill fit's source; one model cannot bound another at 90 % within 4x, so the plan says
    no prediction with that reason, names the prior, and keeps the roofline as the bound."""
    doc = _plan(replicas["llama3-8b-Q4_0"], "rtx-5090", "512")
    speed = doc["speed"]
    assert isinstance(speed, dict)
    fit = speed["prefill_fit"]
    assert "prior from https://github.com/ggml-org/llama.cpp/pull/20586" in fit["label"]
    assert "1 model of 1 family on rtx-5090" in fit["label"]
    [p] = [r for r in speed["prefill"] if r["prompt_len"] == 512]
    assert p["predicted_tok_s"] is None and p["roofline_tok_s"] > 0


def test_a_qwen2_gguf_is_planned_not_refused(replicas: dict[str, Path]) -> None:
    """A Qwen2 GGUF as llama.cpp's converter writes it (no head size or vocabulary size keys)
    plans; on the Spark its Q8_0 path has no figure of its own, so the fit it gets is pooled
    over the llama.cpp paths that have one, and says so."""
    src = load_checkpoint(str(replicas["qwen2.5-coder-7b-Q8_0"]))
    assert src.config is not None and src.config["model_type"] == "qwen2"
    doc = _plan(replicas["qwen2.5-coder-7b-Q8_0"], "dgx-spark", "512")
    speed = doc["speed"]
    assert isinstance(speed, dict)
    assert "no gguf-q8_0 (default) data" in speed["decode_fit"]["fallback"]
    assert doc["dims"]["num_layers"] == QWEN25_CODER_7B.layers  # type: ignore[index]


def test_no_data_for_the_engine_names_the_engine_not_the_hardware(
    replicas: dict[str, Path], tmp_path: Path,
) -> None:
    """The M1 Ultra has llama.cpp priors and no vLLM figure: a vLLM plan's line says which
    engine lacks data there instead of blaming the hardware."""
    from servelab.synth.tiny import make_tiny_model

    tiny = make_tiny_model("llama", tmp_path / "llama")
    res = runner.invoke(app, ["plan", str(tiny), "-H", "m1-ultra", "--no-store"],
                        terminal_width=250)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert ("decode: no stored vLLM decode run or shipped vLLM decode prior for m1-ultra "
            "(the shipped priors for m1-ultra are llama.cpp only): roofline bound only") in text
    assert "no stored run or prior for this hardware" not in text
    # the RTX 5090 has one llama.cpp figure, a prefill: decode's line says so, not "none"
    res = runner.invoke(app, ["plan", str(replicas["llama2-7b-Q4_0"]), "-H", "rtx-5090",
                              "--no-store", "-c", "4096"], terminal_width=250)
    assert res.exit_code == 0, res.output
    assert ("decode: no stored llama.cpp decode run or shipped llama.cpp decode prior for "
            "rtx-5090 (the shipped llama.cpp priors for rtx-5090 are prefill only)"
            in " ".join(res.output.split()))


#: A priors file of one synthetic llama.cpp decode row on the RTX 5090, where the shipped
#: table has a llama.cpp prefill row only.
OWN_PRIORS = """schema = "servelab.priors/1"
version = "mine-1"

[[sample]]
model = "llama3-8b"
family = "llama"
engine = "llamacpp"
engine_version = "none: a synthetic row"
kernel_path = "gguf-q4_0 dense (default)"
hardware = "rtx-5090"
kind = "decode"
length = 128
layers = 32
bytes_read = 4424984832
flops = 0.0
tok_s = 150.0
source = "synthetic row of the test"
"""


def test_the_priors_file_given_names_what_is_missing(
    replicas: dict[str, Path], tmp_path: Path
) -> None:
    """``plan --priors FILE``: the fits come from FILE (a llama.cpp decode row on the RTX 5090
    where the shipped table has a prefill row), and the line saying what a roofline-only fit
    lacks names FILE and what FILE holds there, not the shipped table's rows."""
    own = tmp_path / "my-priors.toml"
    own.write_text(OWN_PRIORS, encoding="utf-8")
    model = replicas["llama3-8b-Q4_0"]
    missing = ("no stored llama.cpp prefill run or llama.cpp prefill prior in my-priors.toml "
               "for rtx-5090 (the llama.cpp priors in my-priors.toml for rtx-5090 are decode "
               "only)")
    res = runner.invoke(app, ["plan", str(model), "-H", "rtx-5090", "--no-store", "-c", "4096",
                              "--prompt-lens", "512", "--priors", str(own)], terminal_width=250)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert f"prefill: {missing}: roofline bound only" in text
    assert "shipped" not in text.replace("not the shipped one", "")
    assert str(tmp_path) not in text
    shipped = _plan(model, "rtx-5090", "512")["speed"]
    given = _plan(model, "rtx-5090", "512", "--priors", str(own))["speed"]
    assert isinstance(shipped, dict) and isinstance(given, dict)
    assert shipped["decode_fit"]["level"] == "roofline"
    assert shipped["prefill_fit"]["level"] != "roofline"
    assert given["decode_fit"]["level"] != "roofline"
    assert "synthetic row of the test" in given["decode_fit"]["source"]
    assert given["prefill_fit"]["level"] == "roofline"
    assert given["prefill_fit"]["missing"] == missing
    assert f"prefill: {missing}: roofline only" in given["notes"]


def _sample(model: str, path: str, nbytes: float, seconds: float) -> Sample:
    return Sample(BuildKey(model), "llamacpp", path, "box", "decode", 64, 32, nbytes, 0.0,
                  seconds, "synthetic", platform="mps")


def test_each_gguf_type_gets_its_own_fit_and_an_unseen_type_a_labelled_fallback() -> None:
    """Synthetic llama.cpp decode points on one box: Q8_0 reads at 400 GB/s, F16 at 600 GB/s
    (a dequantising kernel's efficiency per type). The Q8_0 path's own fit recovers its rate;
    a Q4_0 target, with no figure, is predicted from the pool of both and says so."""
    q8 = [_sample(f"m{i}", "gguf-q8_0 dense (default)", b, b / 400e9)
          for i, b in enumerate((4e9, 7e9, 13e9))]
    f16 = [_sample(f"n{i}", "gguf-f16 dense (default)", b, b / 600e9)
           for i, b in enumerate((8e9, 14e9, 26e9))]
    physical = {"decode": (1 / 800e9,) + (0.0,) * (len(TERMS["decode"]) - 1),
                "prefill": (0.0,) * len(TERMS["prefill"])}
    cal = calibrate(Target("llamacpp", "gguf-q8_0 dense (default)", "box"), [], q8 + f16,
                    lambda k: physical[k])
    row = q8[0].features
    assert row_seconds(cal.decode.theta, row) == pytest.approx(q8[0].seconds, rel=0.02)
    assert cal.decode.fallback is None and cal.decode.rel_error is not None
    q4 = calibrate(Target("llamacpp", "gguf-q4_0 dense (default)", "box"), [], q8 + f16,
                   lambda k: physical[k])
    assert q4.decode.fallback is not None and "no gguf-q4_0 (default) data" in q4.decode.fallback
    assert GPT_OSS_20B.experts == 32  # the MoE replica's routing is the published one


def test_a_safetensors_plan_for_llamacpp_says_its_bytes_are_not_the_ggufs(
    tmp_path: Path,
) -> None:
    """Why a safetensors plan's bound for llama.cpp could sit below a published llama.cpp
    figure: llama.cpp serves a GGUF conversion of other types (gpt-oss-20b's MXFP4_MOE GGUF
    reads 2.58 GB per token, its safetensors 3.71 GB). The plan says so."""
    from servelab.synth.tiny import make_tiny_model

    hf = make_tiny_model("qwen2", tmp_path / "q2")
    res = runner.invoke(app, ["plan", str(hf), "-H", "dgx-spark", "--engine", "llamacpp",
                              "--no-store", "-c", "1024"], terminal_width=250)
    assert res.exit_code == 0, res.output
    assert "llama.cpp serves a GGUF conversion, not these safetensors" in " ".join(
        res.output.split())
