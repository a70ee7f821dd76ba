"""Operator times on hardware without measured tables: each operator's roofline
(:mod:`servelab.ops.roofline`) divided by an efficiency of its class, the efficiencies
fitted to the hardware's published end-to-end points, the interval from leaving points out.

One step's time is

    T = sum over operator calls of max(bytes / (B eta_h rho_c), FLOPs / (P kappa_h sigma_c))
        + N tau_h

with ``B`` and ``P`` the hardware's bandwidth and dense compute at the kernel's precision,
``eta_h`` / ``kappa_h`` the hardware's bandwidth and compute efficiency for an engine,
``rho_c`` / ``sigma_c`` a factor per operator class ``c`` (a GEMM or MoE by its weight format:
``gemm:bf16``, ``moe:mxfp4``, ``gemm:gguf:Q4_0``; ``attention``; ``ssm``; ``small`` for the norms,
rotary, activation, cache write, router, embedding and sampler), ``N`` the step's kernel
launches and ``tau_h`` a fixed time per launch (the engine's per-step host and launch cost
spread over its kernels).

:func:`fit` fits them jointly over every point of one engine (every hardware): the class
factors are shared across hardware (an engine's kernels for a format), each hardware's
``eta``, ``kappa`` and ``tau`` are pulled toward the engine's mean over hardware and each
class factor toward 1 by a ridge penalty ``lam`` (a hardware or class with few points keeps
near the others'; one with none takes them), in log space, minimizing the squared log error.

:func:`held_out` predicts each point from a fit without it: without its whole family when
its hardware has points of several families, else without its build when it has several
builds, else without the point; :func:`interval` turns held-out errors into an interval.

Pure: frozen dataclasses and numbers in and out (numpy for the least squares).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from servelab.errors import UsageError
from servelab.ops.costs import Lookup
from servelab.ops.model import StepModel
from servelab.ops.roofline import (
    Device,
    Work,
    attn_decode_work,
    attn_prefill_work,
    device,
    elementwise_work,
    gdn_work,
    gemm_work,
    kernel_precision,
    mamba_work,
    moe_work,
    sampler_work,
)
from servelab.ops.step import EngineSteps, StepShape, kernel_count, step_time

#: Ridge strength on the log parameters (hardware toward the engine's mean, class factors
#: toward 1), against squared log errors of the points: a prior spread of ~3x the residual.
LAMBDA = 0.1
#: An interval wider than this ratio (high / low) is no prediction.
MAX_WIDTH = 4.0
#: Fewest held-out errors of a hardware's own (engine, kind) points its interval uses; with
#: fewer, the engine's held-out errors over every hardware (said in the interval's source).
MIN_OWN = 3


@dataclass(frozen=True)
class Efficiency:
    """One engine's efficiencies on one piece of hardware."""

    hardware: str
    engine: str
    mem: float = 1.0
    compute: float = 1.0
    kernel_us: float = 0.0
    mem_class: Mapping[str, float] = field(default_factory=dict)
    compute_class: Mapping[str, float] = field(default_factory=dict)
    fixed_us: Mapping[str, float] = field(default_factory=dict)
    """A fixed time per operator call of a class (µs), besides its roofline (used where a
    class's efficiency was fitted to measured operator rows, not end-to-end points)."""
    source: str = ""

    def mem_of(self, key: str, op_class: str) -> float:
        return self.mem * self.mem_class.get(key, self.mem_class.get(op_class, 1.0))

    def compute_of(self, key: str, op_class: str) -> float:
        return self.compute * self.compute_class.get(
            key, self.compute_class.get(op_class, 1.0))


@dataclass(frozen=True)
class WorkLookup(Lookup):
    """A roofline lookup: the time and the work it came from."""

    work: Work | None = None


