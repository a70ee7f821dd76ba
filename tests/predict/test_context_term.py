"""llama.cpp's decode context term (``s_per_context_layer``): fitted from samples at several
context lengths, held where one length cannot identify it, and absent from vLLM's rows."""

from __future__ import annotations

import pytest

from servelab.predict.form import DECODE, Sample, context_layers, features, row_seconds
from servelab.predict.keys import BuildKey
from servelab.predict.levels import Fit, Target, fit_levels, levels_for

# s/byte, s/layer, s/expert slot, s/(context token x attention layer), s fixed: a CPU's decode
TRUE = (1 / 20e9, 300e-6, 0.0, 3e-7, 1.5e-3)  # 0.3 us: the CPU rows show ~0.5
ROOF = (1 / 40e9, 0.0, 0.0, 0.0, 0.0)
KV_PER_TOKEN = 16_384  # bytes of KV per context token over all layers


def _samples(engine: str, lengths: tuple[int, ...], true: tuple[float, ...] = TRUE,
             path: str = "gguf-q8_0") -> list[Sample]:
    """Exact decode samples of three models on a CPU: times from ``true`` over llama.cpp's
    rows (context amount included) whatever ``engine`` is, so that a vLLM fit of them meets
    a cost its form has no term for."""
    out = []
    for name, weights, layers in (("a", 9e7, 8), ("b", 2.4e8, 12), ("c", 4e8, 24)):
        for n in lengths:
            nbytes = weights + KV_PER_TOKEN * n
            row = features("decode", nbytes, layers, platform="cpu",
                           context_layers=context_layers(n, layers))
            out.append(Sample(BuildKey(name), engine, path, "host", "decode", n, layers,
                              nbytes, 0.0, row_seconds(true, row), "synthetic", platform="cpu"))
    return out


# the prior the fit starts from: every other term right, the context term 0 (the physical
# prior's: it is not known before a fit); the bound is the roofline's
PRIOR = (*TRUE[:3], 0.0, TRUE[4])


def _fit(samples: list[Sample], engine: str = "llamacpp", path: str = "gguf-q8_0") -> Fit:
    target = Target(engine, path, "host")
    return fit_levels(levels_for(target, [], samples), "decode", target, PRIOR, ROOF,
                      intervals=False)


def test_the_amount_is_context_tokens_times_attention_layers() -> None:
    assert context_layers(512, 24) == 512 * 24
    assert context_layers(512, 24, linear_layers=18) == 512 * 6  # linear layers keep a state
    row = features("decode", 1e8, 24, platform="cpu", context_layers=context_layers(512, 24))
    assert row.amount("s_per_context_layer") == 512 * 24
    s = _samples("llamacpp", (128,))[0]
    assert s.features.amount("s_per_context_layer") == 128 * s.layers


def test_a_fit_recovers_a_known_per_context_token_cost_from_exact_samples() -> None:
    fit = _fit(_samples("llamacpp", (128, 512, 2048)))
    assert fit.theta.get("s_per_context_layer") == pytest.approx(TRUE[3], rel=0.02)
    assert fit.theta.get("s_per_byte") == pytest.approx(TRUE[0], rel=0.02)
    assert "decode context term fitted over 3 context lengths" in fit.label()
    for s in _samples("llamacpp", (1024, 4096)):  # lengths it never saw
        assert fit.seconds(s.features) == pytest.approx(s.seconds, rel=0.01)


def test_without_the_term_the_same_samples_miss_unseen_lengths() -> None:
    # the form before the term (no_context_term) on the same exact samples: one s/byte for
    # both lengths cannot reproduce what attention costs per context token
    plain = [Sample(**{**s.__dict__, "no_context_term": True})
             for s in _samples("llamacpp", (128, 512, 2048))]
    fit = _fit(plain)
    assert fit.theta.get("s_per_context_layer") == 0.0 and not fit.context_term
    misses = [abs(fit.seconds(s.features) / s.seconds - 1)
              for s in _samples("llamacpp", (4096,))]
    assert max(misses) > 0.1


def test_one_context_length_does_not_invent_the_term() -> None:
    fit = _fit(_samples("llamacpp", (128,)))
    assert fit.theta.get("s_per_context_layer") == pytest.approx(0.0, abs=1e-15)
    assert "no decode context term: one context length per model here" in fit.label()
    assert fit.to_dict()["context_term"] == fit.context_term


def test_a_path_with_one_length_keeps_the_pooled_levels_term() -> None:
    two = _samples("llamacpp", (128, 512), path="gguf-q8_0")
    one = _samples("llamacpp", (64,), path="gguf-q4_0")
    target = Target("llamacpp", "gguf-q4_0", "host")
    fit = fit_levels(levels_for(target, [], two + one), "decode", target, PRIOR, ROOF,
                     intervals=False)
    assert fit.level == "prior" and fit.models == ("a", "b", "c")
    assert fit.theta.get("s_per_context_layer") > 0  # from the pooled level, held here
    assert "decode context term of the level below" in fit.label()


def test_vllms_decode_rows_and_fits_do_not_carry_the_term() -> None:
    samples = _samples("vllm", (128, 512, 2048), path="CPU")
    assert all(s.features.amount("s_per_context_layer") == 0.0 for s in samples)
    fit = _fit(samples, engine="vllm", path="CPU")
    assert fit.theta.get("s_per_context_layer") == 0.0
    assert not fit.context_term and "context_term" not in fit.to_dict()
    assert "context" not in fit.label()
    # the fit is the four-term form's: the column of zeros changes nothing
    row = samples[0].features
    four = [t for t in DECODE.names if t != "s_per_context_layer"]
    assert four == ["s_per_byte", "s_per_layer", "s_per_expert_slot", "s_fixed"]
    assert fit.seconds(row) == sum(fit.theta.get(t) * row.amount(t) for t in four)
