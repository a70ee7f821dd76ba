"""One speculative-decoding step by its parts: verify, draft, and the draft's own cost. Pure.

How vLLM runs a step (v1 engine, 0.26-0.32; ``vllm/v1/spec_decode/llm_base_proposer.py``
``propose``, ``vllm/v1/sample/rejection_sampler.py``), one request with ``k`` drafts:

1. **verify**: one forward of the target over ``k + 1`` tokens (the token sampled last and
   the ``k`` drafts). It reads the non-routed weights once, the routed experts that ``k + 1``
   tokens touch (``E x (1 - (1 - K/E)^(k+1))`` of ``E`` for independent top-``K`` draws, not
   ``k + 1`` times ``K``), the KV cache once (``k + 1`` queries over the same cache) and
   a linear-attention / Mamba state once, and writes ``k + 1`` states (one per position, so
   that a rejected draft rolls back: vLLM's ``spec_state_indices``). The lm_head is read
   once for ``k + 1`` rows of logits. This is why a step costs far less than ``k + 1``
   single-token steps: the weights are read once for ``k + 1`` tokens.
2. **rejection sampling** of the ``k`` drafts against the target's logits (greedy: argmax
   comparison; random: probabilities over the vocabulary for ``k + 1`` rows): no weights.
3. **draft**, by method:

   * ``mtp`` / ``eagle`` (a draft head): ``k`` forwards of the head, one per drafted token
     (the first over the step's ``k + 1`` positions, the other ``k - 1`` over one token
     each: the loop in ``propose``), each sampling its draft from full logits
     (``compute_logits`` then argmax), so each pass reads the head's active weights **and
     the whole lm_head** (vLLM shares the target's lm_head with a Qwen3.5 / DeepSeek MTP head
     that ships none). Each pass is also one more forward the host prepares and launches
     (attention metadata, positions, a CUDA graph replay): ``s_per_draft_pass``.
   * ``ngram``: a prompt-lookup on the host (numba), no device forward; vLLM turns
     asynchronous scheduling off for it, so its host time adds to the step:
     ``s_per_draft_pass`` once per step.

The step's time is the decode form (:mod:`servelab.predict.form`) of its bytes, layers
and expert slots, plus the draft term::

    t_step = max(device(verify + draft bytes, layers, slots) + passes x s_per_draft_pass,
                 s_fixed)                                  (a GPU; a CPU sums every term)
    tok/s  = a / t_step                 (a: mean acceptance length, tokens per step)

``s_per_draft_pass`` is what the byte, layer and slot terms leave out of a measured step:
fitted from stored speculative runs (``t_step = measured acceptance / measured tok/s``),
per method, with the plain decode terms held at their fit (:func:`fit_draft_term`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from servelab.errors import UsageError
from servelab.predict.costs import distinct_expert_fraction

#: Methods whose draft is a forward of a head on the device, one per drafted token.
HEAD_METHODS = frozenset({"mtp", "eagle", "eagle3"})
#: Methods whose draft is a host-side lookup (no device forward).
LOOKUP_METHODS = frozenset({"ngram"})


@dataclass(frozen=True)
class ModelBytes:
    """The byte figures of a model a speculative step is made of (all per forward pass).

    ``non_routed``: weights read once per pass whatever the token count (attention, linear
    attention, norms, routers, shared experts, the lm_head, one embedding row per token is
    neglected); ``routed``: every routed expert of every layer; ``num_experts`` / ``top_k``:
    the router's; ``lm_head``: the output projection (read by every draft pass);
    ``head_non_routed`` / ``head_routed``: the draft head's (an MTP layer) weights that every
    pass reads and its routed experts; ``head_layers``: its decoder layers."""

    non_routed: int
    routed: int
    num_experts: int
    top_k: int
    lm_head: int
    head_non_routed: int = 0
    head_routed: int = 0
    head_layers: int = 0

    def __post_init__(self) -> None:
        vals = (self.non_routed, self.routed, self.lm_head, self.head_non_routed,
                self.head_routed, self.head_layers, self.num_experts, self.top_k)
        if any(v < 0 for v in vals):
            raise UsageError("model byte figures must not be negative")

    def routed_touched(self, tokens: int, routed: int | None = None) -> float:
        """Routed-expert bytes a pass over ``tokens`` tokens reads (expected)."""
        total = self.routed if routed is None else routed
        return total * distinct_expert_fraction(self.num_experts, self.top_k, tokens)


@dataclass(frozen=True)
class StepParts:
    """What one speculative step of ``draft_tokens`` drafts reads and runs (one request):
    the verify pass's and the draft passes' bytes, layers and expert slots, and how many
    times the draft term is paid (``draft_passes``)."""

    method: str
    draft_tokens: int
    context_len: int
    verify_bytes: int
    verify_layers: int
    draft_bytes: int
    draft_layers: int
    expert_slots: int
    draft_passes: int

    @property
    def step_bytes(self) -> int:
        """Bytes of the whole step (verify + every draft pass)."""
        return self.verify_bytes + self.draft_bytes

    @property
    def step_layers(self) -> int:
        """Decoder layers the step runs (verify + every draft pass)."""
        return self.verify_layers + self.draft_layers


def step_parts(
    method: str,
    draft_tokens: int,
    model: ModelBytes,
    *,
    context_len: int,
    layers: int,
    moe_layers: int,
    kv_read: int,
    state_bytes: int,
    head_kv_per_token: int = 0,
) -> StepParts:
    """:class:`StepParts` of one step (see the module docs). ``layers`` / ``moe_layers``: the
    target's decoder layers and those with routed experts; ``kv_read``: the KV one decode
    step reads at ``context_len``; ``state_bytes``: one request's linear-attention / Mamba
    state (read once, written once per verified position); ``head_kv_per_token``: KV bytes
    per cached token of the head's attention (a draft pass reads its cache)."""
    k = draft_tokens
    if k <= 0:
        raise UsageError("a speculative step needs at least one draft token")
    m = method.strip().lower()
    if m not in HEAD_METHODS | LOOKUP_METHODS:
        raise UsageError(
            f"speculative method {method!r}: servelab models mtp, eagle, eagle3 and ngram"
        )
    verify = model.non_routed + model.routed_touched(k + 1) + kv_read + state_bytes * (k + 2)
    experts = moe_layers * model.num_experts
    if m in LOOKUP_METHODS:
        return StepParts(m, k, context_len, round(verify), layers, 0, 0, experts, 1)
    if model.head_layers <= 0 and model.head_non_routed + model.head_routed <= 0:
        raise UsageError(f"{m} drafts with a head, and this model ships none")
    head_kv = head_kv_per_token * context_len
    # first pass over the step's k + 1 positions, then k - 1 passes of one token
    head = (
        k * (model.head_non_routed + model.lm_head + head_kv)
        + model.routed_touched(k + 1, model.head_routed)
        + (k - 1) * model.routed_touched(1, model.head_routed)
    )
    head_layers = max(model.head_layers, 1)
    head_moe = head_layers if model.head_routed > 0 else 0
    return StepParts(
        m, k, context_len, round(verify), layers, round(head), k * head_layers,
        experts + k * head_moe * model.num_experts, k,
    )