class RooflineCosts:
    """A :class:`~servelab.ops.costs.CostSource` of rooflines on one hardware profile: each
    operator's work at the kernel path's precision, timed at the device's peaks divided by
    ``eff`` (None: the bare roofline). ``host`` is zero: the per-launch time is the fit's
    ``tau`` (:func:`step_ms`)."""

    def __init__(self, profile: object | None, eff: Efficiency | None = None,
                 dev: Device | None = None) -> None:
        if profile is None and dev is None:
            raise UsageError("a roofline needs a hardware profile or a device")
        self.profile = profile
        self.device = dev if dev is not None else device(profile)
        self.eff = eff

    def _path(self, fmt: str, moe: bool) -> tuple[str, str]:
        if self.profile is None:
            raise UsageError(f"{self.device.name}: no hardware profile to read the kernel "
                             f"path of {fmt} weights from")
        return kernel_precision(self.profile, fmt, moe=moe)

    @property
    def label(self) -> str:
        e = self.eff
        what = "bare roofline" if e is None else \
            f"roofline x efficiency ({e.source or e.engine + ' on ' + e.hardware})"
        return f"{self.device.name}: {what}"

    def time(self, w: Work) -> float:
        mem, comp = w.times(self.device)
        e = self.eff
        if e is None:
            return max(mem, comp)
        t = max(mem / e.mem_of(w.key, w.op_class), comp / e.compute_of(w.key, w.op_class))
        return t + w.kernels * e.fixed_us.get(w.key, e.fixed_us.get(w.op_class, 0.0)) / 1e3

    def _lk(self, w: Work, kernel: str) -> WorkLookup:
        return WorkLookup(self.time(w), f"roofline/{self.device.name}", kernel, "roofline",
                          f"{w.key}: {w.bytes / 1e6:.3g} MB, {w.flops / 1e9:.3g} GFLOP at "
                          f"{w.precision}", work=w)

    def gemm(self, m: int, n: int, k: int, fmt: str) -> Lookup:
        path, prec = self._path(fmt, False)
        return self._lk(gemm_work(m, n, k, fmt, prec), path)

    def moe(self, tokens: int, experts: int, topk: int, hidden: int, inter: int,
            fmt: str) -> Lookup:
        path, prec = self._path(fmt, True)
        return self._lk(moe_work(tokens, experts, topk, hidden, inter, fmt, prec), path)

    def attn_decode(self, batch: int, context: int, hq: int, hkv: int, d: int,
                    window: int = 0, sinks: bool = False) -> Lookup:
        return self._lk(attn_decode_work(batch, context, hq, hkv, d, window), "attention")

    def attn_prefill(self, new: int, prefix: int, hq: int, hkv: int, d: int,
                     window: int = 0, sinks: bool = False) -> Lookup:
        return self._lk(attn_prefill_work(new, prefix, hq, hkv, d, window), "attention")

    def gdn(self, phase: str, x: int, hk: int, dk: int, hv: int, dv: int, conv: int,
            state_dtype: str) -> Lookup:
        sb = 4 if state_dtype == "float32" else 2
        return self._lk(gdn_work(phase, x, hk, dk, hv, dv, sb), "gated_deltanet")

    def mamba(self, phase: str, x: int, heads: int, hd: int, groups: int, state: int,
              conv: int) -> Lookup:
        return self._lk(mamba_work(phase, x, heads, hd, groups, state), "mamba2")

    def elementwise(self, op: str, tokens: int, *, width: int | None = None,
                    heads: int | None = None, head_dim: int | None = None,
                    experts: int | None = None, topk: int | None = None) -> Lookup:
        return self._lk(elementwise_work(op, tokens, width=width, heads=heads,
                                         head_dim=head_dim, experts=experts), op)

    def sampler(self, batch: int, vocab: int, mode: str = "greedy") -> Lookup:
        return self._lk(sampler_work(batch, vocab), f"sampler ({mode})")

    def host(self, kernels: int, mode: str) -> Lookup:
        return WorkLookup(0.0, f"roofline/{self.device.name}", mode, "roofline",
                          "the per-launch time is the fitted tau",
                          work=Work("host", "", 0.0, 0.0, kernels=kernels))


