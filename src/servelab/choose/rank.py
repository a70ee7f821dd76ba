"""Rank builds of one model on one hardware profile, with a verdict per build (pure).

Plans (:class:`~servelab.plan.build.Plan`, made by the public planning functions) and the
measurements the results store holds come in; a :class:`Choice` comes out. JSON schema
``servelab.choose/1`` (:meth:`Choice.to_dict`; fields are only ever added within a version)::

    {"schema": "servelab.choose/1", "hardware": str, "context_len": int, "prompt_len": int,
     "slo": str | null,
     "pick": {"build": str, "reason": str} | null,
     "order_error": {"log_half_width": float, "percent": float, "pairs": int,
                     "families": int, "hardware": str, "coverage": float} | null,
       (how far the order of two predictions may be off, from stored pairs of one family's
       builds with the family held out; "hardware": "pooled" where this one has none)
     "builds": [{"rank": int | null, "build": str, "location": str, "engine": str | null,
                 "scheme": str | null, "quant_label": str | null,
                 "fits": bool | null, "fit": str, "largest_context": int | null,
                 "max_concurrency": float | null, "kv_pool_tokens": int | null,
                 "weights_bytes": int | null, "bytes_per_token": int | null,
                 "decode": SPEED, "prefill": SPEED, "speculative": SPEED | null,
                 "kernel_path": str | null, "compute_precision": str | null,
                 "fallback": str | null,
                 "mtp": {"declared_layers": int, "tensors": int, "usable": bool},
                 "slo": "pass" | "fail" | "uncertain" | null,
                 "verdict": str, "refused": str | null,
                 "published": [{...servelab.published/1 row, "line": str}],
                 "kernel_risk": str | null, "identity": str | null}]}

    SPEED = {"tok_s": float | null, "low": float | null, "high": float | null,
             "source": "measured" | "predicted" | "bound" | "none",
             "basis": str, "run_id": str | null}

``source``: ``measured`` (a stored run of this very checkpoint on this hardware: ``run_id``
names it, ``low``..``high`` is its 95 % CI), ``predicted`` (the plan's calibrated
prediction and its interval, ``basis`` its fit), ``bound`` (no calibrated prediction: the
roofline, an upper bound, in ``tok_s``), ``none`` (no figure; ``basis`` says why: an
interval wider than :data:`servelab.predict.levels.MAX_RATIO` is no prediction, the rule of
every interval servelab prints).

Decode is single stream at ``prompt_len``; fit, KV pool and concurrency are at
``context_len``. Rows are ranked: builds that fit before those that do not, SLO met before
uncertain before missed, a figure (measured or predicted) before a bound alone, then by
decode (speculative decode where the build ships a usable MTP head and an acceptance length
is known). Builds tied within the uncertainty of their order (two predictions whose ratio is
within the held-out error of an order, :mod:`servelab.choose.ties`) are ranked by what
decides then: a measured or published figure, the kernel path's reported risk, memory and
context. Refused builds are not ranked.

``published``: figures someone published for the build (its Hub repo id) on this hardware
(:func:`servelab.published.runs.published_for`), shown beside the prediction with their
source and date, never fitted; a published decode figure decides only between tied builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.choose.row import BOUND as BOUND
from servelab.choose.row import MEASURED as MEASURED
from servelab.choose.row import NONE as NONE
from servelab.choose.row import PREDICTED as PREDICTED
from servelab.choose.row import SCHEMA as SCHEMA
from servelab.choose.row import Candidate as Candidate
from servelab.choose.row import Measurement as Measurement
from servelab.choose.row import Row as Row
from servelab.choose.row import SloTarget as SloTarget
from servelab.choose.row import Speed as Speed
from servelab.choose.ties import TIE, order_ties, tie_words, tied, what_decides
from servelab.plan.build import Plan
from servelab.plan.explain import Explanation, better_kernel, explain
from servelab.predict.levels import MAX_RATIO, too_wide
from servelab.predict.pairs import OrderError
from servelab.published.runs import PublishedRun
from servelab.units import format_bytes


@dataclass(frozen=True)
class Choice:
    """The ranked answer: which build to download on ``hardware``, and why."""

    hardware: str
    context_len: int
    prompt_len: int
    slo: str | None
    rows: tuple[Row, ...]
    pick: str | None
    reason: str
    order: OrderError | None = None
    """How far the order of two predictions may be off (what a tie was called by)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, schema ``servelab.choose/1`` (module docs)."""
        o = self.order
        return {
            "schema": SCHEMA, "hardware": self.hardware, "context_len": self.context_len,
            "prompt_len": self.prompt_len, "slo": self.slo,
            "pick": {"build": self.pick, "reason": self.reason} if self.pick else None,
            "reason": self.reason,
            "order_error": None if o is None else {
                "log_half_width": o.half_width, "percent": o.percent, "pairs": o.pairs,
                "families": o.families, "hardware": o.hardware, "coverage": o.coverage},
            "builds": [r.to_dict() for r in self.rows],
        }


def newest_published(runs: Sequence[PublishedRun]) -> tuple[PublishedRun, ...]:
    """The newest of ``runs`` per metric, speculative setting and prompt length (what a
    terminal shows; the JSON keeps every row)."""
    seen: dict[tuple[str, str | None, int | None], PublishedRun] = {}
    for r in sorted(runs, key=lambda r: r.date, reverse=True):
        seen.setdefault((r.metric, r.spec, r.prompt_tokens), r)
    return tuple(seen.values())


# --- speeds -------------------------------------------------------------------------------


def _bounded(value: float | None, low: float | None, high: float | None, basis: str,
             roofline: float | None) -> Speed:
    """A predicted point as a :class:`Speed`: a prediction, else the bound, else nothing."""
    bound = f"roofline bound {roofline:,.1f} tok/s" if roofline else "no bound"
    if value is None or low is None or high is None:
        return Speed(roofline, None, None, BOUND if roofline else NONE,
                     f"no calibrated prediction; {bound}")
    if too_wide(low, high):
        return Speed(None, None, None, NONE,
                     f"no prediction: its interval {low:,.1f}–{high:,.1f} tok/s spans more "
                     f"than {MAX_RATIO:g}x; {bound}")
    return Speed(value, low, high, PREDICTED, basis)


def _measured(m: Measurement, what: str) -> Speed:
    return Speed(m.tok_s, m.low, m.high, MEASURED,
                 f"{what} measured in run {m.run_id} (mean of {m.samples} requests)", m.run_id)


def _decode_speed(plan: Plan, prompt_len: int) -> tuple[Speed, int]:
    points = plan.speed.decode
    point = next((d for d in points if d.context_len == prompt_len), points[0])
    fit = plan.speed.decode_fit
    basis = f"predicted from {fit.label()}" if fit is not None and not fit.is_roofline else ""
    speed = _bounded(point.predicted_tok_s, point.predicted_low, point.predicted_high, basis,
                     point.roofline_tok_s)
    return speed, point.bytes_per_token


def _prefill_speed(plan: Plan, prompt_len: int) -> Speed:
    points = plan.speed.prefill
    if not points:
        return Speed(None, None, None, NONE, "no prefill prediction")
    point = next((p for p in points if p.prompt_len == prompt_len), points[0])
    fit = plan.speed.prefill_fit
    basis = f"predicted from {fit.label()}" if fit is not None and not fit.is_roofline else ""
    return _bounded(point.predicted_tok_s, point.predicted_low, point.predicted_high, basis,
                    point.roofline_tok_s)


def _spec_speed(plan: Plan) -> Speed | None:
    if not plan.speed.mtp:
        return None
    m = plan.speed.mtp[0]
    src = plan.speculative.line if plan.speculative is not None else "given acceptance length"
    basis = (f"{m.draft_tokens} draft token(s) at acceptance length "
             f"{m.acceptance_length:.2f} ({src})")
    return _bounded(m.predicted_tok_s, m.predicted_low, m.predicted_high, basis,
                    m.roofline_tok_s)


# --- facts of one plan --------------------------------------------------------------------

_NOMINAL = {"nvfp4": "fp4", "mxfp4": "fp4", "nvfp4a16": "fp4", "fp8": "fp8", "fp8a16": "fp8",
            "int4": "int4", "int8": "int8"}


def fallback_of(plan: Plan) -> str | None:
    """The kernel fallback the plan's path takes, or None: a quantized scheme whose kernel
    dequantizes to a wider compute precision (e.g. NVFP4 through Marlin W4A16 in BF16)."""
    nominal = _NOMINAL.get(plan.weights.scheme)
    path = plan.speed.kernel_path
    if nominal is None or path.compute in (nominal, "fp4" if nominal == "int4" else nominal):
        return None
    if path.compute not in ("bf16", "fp16", "fp32"):
        return None
    note = f": {path.note}" if path.note else ""
    return f"{path.name} ({path.compute} compute){note}"


def mtp_facts(plan: Plan) -> tuple[int, int, bool]:
    """(MTP layers the config declares, mtp.* tensors shipped, usable as a draft head)."""
    declared = plan.dims.mtp_layers
    tensors = plan.weights.mtp_tensors
    return declared, tensors, bool(declared and tensors)


def _slo_verdict(targets: Sequence[SloTarget], decode: Speed, prefill: Speed,
                 prompt_len: int) -> str | None:
    """pass / fail / uncertain for single-stream requests, from the figures' intervals."""
    if not targets:
        return None
    verdicts = []
    for t in targets:
        speed = decode if t.metric == "tpot" else prefill if t.metric == "ttft" else None
        if speed is None or not speed.figure or speed.tok_s is None:
            verdicts.append("uncertain")
            continue
        scale = 1000.0 if t.metric == "tpot" else prompt_len * 1000.0
        lo = speed.low if speed.low is not None else speed.tok_s
        hi = speed.high if speed.high is not None else speed.tok_s
        worst, best = scale / lo if lo > 0 else float("inf"), scale / hi
        verdicts.append("pass" if worst <= t.threshold_ms else
                        "fail" if best > t.threshold_ms else "uncertain")
    if "fail" in verdicts:
        return "fail"
    return "pass" if all(v == "pass" for v in verdicts) else "uncertain"


