"""``servelab calibration report`` end to end: the committed H200 exports through a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
# Every committed H200 export: the first FP8 run and the six calibration sessions (the fifth ran
# the first FP8 build again, the sixth a dense FP8 build predicted before it ran; the host-floor
# probes are in probes-h200.json, not here).
EXPORTS = (RESULTS / "run-h200-qwen3-30b-a3b-fp8.json",
           *sorted(RESULTS.glob("calibration-*/runs-h200-calibration.json")))


def test_ledger_over_the_h200_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "h200.db")
    for export in EXPORTS:
        res = runner.invoke(app, ["runs", "import", str(export), "--db", db])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibration", "report", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "servelab.ledger/1"
    rows = doc["rows"]
    builds = {r["model"].split(" [")[0] for r in rows}
    assert builds == {"llama-3.1-8b-bf16-random", "qwen3-30b-a3b-bf16-24l-random",
                      "qwen3-next-bf16-12l-random", "qwen3-30b-a3b-fp8-random",
                      "llama-3.2-3b-bf16-random", "qwen3-235b-a22b-bf16-16l-random",
                      "qwen3.6-35b-a3b-bf16-random", "qwen3-235b-a22b-fp8-16l-random",
                      "llama-3.1-8b-fp8-random"}
    for r in rows:
        assert r["predicted"] is True and r["hardware"] == "h200"
        if r["predicted_tok_s"] is not None:
            assert r["error"] == r["measured_tok_s"] / r["predicted_tok_s"] - 1
            assert r["inside_interval"] == (r["low"] <= r["measured_tok_s"] <= r["high"])
    decode = [r for r in rows if r["kind"] == "decode"]
    # Three FP8 builds (two MoE, one dense): each is predicted from the other two on its own
    # kernel path, over the BF16 fit as the prior.
    fp8 = [r for r in decode if "fp8" in r["model"]]
    assert fp8 and all("(vllm / TRITON Fp8 W8A8 / h200)" in r["source"]
                       and "leave-one-model-out over 2 models" in r["source"] for r in fp8)
    # Dense and MoE BF16 builds are one kernel path (the default one), with the expert-slot
    # term for what MoE adds: no fallback (benchmarks/RESULTS.md has every row).
    bf16 = [r for r in decode if "fp8" not in r["model"]]
    assert bf16 and not any("fallback" in r["source"] for r in bf16)
    # The shipped decode profiles (GPU busy time per step of five builds) fit the device terms
    # next to the runs; each build's own profile is left out with it.
    assert all("fitted from stored runs and shipped decode profiles (vllm / bf16 (default)"
               in r["source"] for r in bf16)
    assert not any("profiles" in r["source"] for r in fp8)  # none on the FP8 kernel path
    # Qwen3-Next's 12 layers keep the GPU busy 1.4 ms of a 2.0-2.6 ms step (profile in
    # benchmarks/gpu/results/profile-2026-12-03): the host's time per step bounds it, which the
    # overlapped decode form predicts from the other builds' runs and profiles.
    nxt = [r for r in bf16 if r["model"].startswith("qwen3-next")]
    assert len(nxt) == 9 and all(abs(r["error"]) < 0.15 for r in nxt)
    # Issue 12's decode bar, on every build and length: within 15 %. Inside the interval
    # everywhere but the dense FP8 build (-12 %, its interval from the two MoE FP8 builds: ±9 %).
    assert all(abs(r["error"]) < 0.15 for r in decode)
    assert all(r["inside_interval"] for r in decode if r["model"].split(" [")[0]
               != "llama-3.1-8b-fp8-random")
    # Prefill: the host launches layer by layer where no CUDA graph does, while the device runs
    # the kernels already launched; t = host + max(device, launches) is what keeps the FP8
    # Qwen3-30B's 2K (launch-bound, 104-125 ms) and 8K (device-bound, 164-175 ms) both in
    # reach. A summed eager term left 18 of 51 points beyond issue 12's 25 % (max 80 %).
    prefill = [r for r in rows if r["kind"] == "prefill"]
    beyond = [r for r in prefill if abs(r["error"]) > 0.25]
    assert len(prefill) == 51 and len(beyond) <= 5
    assert max(abs(r["error"]) for r in prefill) < 0.45
    # the dense FP8 build, first run after servelab had predicted it: every length within 25 %
    dense_fp8 = [r for r in prefill if r["model"].startswith("llama-3.1-8b-fp8")]
    assert len(dense_fp8) == 3 and all(abs(r["error"]) < 0.25 for r in dense_fp8)
    summary = {(s["hardware"], s["kind"]): s for s in doc["summary"]}
    assert summary[("h200", "decode")]["points"] == 51
    assert summary[("h200", "spec step")]["points"] == 3
    table = runner.invoke(app, ["calibration", "report", "--db", db, "--markdown"])
    assert table.exit_code == 0 and "| h200 |" in table.output


def test_ledger_over_the_shipped_priors_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = runner.invoke(app, ["calibration", "report", "--priors-only", "-H", "dgx-spark",
                              "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    fp8 = [r for r in rows if r["model"].endswith("FP8") and r["kind"] == "decode"]
    assert fp8 and all(abs(r["error"]) < 0.10 and r["inside_interval"] for r in fp8)
    bad = tmp_path / "p.toml"
    bad.write_text('schema = "nope"\n')
    flag = tmp_path / "flag.toml"
    flag.write_text('schema = "servelab.priors/1"\nversion = "x"\n[[sample]]\nmodel = "m"\n'
                    'engine = "vllm"\nengine_version = "0.26.0"\nkernel_path = "k"\n'
                    'hardware = "h200"\nkind = "prefill"\nlength = 2048\nlayers = 2\n'
                    'bytes_read = 1\nflops = 1.0\ntok_s = 1.0\nsource = "s"\neager = "yes"\n')
    prefill_device = tmp_path / "device.toml"
    prefill_device.write_text(flag.read_text().replace('eager = "yes"', "device_only = true"))
    cases = [
        (["calibration", "report", "--priors-only", "--priors", str(flag)],
         "sample [0]: eager must be true or false"),
        (["calibration", "report", "--priors-only", "--priors", str(prefill_device)],
         "device-only time is a GPU decode step's"),
        (["calibration", "report", "--db", str(tmp_path / "e.db")],
         "no measured single-stream points"),
        (["calibration", "report", "--priors-only", "--priors", str(bad)], "schema must be"),
        (["calibration", "report", "--priors-only", "-H", "b200"], "no measurement on b200"),
    ]
    assert_one_line_errors(cases, capsys)