@dataclass(frozen=True)
class StepSample:
    """One measured speculative step: the measured time of one step (``acceptance / tok/s``)
    and the plain decode form's time for its parts (without the draft term), with how many
    draft passes it ran, under the build key ``model`` on ``hardware``."""

    model: str
    hardware: str
    method: str
    draft_passes: int
    seconds: float
    form_seconds: float
    source: str

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.form_seconds <= 0 or self.draft_passes < 0:
            raise UsageError(f"step sample {self.model!r}: non-positive time or passes")


def step_seconds(form_seconds: float, device_seconds: float, passes: int,
                 per_pass: float, *, host_bound: bool) -> float:
    """A step's time from the decode form's (``form_seconds``: the larger of device and host
    on a GPU, their sum on a CPU; ``device_seconds``: the device's part alone) and the draft
    term: on a GPU ``max(device + passes x per_pass, form)``, on a CPU ``form + passes x
    per_pass``."""
    extra = passes * per_pass
    if host_bound:
        return form_seconds + extra
    return max(device_seconds + extra, form_seconds)


@dataclass(frozen=True)
class DraftFit:
    """The fitted draft term of one method: seconds per draft pass, the builds it came from,
    and its relative error (``rel_error``: how far one build's own per-pass time lay from the
    others', leave-one-build-out, widened by ``1 + 1/builds``; None with one build)."""

    method: str
    per_pass: float
    builds: tuple[str, ...]
    n_samples: int
    rel_error: float | None
    source: str

    @property
    def label(self) -> str:
        """``draft pass 0.84 ms (mtp; 3 step(s) of 1 build(s): ...)``."""
        return (
            f"draft pass {self.per_pass * 1e3:.2f} ms ({self.method}; "
            f"{self.n_samples} step(s) of {len(self.builds)} build(s): {self.source})"
        )


def _per_pass(samples: Sequence[StepSample]) -> float:
    """The per-pass time that minimises the squared relative step-time residuals over
    ``samples`` when every step is device-bound (``t = form + passes x s``), floored at 0:
    ``s = sum(p r / t^2) / sum(p^2 / t^2)`` with ``r = t - form`` (closed form of a
    one-parameter weighted least squares)."""
    num = sum(s.draft_passes * (s.seconds - s.form_seconds) / s.seconds**2 for s in samples)
    den = sum(s.draft_passes**2 / s.seconds**2 for s in samples)
    return max(num / den, 0.0) if den > 0 else 0.0