def _row(c: Candidate, prompt_len: int, context_len: int,
         targets: Sequence[SloTarget]) -> Row:
    plan = c.plan
    if plan is None:
        none = Speed(None, None, None, NONE, "not planned")
        return Row(None, c.name, c.location, None, None, None, None, "not planned", None, None,
                   None, None, None, none, none, None, None, None, None, 0, 0, False, None,
                   f"not planned: {c.refused}", c.refused, c.published, identity=c.identity)
    decode, bytes_per_token = _decode_speed(plan, prompt_len)
    prefill = _prefill_speed(plan, prompt_len)
    if c.decode is not None:
        decode = _measured(c.decode, "decode")
    if c.prefill is not None:
        prefill = _measured(c.prefill, "prefill")
    declared, tensors, usable = mtp_facts(plan)
    spec = _spec_speed(plan) if usable else None
    conc = (plan.pool.max_concurrency if plan.pool is not None
            else plan.kv_tokens / context_len if context_len else None)
    fits = plan.fits
    fit = plan.fit_sentence().removeprefix("fits: ")
    row = Row(None, c.name, c.location, plan.engine_name, plan.weights.scheme,
              plan.weights.quant_label, fits, fit, plan.largest_context_c1, conc,
              plan.kv_tokens, plan.weights.resident_bytes, bytes_per_token, decode, prefill,
              spec, plan.speed.kernel_path.name, plan.speed.compute_precision,
              fallback_of(plan), declared, tensors, usable, None, "", None, c.published,
              plan.kernels.risk if plan.kernels is not None else None, c.identity)
    slo = _slo_verdict(targets, row.best_decode, prefill, prompt_len)
    return Row(**{**_fields(row), "slo": slo})


