"""The operator model as the prediction source of ``servelab plan`` on hardware with
operator tables (issue 39 items 2 and 5): through the CLI on real header replicas, its
fallback where a kernel table is missing, and its held-out interval (which can miss)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.predict.ops_source import (
    calibration_doc,
    refit,
    runs_doc,
    shipped_calibration,
)
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout

KEY = "h200-vllm-0.26.0"
runner = CliRunner()


def _plan(path: Path) -> dict[str, Any]:
    res = runner.invoke(app, ["plan", str(path), "-H", "h200", "--json", "--no-store",
                              "--prompt-lens", "512,2048,8192"])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ops-replicas")
    out = {}
    # Qwen3-4B at its published dimensions (a stored H200 build's config)
    qwen3 = runs_doc(KEY)["builds"]["qwen3-4b-bf16-random"]["config"]
    write_replica(root / "qwen3-4b", qwen3)
    out["qwen3-4b"] = root / "qwen3-4b"
    for name in ("gemma-3-4b", "gpt-oss-20b"):  # each in its published storage
        write_replica(root / name, preset_config(name), preset_layout(name, None, None))
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", ["qwen3-4b", "gemma-3-4b"])
def test_plan_predicts_from_the_operator_model(replicas: dict[str, Path], name: str) -> None:
    """Decode and prefill at 512-8K come from the H200 tables with an interval and a
    source a user can read; prefill is no longer "no prediction"."""
    sp = _plan(replicas[name])["speed"]
    cal = shipped_calibration(KEY)
    for kind, points in (("decode", sp["decode"]), ("prefill", sp["prefill"])):
        fit = sp[f"{kind}_fit"]
        assert fit["level"] == "operator model"
        assert "H200 kernel tables measured under vLLM 0.26.0" in fit["label"]
        assert "from leaving each family out" in fit["label"]
        assert len(points) == 3
        w = cal.choice(kind).log_width
        for p in points:
            tok, lo, hi = p["predicted_tok_s"], p["predicted_low"], p["predicted_high"]
            assert tok is not None and lo is not None and hi is not None
            assert lo == pytest.approx(min(tok * math.exp(-w), p["roofline_tok_s"]))
            assert hi == pytest.approx(min(tok * math.exp(w), p["roofline_tok_s"]))
            assert tok < p["roofline_tok_s"]


def test_missing_kernel_table_falls_back_with_the_reason(replicas: dict[str, Path]) -> None:
    """gpt-oss's MXFP4 experts have no fused-MoE table in servelab's H200 tables: the plan
    names the missing table and composes over AIConfigurator's H200 tables where the extra
    is installed (they time the MXFP4 experts), else keeps the fitted prediction."""
    from servelab.ops import aic

    doc = _plan(replicas["gpt-oss-20b"])
    fit = doc["speed"]["decode_fit"]
    if aic.available():
        assert fit["level"] == "operator model"
        assert "aiconfigurator-core" in fit["label"] and "H200 kernel tables" in fit["label"]
    else:
        assert fit["level"] != "operator model"
    notes = [n for n in (*doc["notes"], *doc["speed"]["notes"]) if "operator model" in n]
    assert any("no fused-MoE table for mxfp4 experts" in n for n in notes), notes


def test_held_out_interval_can_miss() -> None:
    """The interval is the 90th percentile of held-out |log error|: some stored points,
    predicted with their family left out, fall outside it (and no more than a tenth and
    one)."""
    doc = json.loads((Path(__file__).resolve().parents[2] / "src" / "servelab" / "ops" /
                      "data" / KEY / "calibration.json").read_text())
    for kind in ("decode", "prefill"):
        w = doc[kind]["log_width"]
        errs = [abs(math.log(h["corrected_ms"] / h["measured_ms"])) for h in doc["held_out"]
                if h["kind"] == kind and not h["device_only"]]
        missed = sum(e > w for e in errs)
        assert 1 <= missed <= len(errs) // 10 + 1, (kind, missed, len(errs))


def test_shipped_calibration_is_the_fit_of_the_shipped_runs() -> None:
    """calibration.json is what the package's calibration fits on the shipped runs now
    (benchmarks/ops/export_runs.py rewrites both)."""
    shipped = json.loads((Path(__file__).resolve().parents[2] / "src" / "servelab" / "ops" /
                          "data" / KEY / "calibration.json").read_text())
    fresh = json.loads(json.dumps(calibration_doc(refit(KEY))))
    assert _close(fresh, shipped)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def test_load_steps_come_from_the_operator_model(replicas: dict[str, Path]) -> None:
    """``plan --concurrency`` on the H200 simulates steps priced by the operator model: its
    source says so, and one stream's TPOT is the single-stream decode step at the contexts
    it decodes over (the same sum, within the context's change over 128 tokens)."""
    res = runner.invoke(app, ["plan", str(replicas["qwen3-4b"]), "-H", "h200", "--json",
                              "--no-store", "--prompt-lens", "512", "--concurrency", "1,16"])
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.stdout)
    load = doc["load"]["points"]
    assert load["source"].startswith("batched step model over operator model: H200 kernel")
    one, sixteen = load["points"]
    assert not one["no_prediction"] and not sixteen["no_prediction"]
    tpot_1 = one["tpot_s"]["value"]
    decode_512 = 1.0 / doc["speed"]["decode"][0]["predicted_tok_s"]
    assert tpot_1 == pytest.approx(decode_512, rel=0.02)
    assert sixteen["tpot_s"]["value"] > tpot_1  # 16 streams share each step
    assert sixteen["output_tok_s_per_gpu"]["value"] > 8 * one["output_tok_s_per_gpu"]["value"]
