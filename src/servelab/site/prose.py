"""Prose generated from a recipe page's facts: headline, key facts, software, troubleshooting.

Pure functions from :class:`~servelab.site.model.RecipePage` to :data:`~servelab.site.model.Text`
(tuples of strings and numbers). Numbers stay objects so the renderer can link each to its run
and label predictions; nothing here formats a number into a string it cannot trace.
"""

from __future__ import annotations

from collections.abc import Iterable

from servelab.site.fmt import format_value, relative_change
from servelab.site.model import (
    Derived,
    EngineObservation,
    Measured,
    MeasuredRow,
    Predicted,
    RecipePage,
    Segment,
    Text,
    TroubleshootingEntry,
    Verification,
    check_of,
)
from servelab.units import GIB

# Versions measured within this relative spread count as "no drift".
DRIFT_TOLERANCE_PCT = 3.0
# Measured decode below this share of the prediction earns a troubleshooting entry.
FAR_BELOW_PREDICTION_PCT = -50.0


def version_key(version: str) -> tuple[tuple[int, str], ...]:
    """A sort key that orders "0.9.1" before "0.10.0"."""
    parts: list[tuple[int, str]] = []
    for piece in version.replace("+", ".").replace("-", ".").split("."):
        parts.append((int(piece), "") if piece.isdigit() else (-1, piece))
    return tuple(parts)


def engine_versions(page: RecipePage) -> tuple[str, ...]:
    """The engine versions with measurements on the page, oldest version first."""
    versions = {row.engine_version for row in (*page.decode, *page.prefill)}
    return tuple(sorted(versions, key=version_key))


def latest_verification(page: RecipePage) -> Verification | None:
    """The most recent successful verification, if any."""
    ok = [v for v in page.verifications if v.status == "ok"]
    return max(ok, key=lambda v: (v.date, v.run_id)) if ok else None


def primary_version(page: RecipePage) -> str | None:
    """The engine version the headline talks about: the latest verified one, else the newest."""
    latest = latest_verification(page)
    versions = engine_versions(page)
    if latest is not None and latest.engine_version in versions:
        return latest.engine_version
    return versions[-1] if versions else None


