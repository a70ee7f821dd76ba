"""Efficiencies fitted to end-to-end points: a planted model is recovered, held-out units are
chosen as stated, and an interval too wide is no prediction."""

from __future__ import annotations

import math

import pytest

from servelab.hardware.lookup import get_profile
from servelab.ops.efficiency import (
    Efficiency,
    HeldOut,
    PointWork,
    RooflineCosts,
    Term,
    fit,
    held_out,
    interval,
    point_work,
    predict_ms,
    unit_of,
)
from servelab.ops.model import step_model
from servelab.ops.step import StepShape

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
         "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 16,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 8192,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _point(ident: str, hw: str, fam: str, build: str, kind: str, mem: float, comp: float,
           eff: Efficiency, kernels: int = 100) -> PointWork:
    terms = (Term(f"gemm:{build}", "gemm", mem, comp, 10.0), Term("small", "small", 0.01,
                                                                     0.0, 20.0))
    p = PointWork(ident, hw, "eng", kind, build, fam, 1.0, terms, kernels)
    return PointWork(ident, hw, "eng", kind, build, fam, predict_ms(p, eff), terms, kernels)


def test_the_fit_recovers_a_planted_model() -> None:
    truth = {"a": Efficiency("a", "eng", 0.8, 0.5, 3.0, {"gemm:x": 0.9}, {"gemm:x": 1.1}),
             "b": Efficiency("b", "eng", 0.6, 0.4, 5.0, {"gemm:x": 0.9}, {"gemm:x": 1.1})}
    pts = []
    for hw, e in truth.items():
        for i, (mem, comp) in enumerate(((1.0, 0.1), (2.0, 0.2), (0.1, 3.0), (0.2, 5.0))):
            kind = "decode" if mem > comp else "prefill"
            pts.append(_point(f"{hw}{i}", hw, "f", "x", kind, mem, comp, e, 100 + 50 * i))
    f = fit(pts, lam=1e-4)
    for p in pts:
        assert predict_ms(p, f.efficiency(p.hardware)) == pytest.approx(p.measured_ms,
                                                                          rel=0.02)
    # a hardware with no point takes the engine's mean, said in its source
    assert "no point on c" in f.efficiency("c").source


def test_the_held_out_unit_is_the_family_then_the_build_then_the_point() -> None:
    e = Efficiency("a", "eng", 0.8, 0.5, 3.0)
    two_fams = [_point("p1", "a", "f1", "x", "decode", 1, 0.1, e),
                _point("p2", "a", "f2", "x", "decode", 2, 0.1, e)]
    assert unit_of(two_fams[0], two_fams)[0] == "family"
    two_builds = [_point("p1", "a", "f", "x", "decode", 1, 0.1, e),
                  _point("p2", "a", "f", "y", "decode", 2, 0.1, e)]
    assert unit_of(two_builds[0], two_builds)[0] == "build"
    one = [_point("p1", "a", "f", "x", "decode", 1, 0.1, e)]
    assert unit_of(one[0], one)[0] == "point"
    ho = held_out([*two_builds, _point("q", "b", "f", "x", "decode", 1, 0.1, e)])
    assert {h.unit for h in ho} == {"build", "point"} and len(ho) == 3


def test_an_interval_comes_from_held_out_errors_and_can_be_no_prediction() -> None:
    e = Efficiency("a", "eng", 0.8, 0.5, 3.0)
    pts = [_point(f"p{i}", "a", "f", "x", "decode", 1 + i, 0.1, e) for i in range(4)]
    small = [HeldOut(p, p.measured_ms * (1.1 if i % 2 else 0.95), "point", True)
             for i, p in enumerate(pts)]
    iv = interval(10.0, small, "a", "eng", "decode")
    assert iv.ok and iv.high_ms == pytest.approx(10.0 * 1.1)
    assert "on a" in iv.basis and iv.n == 4
    # excluding the point scored (and its unit): its own error never sets its interval
    iv2 = interval(10.0, small, "a", "eng", "decode",
                   exclude=lambda q: q.ident in ("p1", "p3"))
    assert iv2.high_ms == pytest.approx(10.0 / 0.95) and "every hardware" in iv2.basis
    wide = [HeldOut(p, p.measured_ms * 3.0, "point", True) for p in pts]
    no = interval(10.0, wide, "a", "eng", "decode")
    assert not no.ok and "no prediction" in no.basis and math.isfinite(no.half_width_log)


def test_a_roofline_step_names_its_work_and_its_efficiency() -> None:
    model = step_model(LLAMA)
    prof = get_profile("rtx-4090")
    pw = point_work("x", model, StepShape.decode(1, 512), prof, engine="eng", kind="decode",
                    build="b", family="llama", measured_ms=1.0)
    keys = {t.key for t in pw.terms}
    assert {"gemm:bf16", "attention", "small"} <= keys and pw.kernels > 4 * 6
    bare = sum(t.count * max(t.mem_ms, t.comp_ms) for t in pw.terms)
    half = Efficiency("rtx-4090", "eng", 0.5, 0.5, 0.0)
    assert predict_ms(pw, half) == pytest.approx(2 * bare, rel=1e-6)
    lk = RooflineCosts(prof, half).gemm(1, 4096, 1024, "bf16")
    assert lk.how == "roofline" and "roofline x efficiency" in RooflineCosts(prof, half).label
