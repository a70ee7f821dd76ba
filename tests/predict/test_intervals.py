"""The interval rule on synthetic data where the right answer is known: a family the
calibration set has not seen, the width refusal, a thin calibration set, the coverage rule."""

from __future__ import annotations

import dataclasses
import math

import pytest

from servelab.errors import UsageError
from servelab.predict.form import Coefficients, Sample, features, row_seconds
from servelab.predict.holdout import Reference, held_out
from servelab.predict.keys import BuildKey
from servelab.predict.levels import (
    BY_FAMILY,
    BY_ONE_FAMILY,
    MAX_RATIO,
    Fit,
    Level,
    Target,
    fit_levels,
    interval,
    levels_for,
)
from servelab.predict.widths import conformal

TRUE = Coefficients.of("decode", s_per_byte=1 / 4.0e12, s_per_layer=40e-6,
                       s_per_expert_slot=0.18e-6)
ROOF = Coefficients.of("decode", s_per_byte=1 / 4.8e12)
# What the form leaves out, per family (a kernel or runtime effect servelab does not model):
# siblings of one family share it, so they predict each other and nothing about another family.
FAMILY_FACTOR = {"fam-a": 1.0, "fam-b": 1.30, "fam-c": 0.85, "fam-d": 1.12, "fam-e": 0.95}
# (build, bytes per token, layers, routed experts) of three builds per family
BUILDS = (("4b", 8e9, 36, 0), ("30b", 3.4e9, 48, 128), ("70b", 70e9, 80, 0))
# three builds of one model (BF16, FP8, FP4 weights): the DGX Spark's shipped priors
SIBLINGS = (("30b-bf16", 6.8e9, 48, 128), ("30b-fp8", 3.4e9, 48, 128), ("30b-fp4", 1.9e9, 48, 128))


Builds = tuple[tuple[str, float, int, int], ...]


def _samples(hardware: str, families: tuple[str, ...], builds: Builds = BUILDS) -> list[Sample]:
    out = []
    for fam in families:
        for name, nbytes, layers, experts in builds:
            for length in (512, 2048, 8192):
                b = nbytes + 2e4 * length
                slots = layers * experts
                t = row_seconds(TRUE, features("decode", b, layers, expert_slots=slots))
                out.append(Sample(BuildKey(f"{fam}-{name}", fam), "vllm", "bf16", hardware,
                                  "decode", length, layers, b, 0.0, t * FAMILY_FACTOR[fam],
                                  "synthetic", expert_slots=slots))
    return out


def _roof(kind: str, s: Sample) -> Coefficients:
    return ROOF


def test_a_family_the_hardware_has_not_seen_gets_the_leave_one_family_out_error() -> None:
    # "spark" holds three builds of one family; "rich" four families, fam-b among them.
    spark = _samples("spark", ("fam-a",), SIBLINGS)
    rich = _samples("rich", ("fam-a", "fam-b", "fam-c", "fam-d"))
    unseen = _samples("spark", ("fam-b",), SIBLINGS)  # measured later, never calibrated from
    target = Target("vllm", "bf16", "spark", family="fam-b")
    levels = levels_for(target, spark, [])
    siblings = fit_levels(levels, "decode", target, ROOF)

    def misses(fit: Fit) -> list[bool]:
        out = []
        for s in unseen:
            tok = 1.0 / fit.seconds(s.features)
            band = interval(tok, fit.rel_error)
            assert band is not None
            out.append(not band[0] <= s.tok_s <= band[1])
        return out

    # the siblings' spread: narrow, and every point of the other family falls outside it
    assert siblings.rel_error is not None and siblings.rel_error <= 0.05
    assert all(misses(siblings))
    reference = Reference(rich, _roof)
    lent = fit_levels(levels, "decode", target, ROOF, reference=reference)
    by_family = reference.for_hardware("spark", "decode", BY_FAMILY)
    one_family = reference.for_hardware("spark", "decode", BY_ONE_FAMILY)
    assert by_family is not None and one_family is not None
    assert by_family.hardware == "rich" and by_family.groups == 4
    assert lent.rel_error == max(by_family.half_width or 0.0, one_family.half_width or 0.0)
    # the reason says which evidence is missing and where the width was measured
    assert "no model of family fam-b on spark" in lent.error_basis or (
        "3 models of 1 family on spark: too few" in lent.error_basis)
    assert "on rich (4 families" in lent.error_basis
    # and the lent interval holds the unseen family's points
    assert not any(misses(lent))
    # the leave-one-family-out errors are those of a fit from the other families
    points = held_out(rich, _roof, BY_FAMILY)
    assert {p.group for p in points} == {"fam-a", "fam-b", "fam-c", "fam-d"}
    errs = [p.error for p in points if p.error is not None]
    assert by_family.half_width == conformal(errs) and by_family.points == len(errs)


def test_a_covered_family_with_enough_models_keeps_its_own_interval() -> None:
    # nine models of five families on one hardware: the level's own held-out errors bound a
    # new build of a family it holds; nothing is lent
    here = [s for s in _samples("rich", tuple(FAMILY_FACTOR))
            if not s.build.model.startswith("fam-e-7")]
    assert len({s.build.model for s in here}) >= 9
    target = Target("vllm", "bf16", "rich", model="fam-c-30b", family="fam-c")
    levels = levels_for(target, here, [])
    own = fit_levels(levels, "decode", target, ROOF)
    lent = fit_levels(levels, "decode", target, ROOF, reference=Reference(here, _roof))
    assert lent.rel_error == own.rel_error and lent.error_basis == own.error_basis
    assert "90% of leave-one-model-out errors" in own.error_basis