def _fields(row: Row) -> dict[str, Any]:
    return {k: getattr(row, k) for k in row.__dataclass_fields__}


# --- ranking and verdicts -----------------------------------------------------------------

_SLO_ORDER = {"pass": 0, None: 0, "uncertain": 1, "fail": 2}


def _key(row: Row) -> tuple[int, int, int, float]:
    best = row.best_decode
    return (0 if row.fits else 1, _SLO_ORDER.get(row.slo, 1), 0 if best.figure else 1,
            -(best.tok_s or 0.0))


def _tok(s: Speed) -> str:
    """A speed with its label: "measured in run ID", "predicted" or "bound"."""
    if s.tok_s is None:
        return "no figure"
    label = {MEASURED: f"measured in run {s.run_id}", PREDICTED: "predicted",
             BOUND: "roofline bound"}.get(s.source, "")
    return f"{s.tok_s:,.1f} tok/s {label}".strip()


def _risk_short(risk: str) -> str:
    """A reported risk without its sources (the JSON's ``kernel_risk`` keeps them)."""
    return risk.split(" (http")[0].split(" ('")[0]


def _flags(row: Row) -> list[str]:
    """The facts a verdict adds whatever the comparison: fallback, missing draft head."""
    out = []
    if row.kernel_risk:
        out.append(f"kernel-path risk ({row.kernel_path}): {_risk_short(row.kernel_risk)}")
    if row.fallback:
        out.append(f"kernel fallback: {row.fallback.split(':')[0]}")
    if row.mtp_declared_layers and not row.mtp_tensors:
        out.append(f"no draft head: the config declares {row.mtp_declared_layers} MTP "
                   "layer(s) but ships no mtp.* tensors")
    return out


