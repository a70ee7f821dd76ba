"""A fit shipped as data: written and read back unchanged, the shipped file holds every
published point with its source and held-out error, and a step predicted from it carries
its interval and says whose efficiencies it used."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from servelab.errors import UsageError
from servelab.hardware.lookup import get_profile
from servelab.ops.efficiency import Efficiency, PointWork, fit, held_out, point_work, predict_ms
from servelab.ops.fitted import fit_doc, load_fit, predict, shipped_fits
from servelab.ops.model import step_model
from servelab.ops.step import StepShape

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
         "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 16,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 8192,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_a_fit_is_shipped_as_data_and_predicts_a_step_with_its_interval() -> None:
    prof = get_profile("rtx-4090")
    model = step_model(LLAMA)
    truth = Efficiency("rtx-4090", "eng", 0.7, 0.5, 2.0)
    pts = []
    for i, (kind, n) in enumerate((("decode", 128), ("decode", 2048), ("prefill", 512),
                                   ("prefill", 4096))):
        shape = StepShape.decode(1, n) if kind == "decode" else StepShape.prefill(n)
        pw = point_work(f"p{i}", model, shape, prof, engine="eng", kind=kind,
                        build=f"b{i}", family="llama", measured_ms=1.0)
        pts.append(PointWork(pw.ident, pw.hardware, "eng", kind, pw.build, "llama",
                             predict_ms(pw, truth), pw.terms, pw.kernels))
    f = fit(pts, lam=1e-3)
    errs = held_out(pts)
    doc = fit_doc(f, errs, pts, {"source": "test"})
    f2, recs = load_fit(doc)
    assert len(recs) == 4 and f2.hardware["rtx-4090"].mem == pytest.approx(f.hardware[
        "rtx-4090"].mem)
    p = predict(model, StepShape.decode(1, 128), prof, "eng", (f2, recs))
    assert p.ms == pytest.approx(pts[0].measured_ms, rel=0.02)
    assert p.kind == "decode" and p.interval.n >= 1


def _shipped_doc() -> dict[str, object]:
    f = resources.files("servelab.ops") / "data" / "efficiency.json"
    doc: dict[str, object] = json.loads(f.read_text(encoding="utf-8"))
    return doc


def test_the_shipped_fit_holds_every_point_with_its_source_and_held_out_error() -> None:
    doc = _shipped_doc()
    assert str(doc["command"]).startswith(".venv/bin/python benchmarks/ops_beyond_h200.py")
    assert "--write" in str(doc["command"])
    fits = shipped_fits()
    assert set(fits) == {"llamacpp", "vllm"}
    for d in doc["fits"]:  # type: ignore[attr-defined]
        pts, errs = d["points"], d["held_out"]
        assert sorted(p["ident"] for p in pts) == sorted(e["ident"] for e in errs)
        assert all(p["source"] and p["measured_ms"] > 0 for p in pts)
        f, recs = fits[d["engine"]]
        assert f.points == tuple(p["ident"] for p in pts) and len(recs) == len(errs)
        # every hardware with a point has its own efficiencies, each a fraction of peak
        assert {p["hardware"] for p in pts} == set(f.hardware)
        assert all(0 < e.mem <= 1.5 and e.kernel_us > 0 for e in f.hardware.values())


def test_a_shipped_prediction_names_its_efficiencies_and_its_interval() -> None:
    model = step_model(LLAMA)
    f, _ = shipped_fits()["vllm"]
    own = sorted(f.hardware)[0]
    p = predict(model, StepShape.decode(1, 1024), get_profile(own), "vllm")
    assert p.hardware == own and p.kind == "decode" and p.ms > 0
    assert p.source.startswith("fitted to") and p.interval.n > 0
    if p.interval.ok:
        assert p.interval.low_ms is not None and p.interval.high_ms is not None
        assert p.interval.low_ms < p.ms < p.interval.high_ms
    # hardware without a point takes the engine's mean over hardware, and says so
    other = next(h for h in ("rtx-4090", "rtx-5090", "h100", "b200") if h not in f.hardware)
    q = predict(model, StepShape.decode(1, 1024), get_profile(other), "vllm")
    assert "mean over" in q.source and f"no point on {other}" in q.source
    with pytest.raises(UsageError, match="no fitted sglang efficiencies"):
        predict(model, StepShape.decode(1, 1024), get_profile(own), "sglang")