def test_an_interval_wider_than_the_stated_factor_is_no_prediction() -> None:
    def fit(e: float | None) -> Fit:
        return Fit("decode", TRUE, "prior", "synthetic", ("m",), 3, e, "synthetic basis")

    # upper / lower = (1 + e) / (1 - e): 4x at e = 0.6
    limit = (MAX_RATIO - 1) / (MAX_RATIO + 1)
    assert fit(limit - 1e-9).refused is None
    refused = fit(limit + 1e-6).refused
    assert refused is not None and refused.startswith("no prediction")
    assert "synthetic basis" in refused  # it says why the interval is that wide
    assert fit(1.5).refused is not None  # an interval with no top at all
    assert fit(None).refused is None  # no interval: the roofline alone, not a refusal


def test_conformal_half_width_covers_the_stated_share() -> None:
    errs = [i / 100 for i in range(1, 11)]  # 1 % ... 10 %
    # n = 10: the ceil(11 x 0.9) = 10th smallest
    assert conformal(errs) == pytest.approx(0.10)
    assert conformal(errs, 0.5) == pytest.approx(0.06)  # ceil(11 x 0.5) = 6th
    assert conformal(errs[:8]) is None  # 8 errors cannot bound 90 %
    # on exchangeable errors it covers about the stated share of new ones
    draws = [math.sin(i * 12.9898) * 0.3 for i in range(2000)]
    half = conformal(draws[:200])
    assert half is not None
    inside = sum(1 for d in draws[200:] if abs(d) <= half) / len(draws[200:])
    assert 0.85 <= inside <= 0.95


def test_a_thin_level_does_not_narrow_a_grounded_one() -> None:
    # A kernel path with three models on a hardware whose pooled level holds ten: the path's
    # own spread is narrower (its siblings agree) but rests on too few models, so the fit
    # keeps the pooled level's wider interval.
    pooled = _samples("rich", tuple(FAMILY_FACTOR))
    fp8 = [dataclasses.replace(s, kernel_path="fp8")
           for s in _samples("rich", ("fam-a",), SIBLINGS)]
    target = Target("vllm", "fp8", "rich", family="fam-a")
    levels = levels_for(target, pooled + fp8, [])
    assert [lv.pooled for lv in levels] == [False, True]
    path_only = fit_levels(levels[:1], "decode", target, ROOF)
    both = fit_levels(levels, "decode", target, ROOF)
    below = fit_levels(levels[1:], "decode", target, ROOF)
    assert path_only.rel_error is not None and below.rel_error is not None
    assert path_only.rel_error < below.rel_error
    assert both.rel_error == below.rel_error
    assert "3 models here, too few to bound a new build at 90 %" in both.error_basis


def test_one_fresh_run_joins_the_priors_instead_of_replacing_them() -> None:
    # The priors hold nine builds of a path; the store one fresh run of a dense model whose
    # session ran 25 % slow (what the form cannot see). Alone above the priors, that run's fit
    # would carry every prediction; pooled with them, it is one model among ten.
    priors = _samples("h", ("fam-a", "fam-c", "fam-d"))
    assert all(FAMILY_FACTOR[s.build.family] != 1.25 for s in priors)
    fresh = [dataclasses.replace(s, build=BuildKey("fresh-70b", "fam-x"),
                                 seconds=row_seconds(TRUE, s.features) * 1.25)
             for s in _samples("h", ("fam-a",)) if s.build.model == "fam-a-70b"]
    truth = [s for s in _samples("h", ("fam-a",)) if s.build.model == "fam-a-30b"]
    target = Target("vllm", "bf16", "h", model="fam-a-30b", family="fam-a")
    levels = levels_for(target, fresh, priors)
    assert levels[0].level == "stored runs with prior"
    assert {s.build.model for s in levels[0].samples} >= {"fresh-70b", "fam-c-4b"}
    replaced = [Level("stored runs", tuple(fresh), "one run"), *levels[1:]]

    def worst(lv: list[Level]) -> float:
        fit = fit_levels(lv, "decode", target, ROOF, intervals=False)
        return max(abs(fit.seconds(s.features) / s.seconds - 1) for s in truth)

    assert worst(levels) < worst(replaced)
    assert worst(levels) < 0.15 < worst(replaced)
    # a store with as many models as the priors keeps its own level on top
    many = [dataclasses.replace(s, build=BuildKey(f"run-{s.build.model}", s.build.family))
            for s in priors]
    assert levels_for(target, many, priors)[0].level == "stored runs"


def test_calibration_report_shows_the_leave_one_family_out_view() -> None:
    import json

    from typer.testing import CliRunner

    from servelab.cli.app import app

    res = CliRunner().invoke(app, ["calibration", "report", "--priors-only", "--by", "family",
                                   "-H", "h200", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "servelab.holdout/1" and doc["by"] == "family"
    rows = doc["rows"]
    # qwen2: the llama.cpp Qwen2.5-7B rows (the H200's second llama.cpp family)
    assert {r["group"] for r in rows} == {"llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_hybrid"}
    assert all(r["hardware"] == "h200" for r in rows)
    # each row's build is of the family left out, predicted by a fit without it
    assert all(r["group"].split("_")[0] in r["build"].replace(".", "") for r in rows)
    (decode,) = [s for s in doc["summary"] if s["kind"] == "decode"]
    errs = [r["error"] for r in rows if r["kind"] == "decode" and r["error"] is not None]
    assert decode["half_width_90"] == conformal(errs) and decode["groups"] == 5
    bad = CliRunner().invoke(app, ["calibration", "report", "--priors-only", "--by", "quant"])
    assert bad.exit_code != 0 and isinstance(bad.exception, UsageError)
    assert "--by must be model, family or kernel-path" in str(bad.exception)