def build_of(model: str) -> str:
    """The model a build key names (``"m [..] [mtp k=2 step]"`` -> ``"m"``)."""
    return model.split(" [", 1)[0]


def fit_draft_term(samples: Sequence[StepSample], method: str, source: str) -> DraftFit | None:
    """The draft term of ``method`` from ``samples`` (those of that method with draft
    passes), or None without any. With two builds or more it carries the largest
    leave-one-build-out relative miss of a build's own per-pass time by the others',
    widened by ``1 + 1/builds`` as the decode form's intervals are
    (:func:`servelab.predict.levels.error_bound`); infinite when the others fit none."""
    mine = [s for s in samples if s.method == method and s.draft_passes > 0]
    if not mine:
        return None
    builds = tuple(sorted({build_of(s.model) for s in mine}))
    rel: float | None = None
    if len(builds) > 1:
        errs = []
        for b in builds:
            own = _per_pass([s for s in mine if build_of(s.model) == b])
            rest = _per_pass([s for s in mine if build_of(s.model) != b])
            errs.append(abs(own / rest - 1.0) if rest > 0 else (0.0 if own == 0 else math.inf))
        rel = max(errs) * (1.0 + 1.0 / len(builds))
    return DraftFit(method, _per_pass(mine), builds, len(mine), rel, source)


def spec_tok_s(acceptance: float, seconds: float) -> float:
    """Tokens per second of a step of ``seconds`` that yields ``acceptance`` tokens."""
    if seconds <= 0 or not math.isfinite(seconds):
        raise UsageError("a step time must be positive and finite")
    return acceptance / seconds


def implied_acceptance(tok_s: float, seconds: float) -> float:
    """The mean acceptance length at which a step of ``seconds`` decodes ``tok_s``."""
    return tok_s * seconds


def choose_draft_fit(
    samples: Sequence[StepSample], *, hardware: str, method: str, leave_out: str = ""
) -> DraftFit | None:
    """The draft term for ``method`` on ``hardware``: from the measured steps on that
    hardware, else (a labelled fallback) from those on other hardware, whose relative error is
    then at least :data:`ONE_BUILD_DRAFT_ERROR` (the draft's host work differs between
    machines and engine versions by more than its fit over one machine shows); None without
    any. ``leave_out`` names a build whose steps are not used (leave-one-build-out)."""
    keep = [s for s in samples if not leave_out or build_of(s.model) != build_of(leave_out)]
    same = fit_draft_term([s for s in keep if s.hardware == hardware], method,
                          f"measured steps on {hardware}")
    if same is not None:
        return same
    other = [s for s in keep if s.hardware != hardware]
    where = sorted({s.hardware for s in other if s.method == method and s.draft_passes > 0})
    fit = fit_draft_term(
        other, method, f"fallback: no {method} step measured on {hardware}; from "
        + ", ".join(where),
    )
    if fit is None:
        return None
    rel = ONE_BUILD_DRAFT_ERROR if fit.rel_error is None else fit.rel_error
    return replace(fit, rel_error=max(rel, ONE_BUILD_DRAFT_ERROR))


#: The draft term's relative error when it rests on one build (nothing to leave out): the
#: term may be anything from none to twice itself. Measured across hardware it is wider
#: still: 0.84 ms per pass on the H200 (vLLM 0.26.0) against about 4.6 ms implied by a
#: published RTX PRO 6000 point (vLLM 0.19.0; benchmarks/RESULTS.md).
ONE_BUILD_DRAFT_ERROR = 1.0


def step_interval(
    acceptance: float,
    form_seconds: float,
    form_rel: float | None,
    draft_seconds: float,
    draft_rel: float | None,
    bound: float | None = None,
) -> tuple[float, float] | None:
    """tok/s interval of a step whose decode-form part (``form_seconds``) is known to
    ``1 ± form_rel`` in tok/s terms (time within ``t / (1 ± e)``, as every decode interval)
    and whose draft term (``draft_seconds``) to ``± draft_rel`` of itself (None: one build,
    :data:`ONE_BUILD_DRAFT_ERROR`): the errors of the two parts add. The top is capped at
    the roofline ``bound``. None without a decode interval."""
    if form_rel is None:
        return None
    e_d = ONE_BUILD_DRAFT_ERROR if draft_rel is None else draft_rel
    fastest = form_seconds / (1.0 + form_rel) + draft_seconds * max(0.0, 1.0 - e_d)
    slowest = (
        form_seconds / (1.0 - form_rel) + draft_seconds * (1.0 + e_d)
        if form_rel < 1.0 and math.isfinite(e_d)
        else math.inf
    )
    lo = acceptance / slowest if math.isfinite(slowest) else 0.0
    hi = acceptance / fastest if fastest > 0 else math.inf
    if bound is not None and bound > 0:
        hi, lo = min(hi, bound), min(lo, bound)
    return lo, hi