EFFICIENCY_MARGIN = 1.25
"""A lead more than this many times the bytes ratio is mostly efficiency, not bytes; one
less than the bytes ratio over this is mostly costs that do not scale with bytes."""


def _lead(win: Row, lose: Row, e: Explanation) -> str:
    """Why ``win`` decodes faster than ``lose`` in explain's terms (``e``: win as A)."""
    ws, ls = win.best_decode.tok_s or 0.0, lose.best_decode.tok_s or 0.0
    speed_ratio = ws / ls if ls > 0 else float("inf")
    r = e.bytes_ratio
    sizes = f"{format_bytes(e.b.bytes_per_token)} against {format_bytes(e.a.bytes_per_token)}"
    engines = f", {win.engine} against {lose.engine}" if win.engine != lose.engine else ""
    if r > 1 and speed_ratio > r * EFFICIENCY_MARGIN:
        return (f"{lose.build} reads {r:.2f}x the bytes per token ({sizes}), which explains "
                f"{r:.2f}x of a {speed_ratio:.2f}x lead; the rest is efficiency ("
                f"{e.a.kernel_path} against {e.b.kernel_path}{engines})")
    if r > 1 and 1 < speed_ratio < r / EFFICIENCY_MARGIN:
        return (f"{lose.build} reads {r:.2f}x the bytes per token ({sizes}) but decodes only "
                f"{speed_ratio:.2f}x slower: costs other than its bytes set much of the pace ("
                f"{e.a.kernel_path} against {e.b.kernel_path}{engines})")
    if r > 1 and better_kernel(e.b.compute_precision, e.a.compute_precision):
        return (f"bytes beat kernels: {lose.build} has the better kernel path "
                f"({e.b.kernel_path}) but reads {r:.2f}x the bytes per token ({sizes})")
    if r > 1:
        return (f"{lose.build} reads {r:.2f}x the bytes per token ({sizes}), and decode pays "
                "for every byte it reads")
    return (f"{win.build} reads no fewer bytes ({format_bytes(e.a.bytes_per_token)} against "
            f"{format_bytes(e.b.bytes_per_token)}) and is faster through efficiency "
            f"({e.a.kernel_path} against {e.b.kernel_path}{engines})")