# --- a point's work, for fitting --------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """Operator calls of one class and size: their memory and compute times at peak (ms),
    how many."""

    key: str
    op_class: str
    mem_ms: float
    comp_ms: float
    count: float


@dataclass(frozen=True)
class PointWork:
    """One measured end-to-end point with the work of its step."""

    ident: str
    hardware: str
    engine: str
    kind: str  # decode / prefill
    build: str
    family: str
    measured_ms: float  # one step (decode: per token; prefill: the prompt)
    terms: tuple[Term, ...]
    kernels: int
    role: str = ""
    source: str = ""


def point_work(ident: str, model: StepModel, shape: StepShape, profile: object, *,
               engine: str, kind: str, build: str, family: str, measured_ms: float,
               role: str = "", source: str = "") -> PointWork:
    """The step's work of ``model`` at ``shape`` on ``profile``, grouped into terms."""
    costs = RooflineCosts(profile)
    st = step_time(model, costs, shape, EngineSteps(cuda_graph_max=0))
    acc: dict[tuple[str, str, float, float], float] = defaultdict(float)
    for it in st.items:
        lk = it.lookup
        if not isinstance(lk, WorkLookup) or lk.work is None:
            raise UsageError(f"{ident}: a non-roofline lookup in a roofline step")
        mem, comp = lk.work.times(costs.device)
        # the small ops share one class in a fit to end-to-end points
        key = "small" if lk.work.op_class == "small" else lk.work.key
        acc[(key, lk.work.op_class, round(mem, 12), round(comp, 12))] += it.count
    hw = getattr(profile, "name", str(profile))
    terms = tuple(Term(k, c, m, f, n) for (k, c, m, f), n in sorted(acc.items()))
    return PointWork(ident, hw, engine, kind, build, family, measured_ms, terms,
                     kernel_count(model), role, source)


# --- the fit ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """One engine's fitted efficiencies: per hardware and per class."""

    engine: str
    hardware: Mapping[str, Efficiency]
    mean: Efficiency  # the engine's mean over hardware (a hardware with no point takes it)
    points: tuple[str, ...]  # the points fitted (idents)
    lam: float

    def efficiency(self, hardware: str) -> Efficiency:
        e = self.hardware.get(hardware)
        if e is not None:
            return e
        m = self.mean
        return Efficiency(hardware, self.engine, m.mem, m.compute, m.kernel_us,
                          m.mem_class, m.compute_class, source=f"{self.engine} mean over "
                          f"{', '.join(sorted(self.hardware))} (no point on {hardware})")


def predict_ms(p: PointWork, eff: Efficiency) -> float:
    """The step time of ``p`` under ``eff``."""
    t = sum(tm.count * max(tm.mem_ms / eff.mem_of(tm.key, tm.op_class),
                           tm.comp_ms / eff.compute_of(tm.key, tm.op_class))
            for tm in p.terms)
    return t + p.kernels * eff.kernel_us / 1e3


