"""The model page leads with which build to download on every hardware servelab knows, the
recipe pages open with their finding, and the page reads at a glance at 1,300 pixels.

The runs are stored as ``servelab run`` stores them (recipe text, the checkpoint it served,
samples) for two recipes of one real tiny checkpoint on the H200 profile: BF16 and the
same checkpoint served as FP32 (``dtype = "float32"``: twice the bytes per token).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from site_chromium import Browser, chromium_available, serve_directory

from servelab.checkpoint import load_checkpoint
from servelab.cli.answers import answered_site
from servelab.hardware.profiles import BUILTIN
from servelab.site.build import build_site
from servelab.site.collect import point_values, prediction_of
from servelab.site.fmt import format_number
from servelab.site.model import Measured
from servelab.store import Metric, RunRecord, Sample, open_store

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
RECIPE = """\
name = "{name}"
hardware = "h200"

[model]
path = "{path}"
served_name = "tiny"

[engine]
name = "vllm"
version = "==0.26.0"

[engine.flags]
max_model_len = 4096
dtype = "{dtype}"
"""


def _samples(decode: float, *, bulk_128: bool = False) -> tuple[Sample, ...]:
    out = []
    for p in (128, 2048):
        values = ((140_000.0, 1_000.0, 1_000.0, 1_000.0, 132_760.0) if bulk_128 and p == 128
                  else tuple(decode + j for j in (-0.3, -0.1, 0.0, 0.1, 0.3)))
        out += [Sample(point=f"p{p}-c1", index=i, ttft_s=p / 9000, tpot_s=1 / v, e2e_s=1.0,
                       prompt_tokens=p, completion_tokens=64) for i, v in enumerate(values)]
    return tuple(out)


def _run(i: int, name: str, dtype: str, ckpt: Path, decode: float, **kw: object) -> RunRecord:
    return RunRecord(
        started_at=T0 + timedelta(hours=i), recipe_name=name, model_id="tiny-org/tiny-moe",
        recipe_text=RECIPE.format(name=name, path=ckpt, dtype=dtype), checkpoint_path=str(ckpt),
        checkpoint_header_hash=load_checkpoint(ckpt).header_sha256, hardware="h200",
        hardware_profile=BUILTIN["h200"].to_dict(), host="gpu-1", engine_name="vllm",
        engine_version="0.26.0", weights_gib=0.0,
        engine_args=("vllm", "serve", str(ckpt), "--max-model-len", "4096"),
        samples=_samples(decode, **kw))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    from servelab.synth.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("answer")
    ckpt = make_tiny_model("qwen3_moe", root / "ckpt")
    url = f"sqlite:///{root / 'results.db'}"
    with open_store(url) as store:
        store.add_run(_run(0, "tiny-bf16", "bfloat16", ckpt, 50.0, bulk_128=True))
        store.add_run(_run(1, "tiny-fp32", "float32", ckpt, 40.0))
    return url


def test_a_rate_whose_interval_reaches_zero_is_not_a_measurement(store_url: str) -> None:
    with open_store(store_url) as store:
        run = store.list_runs(samples=True)[0]
    points = {k.prompt_tokens: v for k, v in point_values(run, "decode_tok_s").items()}
    assert 128 not in points and 2048 in points  # 55,152 tok/s [<0, 140,294] is withheld
    stored = RunRecord(started_at=T0, run_id="r", metrics=(
        Metric("decode_tok_s", 55_152.0, "p128-c1", -29_989.0, 140_294.0, 5, "tok/s"),))
    assert point_values(stored, "decode_tok_s") == {}


def test_an_interval_over_an_order_of_magnitude_is_no_prediction() -> None:
    from servelab.sizing.document import read_plan

    doc = {"decode": [{"context_len": 512, "bytes_per_token": 1, "roofline_tok_s": 9e6,
                       "predicted_tok_s": 1000.0, "predicted_low": 788.8,
                       "predicted_high": 5_507_080.0}], "prefill": []}
    plan = read_plan(doc)
    assert prediction_of(plan.decode[0], plan, "r") is None
    doc["decode"][0]["predicted_high"] = 1200.0
    plan = read_plan(doc)
    assert prediction_of(plan.decode[0], plan, "r") is not None


def test_zero_gib_from_a_log_is_below_its_precision() -> None:
    assert format_number(Measured(0.0, "GiB", "r")) == "< 0.01 GiB"
    assert format_number(Measured(35.28, "GiB", "r")) == "35.28 GiB"


def test_model_page_leads_with_the_answer(store_url: str) -> None:
    with open_store(store_url) as store:
        site = answered_site(store)
    (index,) = site.models
    answers = {a.hardware: a for a in index.answers}
    assert set(answers) == set(BUILTIN)  # every hardware servelab knows
    h200 = index.answers[0]
    assert h200.hardware == "h200" and h200.basis == "measured"  # measured hardware first
    assert h200.pick == "tiny-bf16" and isinstance(h200.decode, Measured)
    assert "tiny-fp32 reads 2.00x the bytes per token" in h200.reason
    assert re.search(r"measured in run \S+ against [\d.,]+ tok/s measured in run", h200.reason)
    for a in index.answers[1:]:
        assert a.basis in ("predicted", "bound", "none"), a
        assert "measured" not in a.reason
    pages = {p.slug: p for p in site.recipes}
    assert pages["tiny-bf16"].finding.startswith("On h200, this is the build of ")
    assert pages["tiny-fp32"].finding.startswith("On h200, download tiny-bf16 rather than")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not chromium_available():
        pytest.skip("chromium is not installed")
    b = Browser()
    try:
        yield b
    finally:
        b.close()


@pytest.mark.browser
def test_model_page_at_1300_pixels(store_url: str, tmp_path: Path, browser: Browser) -> None:
    with open_store(store_url) as store:
        site = answered_site(store)
    built = build_site(site, tmp_path / "site")
    with serve_directory(built.outdir) as base, browser.page(
            base + f"models/{site.models[0].slug}.html", width=1300, height=900) as page:
        assert page.result.errors == []
        # the answer comes first, then the builds table
        order = page.js("[...document.querySelectorAll('h2')].map(h => h.innerText)")
        assert order[:2] == ["Which build to download", "Every build, measured"]
        rows = page.js("[...document.querySelectorAll('#answer-table tbody tr')].map(tr => ({"
                       "hw: tr.dataset.hardware, basis: tr.dataset.basis, pick: tr.dataset.pick,"
                       "link: tr.cells[2].querySelector('a.measured')?.getAttribute('href'),"
                       "predicted: !!tr.cells[2].querySelector('.predicted')}))")
        assert rows[0]["hw"] == "h200" and rows[0]["link"].startswith("../runs/")
        assert all(r["predicted"] for r in rows if r["basis"] == "predicted")
        # nothing wider than the window: the last column of the builds table is in view
        assert page.js("document.documentElement.scrollWidth") <= 1300
        right = page.js("Math.max(...[...document.querySelectorAll('#builds-table th')]"
                        ".map(th => th.getBoundingClientRect().right))")
        assert right <= 1300
        last = page.js("[...document.querySelectorAll('#builds-table th')].pop().innerText")
        assert last == "Last verified"
        weights = page.js("[...document.querySelectorAll('#builds-table tbody tr')]"
                          ".map(tr => tr.cells[tr.cells.length - 3].innerText)")
        assert weights and all(w == "< 0.01 GiB" for w in weights)