def _predicted(a: Row, b: Row, plans: Mapping[str, Plan]) -> str:
    """Why the prediction alone orders ``a`` and ``b`` as it does, in explain's terms."""
    fast, slow = (a, b) if (a.best_decode.tok_s or 0) >= (b.best_decode.tok_s or 0) else (b, a)
    fs, ss = fast.best_decode.tok_s or 0.0, slow.best_decode.tok_s or 0.0
    if fs - ss <= TIE * fs:
        return "the prediction alone cannot tell them apart"
    return (f"the prediction puts {fast.build} ahead: "
            f"{_lead(fast, slow, explain(plans[fast.build], plans[slow.build]))}")


def _tie(win: Row, lose: Row, plans: Mapping[str, Plan], order: OrderError | None,
         prompt_len: int) -> str:
    """Two tied rows: the tie, what decides it, and what the prediction alone would say."""
    return (f"{tie_words(win, lose, order)}; {what_decides(win, lose, prompt_len)}; "
            f"{_predicted(win, lose, plans)}")


def _versus(row: Row, pick: Row, above: Row | None, plans: Mapping[str, Plan],
            order: OrderError | None, prompt_len: int) -> str:
    """Why ``row`` loses to ``pick`` (and to ``above``, the row ranked just above it, where
    that is another build), in explain's terms (bytes, kernels, efficiency)."""
    e = explain(plans[pick.build], plans[row.build])
    if tied(row, pick, order):
        lead = f"{pick.build} first: a {_tie(pick, row, plans, order, prompt_len)}"
    elif pick.best_decode is pick.speculative and pick.speculative is not None and (
            row.speculative is None):
        plain = Row(**{**_fields(pick), "speculative": None})
        lead = (f"{pick.build} drafts with its MTP head ({_tok(pick.best_decode)}) and this "
                f"build has no usable one; without drafts, {_tok(plain.decode)}: "
                + (_lead(plain, row, e) if not tied(row, plain, order) else
                   "a tie within the uncertainty of the order"))
    else:
        lead = _lead(pick, row, e)
    parts = [f"{_tok(row.best_decode)} against {_tok(pick.best_decode)} for {pick.build}: "
             f"{lead}"]
    if above is not None and above is not pick and above.fits and above.build in plans:
        parts.append(f"below {above.build}: a {_tie(above, row, plans, order, prompt_len)}"
                     if tied(row, above, order) else
                     f"below {above.build} ({_tok(above.best_decode)}): "
                     f"{_lead(above, row, explain(plans[above.build], plans[row.build]))}")
    return "; ".join([*parts, *_flags(row)])


def _pick_reason(pick: Row, runner: Row | None, plans: Mapping[str, Plan], hardware: str,
                 context_len: int, order: OrderError | None, prompt_len: int) -> str:
    fits = f"fits {context_len:,} tokens on {hardware}"
    speed = f"{_tok(pick.best_decode)}"
    if runner is None:
        return f"the only build that {fits} ({speed})"
    if tied(pick, runner, order):
        why = f"against {runner.build}, a {_tie(pick, runner, plans, order, prompt_len)}"
        if pick.mtp_usable and not runner.mtp_usable and pick.speculative is None:
            why += (f"; it ships a usable MTP draft head ({pick.mtp_tensors} mtp.* tensors) "
                    f"that {runner.build} lacks: speculative decode adds to it (give "
                    "--draft-tokens and an acceptance length, or store a run that drafted, "
                    "to predict how much)")
    elif pick.best_decode is pick.speculative and runner.speculative is None:
        why = (f"it ships a usable MTP draft head ({pick.mtp_tensors} mtp.* tensors): "
               f"{speed} with drafts against {_tok(runner.best_decode)} for {runner.build}")
    else:
        e = explain(plans[pick.build], plans[runner.build])
        why = (f"{speed} against {_tok(runner.best_decode)} for {runner.build}: "
               f"{_lead(pick, runner, e)}")
    if not pick.best_decode.figure:
        why = f"no prediction on {hardware} for these builds, only roofline bounds: {why}"
    return f"{why}; {fits}"