def fit(points: Sequence[PointWork], lam: float = LAMBDA, iters: int = 200) -> Fit:
    """Fit one engine's efficiencies to ``points`` (every hardware at once)."""
    if not points:
        raise UsageError("no points to fit efficiencies to")
    engines = {p.engine for p in points}
    if len(engines) != 1:
        raise UsageError(f"fit one engine at a time, not {sorted(engines)}")
    hws = sorted({p.hardware for p in points})
    keys = sorted({t.key for p in points for t in p.terms})
    nh, nc = len(hws), len(keys)
    # theta: [log eta_h | log kappa_h | log tau_h] per hardware, [log rho_c | log sigma_c]
    # per class, then the three engine means
    ia = {h: i for i, h in enumerate(hws)}
    ic = {c: i for i, c in enumerate(keys)}
    n_par = 3 * nh + 2 * nc + 3
    start = np.zeros(n_par)
    start[0:nh] = math.log(0.7)
    start[nh:2 * nh] = math.log(0.5)
    start[2 * nh:3 * nh] = math.log(3e-3)
    start[-3:] = (math.log(0.7), math.log(0.5), math.log(3e-3))
    sq = math.sqrt(lam)

    def one(th: np.ndarray, p: PointWork) -> tuple[float, np.ndarray]:
        """The point's predicted time and d log(time) / d theta."""
        h = ia[p.hardware]
        a, b, t = th[h], th[nh + h], th[2 * nh + h]
        grad = np.zeros(n_par)
        total = 0.0
        for tm in p.terms:
            c = ic[tm.key]
            d, g = th[3 * nh + c], th[3 * nh + nc + c]
            mem = tm.count * tm.mem_ms * math.exp(-a - d)
            comp = tm.count * tm.comp_ms * math.exp(-b - g)
            if mem >= comp:
                total += mem
                grad[h] -= mem
                grad[3 * nh + c] -= mem
            else:
                total += comp
                grad[nh + h] -= comp
                grad[3 * nh + nc + c] -= comp
        tau = p.kernels * math.exp(t)
        total += tau
        grad[2 * nh + h] += tau
        return total, grad / total

    def residuals(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows, jac = [], []
        for p in points:
            tot, g = one(th, p)
            rows.append(math.log(tot / p.measured_ms))
            jac.append(g)
        for h in range(nh):
            for j, mu in ((h, n_par - 3), (nh + h, n_par - 2), (2 * nh + h, n_par - 1)):
                row = np.zeros(n_par)
                row[j], row[mu] = sq, -sq
                rows.append(sq * (th[j] - th[mu]))
                jac.append(row)
        for c in range(2 * nc):
            row = np.zeros(n_par)
            row[3 * nh + c] = sq
            rows.append(sq * th[3 * nh + c])
            jac.append(row)
        return np.array(rows), np.array(jac)

    th = start.copy()
    damp = 1e-2
    r, j = residuals(th)
    cost = float(r @ r)
    for _ in range(iters):
        a = j.T @ j
        step = np.linalg.solve(a + damp * np.diag(np.diag(a) + 1e-9), -j.T @ r)
        cand = th + step
        r2, j2 = residuals(cand)
        c2 = float(r2 @ r2)
        if c2 < cost:
            th, r, j, cost = cand, r2, j2, c2
            damp = max(damp / 3, 1e-7)
            if float(np.max(np.abs(step))) < 1e-7:
                break
        else:
            damp *= 4
            if damp > 1e8:
                break

    mem_class = {k: math.exp(th[3 * nh + ic[k]]) for k in keys}
    comp_class = {k: math.exp(th[3 * nh + nc + ic[k]]) for k in keys}
    src = f"fitted to {len(points)} published {next(iter(engines))} points"
    per_hw = {h: Efficiency(h, next(iter(engines)), math.exp(th[ia[h]]),
                            math.exp(th[nh + ia[h]]), math.exp(th[2 * nh + ia[h]]) * 1e3,
                            mem_class, comp_class, source=src) for h in hws}
    mean = Efficiency("mean", next(iter(engines)), math.exp(th[-3]), math.exp(th[-2]),
                      math.exp(th[-1]) * 1e3, mem_class, comp_class, source=src)
    return Fit(next(iter(engines)), per_hw, mean, tuple(p.ident for p in points), lam)


# --- held out ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorRecord:
    """One held-out error, as an interval reads it (and as a shipped fit stores it)."""

    ident: str
    hardware: str
    engine: str
    kind: str
    family: str
    build: str
    log_error: float  # log(predicted / measured) of the step time
    unit: str = "point"


@dataclass(frozen=True)
class HeldOut:
    """A point predicted by a fit without its unit (family, build or the point)."""

    point: PointWork
    predicted_ms: float
    unit: str  # "family", "build" or "point"
    own_hardware: bool  # whether the fit still had points of the point's hardware

    @property
    def log_error(self) -> float:
        """log(predicted / measured) of the step time."""
        return math.log(self.predicted_ms / self.point.measured_ms)

    def record(self) -> ErrorRecord:
        p = self.point
        return ErrorRecord(p.ident, p.hardware, p.engine, p.kind, p.family, p.build,
                           self.log_error, self.unit)


def unit_of(p: PointWork, points: Sequence[PointWork]
            ) -> tuple[str, Callable[[PointWork | ErrorRecord], bool]]:
    """What is left out with ``p``: its family when its hardware (and engine) holds points
    of several families, else its build when it holds several builds, else the point."""
    same = [q for q in points if q.hardware == p.hardware and q.engine == p.engine]
    if len({q.family for q in same}) > 1:
        return "family", lambda q: q.hardware == p.hardware and q.family == p.family
    if len({q.build for q in same}) > 1:
        return "build", lambda q: q.hardware == p.hardware and q.build == p.build
    return "point", lambda q: q.ident == p.ident


def held_out(points: Sequence[PointWork], lam: float = LAMBDA,
             only: Callable[[PointWork], bool] | None = None) -> list[HeldOut]:
    """Each point (``only`` those it selects) predicted by a fit without its unit."""
    out: list[HeldOut] = []
    cache: dict[frozenset[str], Fit] = {}
    for p in points:
        if only is not None and not only(p):
            continue
        unit, drop = unit_of(p, points)
        rest = [q for q in points if not drop(q)]
        key = frozenset(q.ident for q in rest)
        if key not in cache:
            cache[key] = fit(rest, lam)
        f = cache[key]
        own = any(q.hardware == p.hardware for q in rest)
        out.append(HeldOut(p, predict_ms(p, f.efficiency(p.hardware)), unit, own))
    return out


@dataclass(frozen=True)
class Interval:
    """A prediction's interval from held-out errors, or why there is none."""

    low_ms: float | None
    high_ms: float | None
    half_width_log: float
    basis: str  # whose held-out errors set it
    n: int

    @property
    def ok(self) -> bool:
        return self.low_ms is not None


def interval(pred_ms: float, errors: Sequence[HeldOut | ErrorRecord], hardware: str,
             engine: str, kind: str,
             exclude: Callable[[PointWork | ErrorRecord], bool] | None = None) -> Interval:
    """``pred_ms`` widened by the largest held-out |log error| of the hardware's own points
    of that engine and kind (at least :data:`MIN_OWN` of them), else of the engine's points
    of that kind on every hardware; ``exclude``: points whose errors may not be used (the
    point being scored and its unit). Wider than :data:`MAX_WIDTH`: no prediction."""
    recs = [e.record() if isinstance(e, HeldOut) else e for e in errors]
    pool = [e for e in recs if e.engine == engine and e.kind == kind and
            not (exclude and exclude(e))]
    own = [e for e in pool if e.hardware == hardware]
    use, basis = (own, f"{len(own)} held-out {engine} {kind} points on {hardware}") \
        if len(own) >= MIN_OWN else \
        (pool, f"{len(pool)} held-out {engine} {kind} points on every hardware "
               f"({len(own)} on {hardware})")
    if not use:
        return Interval(None, None, math.inf, f"no held-out {engine} {kind} point", 0)
    w = max(abs(e.log_error) for e in use)
    if math.exp(2 * w) > MAX_WIDTH:
        return Interval(None, None, w, basis + f": wider than {MAX_WIDTH:g}x, no prediction",
                        len(use))
    # the step time's interval: measured = predicted / exp(error)
    return Interval(pred_ms * math.exp(-w), pred_ms * math.exp(w), w, basis, len(use))