def reference_prompt(page: RecipePage) -> int | None:
    """The prompt length quoted in the headline: the page's choice, else 2,048, else the median."""
    if page.reference_prompt_tokens is not None:
        return page.reference_prompt_tokens
    lengths = sorted({row.prompt_tokens for row in page.decode})
    if not lengths:
        return None
    return 2048 if 2048 in lengths else lengths[len(lengths) // 2]


def row_at(
    rows: Iterable[MeasuredRow], prompt: int | None, version: str | None
) -> MeasuredRow | None:
    """The row measured at ``prompt`` tokens on engine ``version``."""
    for row in rows:
        if row.prompt_tokens == prompt and row.engine_version == version:
            return row
    return None


def rows_for(rows: Iterable[MeasuredRow], version: str | None) -> list[MeasuredRow]:
    """The rows of one engine version, by prompt length."""
    return sorted((r for r in rows if r.engine_version == version), key=lambda r: r.prompt_tokens)


def vs_prediction(measured: Measured, predicted: Predicted) -> Derived:
    """How far a measurement landed from its prediction, in percent (negative: slower)."""
    pct = (check_of(measured, predicted).error or 0.0) * 100.0
    formula = (
        f"measured {format_value(measured.value, measured.unit)} / "
        f"predicted {format_value(predicted.value, predicted.unit)} − 1"
    )
    return Derived(pct, "%", formula, (measured.run_id,))


_VERDICT_WORDS = {
    "inside": "inside the predicted interval",
    "outside": "outside the predicted interval",
}


def interval_verdict(measured: Measured, predicted: Predicted) -> str:
    """Whether a measurement fell inside its prediction's interval (words, not a number)."""
    verdict = check_of(measured, predicted).verdict
    return _VERDICT_WORDS.get(verdict, "with no interval to judge it by")


def _observation(page: RecipePage, version: str | None) -> EngineObservation | None:
    matches = [o for o in page.engine if o.engine_version == version] or list(page.engine)
    return matches[-1] if matches else None


def _listing(rows: list[MeasuredRow]) -> Text:
    """ "a / b / c tok/s at x / y / z-token prompts" as segments."""
    out: list[Segment] = []
    for i, row in enumerate(rows):
        if i:
            out.append(" / ")
        out.append(row.measured)
    lengths = " / ".join(f"{r.prompt_tokens:,}" for r in rows)
    out.append(f" at {lengths}-token prompts" if len(rows) > 1 else f" at a {lengths}-token prompt")
    return tuple(out)


def latest_attempt(page: RecipePage) -> Verification | None:
    """The most recent run of the recipe, successful or not."""
    return max(page.verifications, key=lambda v: (v.date, v.run_id)) if page.verifications else None


def headline(page: RecipePage) -> Text:
    """The headline paragraph, generated from the page's facts."""
    if not page.decode and not page.prefill:
        last = latest_attempt(page)
        if last is not None and last.status != "ok":
            return (f"{page.build_name} of {page.model_name} has no successful run yet: the "
                    f"latest attempt, on {last.date} on {last.host} (run {last.run_id}), "
                    f"failed: {last.note or 'no reason recorded'}.",)
    version = primary_version(page)
    prompt = reference_prompt(page)
    obs = _observation(page, version)
    # a run servelab did not start (bench, an import) knows no context length: none is claimed
    serves = (f"serves a {page.context_tokens:,}-token context" if page.context_tokens > 0
              else "was measured")
    out: list[Segment] = [
        f"{page.build_name} of {page.model_name} {serves} on one {page.hardware}"
    ]
    if obs is not None and obs.weights is not None and obs.weights.value >= 0.01:
        out += [" with ", obs.weights, " of weights resident"]
    out.append(".")
    if obs is not None and obs.moe_backend:
        fallback = " — a fallback kernel path" if obs.fallback_line else ""
        out.append(
            f" {page.software.engine_name} picks the {obs.moe_backend} MoE backend{fallback}."
        )
    row = row_at(page.decode, prompt, version)
    if row is not None:
        out += [" It decodes ", row.measured, f" at a {prompt:,}-token prompt on "
                f"{page.software.engine_name} {version}"]
        siblings = [s for s in page.siblings if s.decode is not None]
        for i, sib in enumerate(siblings):
            assert sib.decode is not None
            out += [", against " if i == 0 else " and ", sib.decode, f" for {sib.build_name}"]
        out.append(".")
        if row.predicted is not None:
            out += [" servelab predicted ", row.predicted, " before the run; the measurement "
                    "is ", vs_prediction(row.measured, row.predicted), " off that, ",
                    interval_verdict(row.measured, row.predicted), "."]
    pre = rows_for(page.prefill, version)
    if pre:
        out += [" Prefill measured ", *_listing(pre), "."]
    if page.mtp_declared_layers and page.mtp_tensors == 0:
        out.append(
            f" The config declares {page.mtp_declared_layers} MTP layer(s) but the export ships "
            "no MTP tensors, so there is no speculative-decoding draft."
        )
    return tuple(out)


def key_facts(page: RecipePage) -> tuple[Text, ...]:
    """The key facts as bullets."""
    version = primary_version(page)
    prompt = reference_prompt(page)
    obs = _observation(page, version)
    bullets: list[Text] = [(f"1 × {page.hardware} ({page.host})",)]
    if obs is not None and obs.kv_tokens is not None:
        ctx: list[Segment] = [f"{page.context_tokens:,}-token context serves with a KV pool of ",
                              obs.kv_tokens]
        if obs.max_concurrency is not None:
            ctx += [", max concurrency ", obs.max_concurrency, " at full context"]
        bullets.append(tuple(ctx))
    dec = rows_for(page.decode, version)
    if dec:
        bullets.append(("Measured single-stream decode ", *_listing(dec),
                        f" on {page.software.engine_name} {version}"))
    row = row_at(page.decode, prompt, version)
    if row is not None and row.predicted is not None:
        bullets.append(("Decode at ", f"{prompt:,} tokens: measured ", row.measured,
                        " against a prediction of ", row.predicted, " (",
                        vs_prediction(row.measured, row.predicted), ")"))
    if obs is not None and (obs.moe_backend or obs.attention_backend):
        parts = []
        if obs.moe_backend:
            parts.append(f"the {obs.moe_backend} MoE backend")
        if obs.attention_backend:
            parts.append(f"the {obs.attention_backend} attention backend")
        tail = " (a fallback path)" if obs.fallback_line else ""
        bullets.append((f"{page.software.engine_name} selects " + " and ".join(parts) + tail,))
    if row is not None:
        for sib in page.siblings:
            if sib.decode is not None and sib.decode.value:
                bullets.append((f"Against {sib.build_name}: ", row.measured, " vs ", sib.decode,
                                " (", relative_change(row.measured, sib.decode), ")"))
    drift = version_drift(page)
    if drift is not None:
        low, high, spread = drift
        bullets.append((f"{page.software.engine_name} {low} and {high}: decode differs by at most ",
                        spread, " across prompt lengths"))
    if page.mtp_declared_layers and page.mtp_tensors == 0:
        bullets.append((f"Declares {page.mtp_declared_layers} MTP layer(s) but ships zero MTP "
                        "tensors — no speculative decode",))
    if page.memory is not None:
        mem = page.memory
        gib = float(GIB)
        split: list[Segment] = ["Byte-accurate checkpoint split: ",
                                Measured(mem.total_bytes / gib, "GiB", mem.run_id), " in ",
                                Measured(mem.tensor_count, "count", mem.run_id), " tensors = "]
        for i, part in enumerate(mem.by_dtype):
            split += [" + " if i else "", Measured(part.bytes / gib, "GiB", mem.run_id),
                      f" {part.label}"]
        bullets.append(tuple(split))
    pre = rows_for(page.prefill, version)
    if pre:
        bullets.append(("Prefill ", *_listing(pre)))
    latest = latest_verification(page)
    if latest is not None:
        vs = " and ".join(engine_versions(page))
        bullets.append((f"Verified {latest.date} on {latest.host}, on "
                        f"{page.software.engine_name} {vs}",))
    return tuple(bullets)


def software_requirements(page: RecipePage) -> tuple[Text, ...]:
    """Software requirements, as recorded with the runs."""
    sw = page.software
    driver = f", driver {sw.driver}" if sw.driver else ", driver not recorded"
    versions = " or ".join(sw.engine_versions) or "unknown version"
    torch = f" with torch {sw.torch}" if sw.torch else ""
    out: list[Text] = [(f"1 × {page.hardware}{driver}",), (f"{sw.engine_name} {versions}{torch}",)]
    if sw.python:
        out.append((f"Python {sw.python}",))
    ckpt: list[Segment] = [f"Model {page.checkpoint}"]
    if page.memory is not None:
        mem = page.memory
        ckpt += [" (", Measured(mem.total_bytes / float(GIB), "GiB", mem.run_id), " in ",
                 Measured(mem.tensor_count, "count", mem.run_id), " tensors)"]
    out.append(tuple(ckpt))
    latest = latest_verification(page)
    if latest is not None:
        out.append((f"Last verified {latest.date} on {latest.host} "
                    f"({sw.engine_name} {latest.engine_version}, run {latest.run_id})",))
    return tuple(out)


def version_drift(page: RecipePage) -> tuple[str, str, Derived] | None:
    """Largest decode change between the oldest and newest engine version at shared lengths."""
    versions = engine_versions(page)
    if len(versions) < 2:
        return None
    low, high = versions[0], versions[-1]
    worst: Derived | None = None
    for old in rows_for(page.decode, low):
        new = row_at(page.decode, old.prompt_tokens, high)
        if new is None or not old.measured.value:
            continue
        change = relative_change(new.measured, old.measured)
        if worst is None or abs(change.value) > abs(worst.value):
            worst = change
    return (low, high, worst) if worst is not None else None


def troubleshooting(page: RecipePage) -> tuple[TroubleshootingEntry, ...]:
    """Troubleshooting entries generated from the page's findings."""
    entries: list[TroubleshootingEntry] = []
    eng = page.software.engine_name
    last = latest_attempt(page)
    if last is not None and last.status != "ok":
        entries.append(TroubleshootingEntry(
            "failed-run", f"The latest run ({last.date}) failed",
            (f"Run {last.run_id} on {last.host} with {eng} {last.engine_version} failed. Its "
             "reason and engine log excerpt are on the run's page; earlier measurements on this "
             "page stay as they were, dated.",),
            (last.note,) if last.note else ()))
    if page.mtp_declared_layers and page.mtp_tensors == 0:
        count: Text = ()
        if page.memory is not None:
            count = (" The export ships ", Measured(page.memory.tensor_count, "count",
                                                   page.memory.run_id), " tensors and none is")
        else:
            count = (" None of its tensors is",)
        entries.append(TroubleshootingEntry(
            "missing-mtp",
            f"config.json declares {page.mtp_declared_layers} MTP layer(s) but there is no draft",
            (*count, " an MTP head (no tensor name matches mtp). Speculative decoding with an MTP "
             "draft is not available for this build; use a build that keeps the head."),
        ))
    seen_fallback: set[str] = set()
    for obs in page.engine:
        if obs.fallback_line and obs.fallback_line not in seen_fallback:
            seen_fallback.add(obs.fallback_line)
            backend = obs.moe_backend or "a fallback"
            entries.append(TroubleshootingEntry(
                "kernel-fallback",
                f"Why does {eng} {obs.engine_version} use the {backend} kernel?",
                (f"{eng} logged a kernel fallback in run {obs.run_id}: no native kernel accepted "
                 "this quantization, so it dequantizes and runs the matrix multiplies at BF16 "
                 "rate. Decode pays for the stored bytes either way; prefill gets no low-precision "
                 "compute speed-up.",),
                (obs.fallback_line,),
            ))
    skipped = [o for o in page.engine if o.profiling_skipped_line]
    if skipped:
        obs = skipped[-1]
        answer: list[Segment] = [
            "Expected: the recipe pins the KV pool with --kv-cache-memory-bytes, so the engine "
            "skips memory profiling and ignores gpu_memory_utilization."]
        if obs.kv_tokens is not None:
            answer += [" The pool it sized: ", obs.kv_tokens, "."]
        assert obs.profiling_skipped_line is not None
        entries.append(TroubleshootingEntry(
            "profiling-skipped",
            "The engine warns that memory profiling was skipped",
            tuple(answer), (obs.profiling_skipped_line,)))
    drift = version_drift(page)
    if drift is not None:
        low, high, change = drift
        if abs(change.value) <= DRIFT_TOLERANCE_PCT:
            entries.append(TroubleshootingEntry(
                "version-drift", f"Should I pin {eng} {low} or {high}?",
                ("Either: measured on both, decode differs by at most ", change,
                 " — within the noise, so there is no version to pin."),
            ))
        else:
            faster = high if change.value > 0 else low
            entries.append(TroubleshootingEntry(
                "version-drift", f"Does the {eng} version matter for this recipe?",
                ("Yes: decode moved by ", change, f" between {low} and {high}; pin {faster}."),
            ))
    for series in page.history:
        for cp in series.change_points:
            when_before = series.points[cp.index - 1].when if cp.index > 0 else "?"
            when_after = series.points[cp.index].when if cp.index < len(series.points) else "?"
            worse = cp.after.value < cp.before.value
            question = (f"I measured {series.metric} higher before" if worse
                        else f"{series.metric} jumped — is that real?")
            suspects = (f" Recorded conditions that differ across the step: "
                        f"{'; '.join(cp.factors)}." if cp.factors
                        else " No recorded condition (engine, driver, torch, checkpoint, "
                        "host) differs across the step.")
            entries.append(TroubleshootingEntry(
                "regression" if worse else "improvement", question,
                (f"History shows a change point in {series.metric}: ", cp.before,
                 f" up to {when_before}, then ", cp.after, f" from {when_after} (",
                 cp.relative_change, ").", suspects,
                 " Both sets of runs stay on this page, dated."),
            ))
    version = primary_version(page)
    row = row_at(page.decode, reference_prompt(page), version)
    quicker = [s for s in page.siblings if s.decode is not None and row is not None
               and s.decode.value > row.measured.value]
    if row is not None and quicker:
        best = max(quicker, key=lambda s: s.decode.value if s.decode else 0.0)
        assert best.decode is not None
        entries.append(TroubleshootingEntry(
            "which-build", f"Which build of {page.model_name} should I use?",
            (f"For decode speed, {best.build_name}: ", best.decode, " against ", row.measured,
             f" for {page.build_name} at a {row.prompt_tokens:,}-token prompt (",
             relative_change(best.decode, row.measured), "). Weigh that against memory and "
             "quality; the model's index compares every build."),
        ))
    if row is not None and row.predicted is not None:
        gap = vs_prediction(row.measured, row.predicted)
        if gap.value <= FAR_BELOW_PREDICTION_PCT:
            entries.append(TroubleshootingEntry(
                "below-prediction", "Decode is far below the predicted speed",
                ("Measured ", row.measured, " against ", row.predicted, " (", gap, "). The "
                 "prediction is calibrated from other builds' runs (see the calibration "
                 "ledger); a large gap points at a kernel fallback, compute-bound kernels or "
                 "CPU overhead this build has and they did not."),
            ))
    return tuple(entries)