def _same_class(a: Row, b: Row) -> bool:
    """Whether two rows may tie: both fit or neither, the same SLO verdict, both a figure."""
    return _key(a)[:3] == _key(b)[:3]


def choose(candidates: Sequence[Candidate], *, hardware: str, context_len: int,
           prompt_len: int, slo: Sequence[SloTarget] = (),
           order: OrderError | None = None) -> Choice:
    """Rank ``candidates`` (planned on ``hardware`` for ``context_len`` and ``prompt_len``)
    and say which to download and why; ``order``: how far the order of two predictions may
    be off (:mod:`servelab.choose.ties`; None: only figures within 1 % tie)."""
    rows = [_row(c, prompt_len, context_len, slo) for c in candidates]
    plans = {c.name: c.plan for c in candidates if c.plan is not None}
    planned = order_ties(sorted((r for r in rows if r.refused is None), key=_key), order,
                         prompt_len, _same_class)
    refused = [r for r in rows if r.refused is not None]
    fitting = [r for r in planned if r.fits and r.slo != "fail"]
    slo_label = ",".join(t.label for t in slo) or None
    pick = fitting[0] if fitting else None
    if pick is not None:  # the pick leads the table, the rest keep their order
        planned = [pick, *(r for r in planned if r is not pick)]
    if pick is None:
        if not planned:
            reason = "no build could be planned"
        elif not any(r.fits for r in planned):
            reason = (f"no build fits {context_len:,} tokens on {hardware}: memory is the "
                      "binding constraint")
        else:
            reason = f"every build that fits misses the SLO ({slo_label})"
    else:
        others = [r for r in planned if r.fits and r is not pick]
        runner = others[0] if others else None
        reason = _pick_reason(pick, runner, plans, hardware, context_len, order, prompt_len)
        if len(fitting) == 1 and others:
            reason += f"; the only build that meets the SLO ({slo_label})"
        if pick.kernel_risk:
            reason += (f"; kernel-path risk ({pick.kernel_path}): "
                       f"{_risk_short(pick.kernel_risk)}")
        shown = [p.line for p in newest_published(pick.published)
                 if p.metric == "decode_tok_s"]
        if shown:  # beside the prediction; it decides only between tied builds
            reason += "; " + "; ".join(shown)
        unranked = [r.build for r in fitting if not r.best_decode.figure]
        if pick.best_decode.figure and unranked:
            reason += (f"; no prediction on {hardware} for {', '.join(unranked)} (a bound "
                       "only), so it is not ranked above builds with one")
    out: list[Row] = []
    for i, r in enumerate(planned, 1):
        if pick is not None and r.build == pick.build:
            verdict = f"pick: {reason}"
        elif not r.fits:
            verdict = f"memory binds: {r.fit}"
        elif r.slo == "fail":
            verdict = f"misses the SLO ({slo_label})"
        elif pick is not None:
            verdict = _versus(r, pick, planned[i - 2], plans, order, prompt_len)
        else:
            verdict = "; ".join(_flags(r)) or "fits"
        out.append(Row(**{**_fields(r), "rank": i, "verdict": verdict}))
    return Choice(hardware, context_len, prompt_len, slo_label, (*out, *refused),
                  pick.build if pick else None, reason, order)
