"""From a real SQLite results store to pages: every number traced back to stored samples."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from site_records import (
    HOSTILE_LINE,
    HOSTILE_MODEL,
    PREDICTION_SOURCE,
    SECRET,
    populate,
    record,
)

from servelab.points import PointKey
from servelab.site import prose
from servelab.site.collect import (
    collect_site,
    key_params,
    site_from_records,
)
from servelab.site.model import Derived, Measured, Site
from servelab.site.render import render_site
from servelab.store import RunRecord, Sample, open_store


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], list[str], Site]:
    db = tmp_path_factory.mktemp("store") / "results.db"
    url, bf16, kv = populate(db)
    with open_store(url) as store:
        site = collect_site(store)
    return url, bf16, kv, site


def test_recipe_pages_hold_the_stored_measurements(
    stored: tuple[str, list[str], list[str], Site]
) -> None:
    url, bf16, _kv, site = stored
    assert [r.slug for r in site.recipes] == ["tiny-bf16", "tiny-kv"]
    page = site.recipes[0]
    assert page.build_name == "BF16" and page.model_name == HOSTILE_MODEL
    assert page.served_model_name == "tiny-served"
    assert page.context_tokens == 4096
    with open_store(url) as store:
        newest_031 = store.get_run(bf16[2])
        newest_032 = store.get_run(bf16[5])
    # decode at each prompt length, per engine version, from that version's newest good run
    for version, run in (("0.31.0", newest_031), ("0.32.0", newest_032)):
        for prompt in (512, 2048):
            row = prose.row_at(page.decode, prompt, version)
            assert row is not None
            values = [1.0 / s.tpot_s for s in run.samples_at(f"p{prompt}-c1") if s.tpot_s]
            assert row.measured.run_id == run.run_id
            assert row.measured.value == pytest.approx(statistics.fmean(values))
            assert row.measured.samples == len(values) == 5
            assert row.measured.ci_low is not None and row.measured.ci_low < row.measured.value
    # the prediction stored with the run, labelled with its basis
    row = prose.row_at(page.decode, 2048, "0.32.0")
    assert row is not None and row.predicted is not None
    assert row.predicted.value == pytest.approx(4e9 / 40_000_000 * 0.9)
    assert row.predicted.low is not None and row.predicted.high is not None
    assert row.predicted.low < row.predicted.value < row.predicted.high
    assert row.predicted.basis.startswith(PREDICTION_SOURCE)
    assert "roofline bound 100 tok/s" in row.predicted.basis
    assert prose.row_at(page.decode, 512, "0.32.0").predicted is None  # type: ignore[union-attr]
    # prefill = prompt tokens / TTFT
    pre = prose.row_at(page.prefill, 2048, "0.32.0")
    assert pre is not None and pre.measured.value == pytest.approx(1500.0, rel=1e-3)
    # memory split from the inspect report, facts from the engine log
    assert page.memory is not None and page.memory.tensor_count == 123
    assert [p.label for p in page.memory.by_dtype] == ["BF16", "F32"]
    assert page.mtp_declared_layers == 1 and page.mtp_tensors == 0
    assert page.engine[0].fallback_line is not None
    assert page.engine[-1].profiling_skipped_line == HOSTILE_LINE
    kv_tokens = page.engine[-1].kv_tokens
    assert kv_tokens is not None and kv_tokens.value == 29120
    # verification rows: every run, dated, the failed one too
    assert [v.status for v in page.verifications] == ["ok"] * 6 + ["failed"]
    assert page.verifications[0].date == "2026-07-01" and page.verifications[0].host == "box-1"
    # the sibling build is compared at the same prompt length
    assert [s.build_name for s in page.siblings] == ["KV 512 MiB"]


def test_history_and_troubleshooting_from_findings(
    stored: tuple[str, list[str], list[str], Site]
) -> None:
    _, bf16, _, site = stored
    page = site.recipes[0]
    series = next(s for s in page.history if s.metric == "decode tok/s @ 2,048")
    assert [p.value.run_id for p in series.points] == bf16[:6]
    assert len(series.change_points) == 1
    cp = series.change_points[0]
    assert cp.index == 3
    assert isinstance(cp.before, Derived) and cp.before.run_ids == tuple(bf16[:3])
    assert cp.relative_change.value == pytest.approx((cp.after.value / cp.before.value - 1) * 100)
    assert any("engine_version: 0.31.0 → 0.32.0" in f for f in cp.factors)
    kinds = {e.kind for e in prose.troubleshooting(page)}
    assert {"missing-mtp", "kernel-fallback", "profiling-skipped", "regression",
            "version-drift", "below-prediction"} <= kinds
    # no change in the prefill history
    pre = next(s for s in page.history if s.metric == "prefill tok/s @ 2,048")
    assert pre.change_points == ()


def test_experiment_page_carries_the_stored_verdict(
    stored: tuple[str, list[str], list[str], Site]
) -> None:
    _, _bf16, kv, site = stored
    [exp] = site.experiments
    assert exp.verdict == "adopt"
    assert exp.baseline_recipe == "tiny-bf16" and exp.candidate_recipe == "tiny-kv"
    decode = next(m for m in exp.metrics if m.name == "decode @ 2,048")
    assert decode.significant
    assert isinstance(decode.candidate, Derived) and decode.candidate.run_ids == tuple(kv)
    assert decode.change.value == pytest.approx(
        (decode.candidate.value / decode.baseline.value - 1) * 100, rel=1e-6)
    assert exp.clauses[0][:2] == ("decode >= +5%", "pass")
    assert site.recipes[0].experiments == (exp,)


def test_runs_pages_and_secrets(stored: tuple[str, list[str], list[str], Site]) -> None:
    _, bf16, kv, site = stored
    assert {r.run_id for r in site.runs} == {*bf16, *kv}
    failed = next(r for r in site.runs if r.status == "failed")
    assert failed.failure is not None and HOSTILE_LINE in failed.failure
    files = render_site(site)
    for name, content in files.items():
        assert SECRET not in content, name
        if name.endswith(".html"):
            assert "<script" not in content, name
            assert "<img src=x" not in content, name


def test_a_recipe_whose_runs_all_failed_gets_a_page() -> None:
    failed = dataclasses.replace(record(0, "broken", "BF16", "0.32.0", 0.0, ok=False),
                                 run_id="x1")
    site = site_from_records([failed])
    [page] = site.recipes
    assert page.decode == () and [v.status for v in page.verifications] == ["failed"]
    files = render_site(site)
    assert "has no successful run yet" in files["recipes/broken.html"]
    assert "&lt;img src=x" in files["recipes/broken.html"]


def test_recipe_title_description_and_port_come_from_the_recipe_text() -> None:
    text = ('name = "tiny-bf16"\ntitle = "Tiny <i>BF16</i>"\ndescription = "Two layers."\n'
            '[engine]\nport = 8123\n')
    run = dataclasses.replace(record(0, "tiny-bf16", "BF16", "0.32.0", 50.0), run_id="a1",
                              recipe_text=text)
    [page] = site_from_records([run]).recipes
    assert (page.title, page.description, page.port) == ("Tiny <i>BF16</i>", "Two layers.", 8123)
    html = render_site(site_from_records([run]))["recipes/tiny-bf16.html"]
    assert "<h1>Tiny &lt;i&gt;BF16&lt;/i&gt;</h1>" in html
    assert "http://127.0.0.1:8123/v1/chat/completions" in html
    broken = dataclasses.replace(run, recipe_text="title = [unclosed")
    [page] = site_from_records([broken]).recipes
    assert (page.title, page.port) == ("", 8000)


def test_points_with_several_streams_get_their_own_table() -> None:
    base = record(0, "tiny-bf16", "BF16", "0.32.0", 50.0)
    c4 = tuple(Sample(point="p512-c4", index=i, ttft_s=t, tpot_s=1 / d, prompt_tokens=512,
                      completion_tokens=32)
               for i, (t, d) in enumerate(((0.10, 20.0), (0.12, 22.0), (0.14, 24.0))))
    run = dataclasses.replace(base, run_id="c4run", samples=base.samples + c4)
    [page] = site_from_records([run]).recipes
    [row] = page.concurrent
    assert (row.engine_version, row.prompt_tokens, row.concurrency) == ("0.32.0", 512, 4)
    assert row.decode.value == pytest.approx(22.0) and row.decode.samples == 3
    assert row.ttft is not None and row.ttft.unit == "ms"
    assert row.ttft.value == pytest.approx(120.0)
    assert all(r.prompt_tokens != 512 or r.measured.value != 22.0 for r in page.decode)
    html = render_site(site_from_records([run]))["recipes/tiny-bf16.html"]
    assert 'id="concurrent-table"' in html and "120.0 ms" in html


def test_request_rate_points_are_rows_of_their_own_never_single_stream() -> None:
    base = record(0, "tiny-bf16", "BF16", "0.32.0", 50.0)
    rated = tuple(Sample(point=point, index=i, ttft_s=0.1, tpot_s=1 / d, prompt_tokens=512,
                         completion_tokens=32)
                  for point, d0 in (("p512-c1-r2", 30.0), ("p512-c4-r2", 20.0),
                                    ("p512-c4-r4", 10.0), ("p512-c4-r4-constant", 12.0))
                  for i, d in enumerate((d0 - 1, d0, d0 + 1)))
    run = dataclasses.replace(base, run_id="rates", samples=base.samples + rated)
    [page] = site_from_records([run]).recipes
    got = [(r.concurrency, r.load, round(r.decode.value)) for r in page.concurrent]
    assert got == [(1, "2 req/s Poisson", 30), (4, "2 req/s Poisson", 20),
                   (4, "4 req/s Poisson", 10), (4, "4 req/s constant", 12)]
    assert all(r.per_gpu is None for r in page.concurrent)  # streams varied: no per-GPU sum
    # the single-stream table keeps the closed-loop points only: as without the rate points
    [plain] = site_from_records([dataclasses.replace(base, run_id="rates")]).recipes
    assert page.decode == plain.decode
    site = render_site(site_from_records([run]))
    html, md = site["recipes/tiny-bf16.html"], site["recipes/tiny-bf16.md"]
    for text in (html, md):
        assert "4 req/s Poisson" in text and "4 req/s constant" in text and "≤ 4" in text



def test_tokens_per_gpu_follow_the_runs_parallel_layout() -> None:
    base = record(0, "tiny-bf16", "BF16", "0.32.0", 50.0)
    c4 = tuple(Sample(point="p512-c4", index=i, ttft_s=0.1, tpot_s=1 / d, prompt_tokens=512,
                      completion_tokens=32) for i, d in enumerate((20.0, 22.0, 24.0)))
    args = (*base.engine_args, "--tensor-parallel-size", "2")
    run = dataclasses.replace(base, run_id="tp2run", samples=base.samples + c4, engine_args=args)
    [page] = site_from_records([run]).recipes
    assert (page.gpus, page.layout) == (2, "TP2 x PP1 x DP1")
    [row] = page.concurrent
    assert row.gpus == 2 and row.per_gpu.value == pytest.approx(22.0 * 4 / 2)
    html = render_site(site_from_records([run]))["recipes/tiny-bf16.html"]
    assert "Output per GPU" in html and "Served on 2 GPUs (TP2 x PP1 x DP1)" in html
    single = site_from_records([dataclasses.replace(run, engine_args=base.engine_args)])
    assert single.recipes[0].gpus == 1 and single.recipes[0].layout == ""


def test_point_names_and_params() -> None:
    assert PointKey.parse("p2048-c1") == PointKey(2048, 1)
    assert PointKey.parse("vllm-p512-o128-c4") == PointKey(512, 4)
    assert PointKey.parse("p100-cmax") == PointKey(100, None)
    assert PointKey.parse("warm", [100, 300, 200]) == PointKey(200, None)
    assert PointKey.parse("warm") is None
    assert PointKey.parse("p512-d4096-c1") == PointKey(512, 1, 4096)
    assert PointKey(512, 1, 4096).label == "p512-d4096-c1"
    assert PointKey(512, 1, 0).label == "p512-c1"  # labels without a depth stay as they were
    assert PointKey.parse("vllm-p512-o128-c1-d4096") == PointKey(512, 1, 4096)
    for key in (PointKey(2048, 1), PointKey(100, None), PointKey(8192, 16),
                PointKey(64, None, 128)):
        assert PointKey.parse(key.label) == key  # one key: written and read back the same
    assert key_params(("--a", "1", "--flag", "--b=2")) == (("a", "1"), ("flag", "true"),
                                                            ("b", "2"))


def test_cli_builds_the_site_from_the_store(
    stored: tuple[str, list[str], list[str], Site], tmp_path: Path
) -> None:
    url = stored[0]
    cli = Path(sys.executable).parent / "servelab"
    out = tmp_path / "site"
    proc = subprocess.run([str(cli), "site", "build", str(out), "--db", url, "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["recipes"] == ["tiny-bf16", "tiny-kv"] and doc["runs"] == 9
    assert Path(doc["index"]).is_file()
    html = (out / "recipes" / "tiny-bf16.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;/tiny" in html
    # a missing database is a one-line error, and nothing is written
    missing = tmp_path / "nope.db"
    proc = subprocess.run([str(cli), "site", "build", str(tmp_path / "x"), "--db", str(missing)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "no results database" in proc.stderr and str(missing) in proc.stderr
    assert not missing.exists() and not (tmp_path / "x").exists()


def test_measured_numbers_are_measured(stored: tuple[str, list[str], list[str], Site]) -> None:
    """Every Measured on a recipe page names a stored run."""
    _, bf16, kv, site = stored
    ids = {*bf16, *kv}
    page = site.recipes[0]
    for row in (*page.decode, *page.prefill):
        assert isinstance(row.measured, Measured) and row.measured.run_id in ids


def test_the_calibration_ledger_page_from_real_h200_exports() -> None:
    from servelab.store.exchange import read_import_file

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results"
    runs = [*read_import_file(results / "run-h200-qwen3-30b-a3b-fp8.json"),
            *read_import_file(results / "calibration-2026-12-03" / "runs-h200-calibration.json")]
    site = site_from_records(runs)
    assert {r.model.split(" [")[0] for r in site.ledger} >= {
        "llama-3.1-8b-bf16-random", "qwen3-next-bf16-12l-random"}
    files = render_site(site)
    page = files["calibration.html"]
    assert "qwen3-next-bf16-12l-random" in page and 'class="tag">predicted' in page
    assert "on h200" in files["calibration.md"] and "| 8,192 |" in files["calibration.md"]
    for rel, content in files.items():
        if rel.startswith("recipes/") and rel.endswith(".html"):
            assert 'href="../calibration.html"' in content, rel
    assert 'href="calibration.html"' in files["index.html"]


# --- shareable pages: the model by id, a command a reader can run, no local paths -------------

_ENGINE_PY = "/home/someone/.local/share/servelab/engines/vllm-cpu/venv/bin/python"
_SYNTH_DIR = "/tmp/pytest-7/work/models/synth/qwen3_moe-0f3a"
_RUN_DIR = "/tmp/pytest-7/work/runs/20260701-tiny"
_RUN_PORT = "41234"
_SYNTH_RECIPE = ('name = "tiny-cpu"\n[model]\nsynth = "qwen3_moe"\n'
                 'served_name = "tiny-qwen3-moe"\n[engine]\nname = "vllm"\n'
                 f'python = "{_ENGINE_PY}"\n[engine.flags]\nmax_model_len = 4096\n')


def _as_servelab_ran_it(recipe_text: str, model_dir: str | None) -> RunRecord:
    argv = (_ENGINE_PY, "-m", "vllm.entrypoints.openai.api_server", "--model",
            model_dir or "Qwen/Qwen3.6-35B-A3B-FP8", "--served-model-name", "tiny-qwen3-moe",
            "--host", "127.0.0.1", "--port", _RUN_PORT, "--max-model-len", "4096",
            f"--download-dir={_RUN_DIR}/hf")
    base = record(0, "tiny-cpu", "BF16", "0.32.0", 50.0)
    warnings = [{"kind": "kv-profiling-skipped",
                 "text": f"WARNING skipped memory profiling for {model_dir or 'the model'}"}]
    return dataclasses.replace(
        base, run_id="share1", model_id="tiny-qwen3-moe", recipe_text=recipe_text,
        engine_args=argv, checkpoint_path=model_dir, extra={"run_dir": _RUN_DIR},
        engine_facts={**(base.engine_facts or {}), "warnings": warnings})


def test_recipe_pages_name_the_model_by_id_and_keep_local_paths_on_the_run_page() -> None:
    run = _as_servelab_ran_it(_SYNTH_RECIPE, _SYNTH_DIR)
    site = site_from_records([run])
    [page] = site.recipes
    assert page.checkpoint == "synth:qwen3_moe" and page.port == 8000
    assert page.command[:5] == ("python", "-m", "vllm.entrypoints.openai.api_server",
                                "--model", "qwen3_moe")
    assert "--port" in page.command and page.command[page.command.index("--port") + 1] == "8000"
    files = render_site(site)
    shared = {k: v for k, v in files.items() if not k.startswith("runs/")}
    assert "recipes/tiny-cpu.toml" in shared
    for name, content in shared.items():
        for local in ("/tmp/pytest-7", "/home/someone", _RUN_PORT):
            assert local not in content, (name, local)
    html = files["recipes/tiny-cpu.html"]
    assert "synth:qwen3_moe" in html and "servelab run tiny-cpu.toml" in html
    assert "http://127.0.0.1:8000/v1/chat/completions" in html
    assert 'python = "<local path>"' in files["recipes/tiny-cpu.toml"]
    assert "servelab run tiny-cpu.toml" in files["recipes/tiny-cpu.md"]
    run_page = files["runs/share1.html"]
    assert _SYNTH_DIR in run_page and _RUN_DIR in run_page and f"--port {_RUN_PORT}" in run_page


def test_a_hub_model_is_shown_by_its_repo_id() -> None:
    text = ('name = "tiny-cpu"\n[model]\nrepo = "Qwen/Qwen3.6-35B-A3B-FP8"\n'
            'revision = "main"\n[engine]\nport = 8011\n')
    [page] = site_from_records([_as_servelab_ran_it(text, None)]).recipes
    assert page.checkpoint == "Qwen/Qwen3.6-35B-A3B-FP8@main" and page.port == 8011
    assert "Qwen/Qwen3.6-35B-A3B-FP8" in page.command and "8011" in page.command
    assert "--download-dir=<local path>" in page.command


def test_a_recipe_page_shows_what_was_published_for_its_build_on_its_hardware() -> None:
    """Issue 40: the shipped published table's rows for the very build (its Hub repo id) on
    the run's hardware appear on its page, with their source and date; elsewhere none."""
    text = ('name = "fp8-spark"\n[model]\nrepo = "Qwen/Qwen3.6-35B-A3B-FP8"\n'
            'revision = "main"\n[engine]\nport = 8011\n')
    run = dataclasses.replace(_as_servelab_ran_it(text, None), hardware="dgx-spark")
    [page] = site_from_records([run]).recipes
    lines = [line for line, _ in page.published]
    assert any(line.startswith("published: 38.27 tok/s decode, 2,048-token prompt, vllm "
                               "0.24.0 (seed recipe page") for line in lines), lines
    html = render_site(site_from_records([run]))[f"recipes/{page.slug}.html"]
    assert "Published figures (shown, not fitted)" in html and "38.27 tok/s decode" in html
    [cpu] = site_from_records([_as_servelab_ran_it(text, None)]).recipes
    assert cpu.published == ()  # nothing published for this build on a CPU
