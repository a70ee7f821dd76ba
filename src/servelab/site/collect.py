"""From the results store to page models.

:func:`collect_site` reads every run and experiment from a :class:`~servelab.store.Store`;
:func:`site_from_records` (pure) turns them into a :class:`~servelab.site.model.Site`.

How records map to pages:

- a *recipe page* per ``recipe_name`` (runs without one are grouped by ``model_id``); its
  build name is ``extra["build"]`` when the recorder set it, else the recipe name;
- a *model index* per ``model_id``, comparing all its recipes;
- measured tables: per engine version, the newest successful run's value at each workload
  point. A point's prompt length and concurrency come from its name (``p2048-c1``), else from
  its samples. Decode is single-stream only (concurrency 1). Values are the mean of the
  completed requests with a 95 % t-interval; runs without samples use their stored metric;
- predictions: ``prediction`` documents as written by :mod:`servelab.predict.speed`
  (``decode`` / ``prefill`` point lists, optionally under ``"speed"``), labelled with their
  basis;
- engine observations from ``engine_facts`` (:class:`servelab.engines.facts.EngineFacts`
  as a dict), memory split from ``checkpoint_report`` (``servelab.inspect/1``);
- history: the reference decode point of every successful run, oldest first, with change
  points from :func:`servelab.analysis.history.change_points` when that is available.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from servelab.analysis.acceptance import run_acceptance
from servelab.analysis.history import analyse_series
from servelab.analysis.metrics import METRICS
from servelab.check import Check
from servelab.evidence.runs import ledger_for_runs
from servelab.points import PointKey
from servelab.redact import redact_args, redact_text
from servelab.site import prose, share
from servelab.site.fmt import (
    engine_display_name,
    format_value,
    slugify,
)
from servelab.site.measured import (
    _predicted_at,
    _rid,
    _single_stream,
    _started,
    concurrent_rows,
    mean_ci,
    point_values,
    predicted_load_rows,
    prediction_of,
    predictions,
    run_layout,
)
from servelab.site.model import (
    BuildRow,
    ChangePoint,
    Derived,
    EngineObservation,
    ExperimentMetric,
    ExperimentPage,
    HistoryPoint,
    HistorySeries,
    Measured,
    MeasuredRow,
    MemoryPart,
    MemorySplit,
    ModelIndexPage,
    PlanCheck,
    RecipePage,
    RunPage,
    SiblingBuild,
    Site,
    Software,
    SpecAcceptance,
    Verification,
)
from servelab.site.published import published_figures
from servelab.sizing.check import LoggedKv, kv_pool_checks
from servelab.sizing.document import read_plan
from servelab.store import STATUS_OK, ExperimentRecord, RunRecord, Store
from servelab.units import GIB

LOG_EXCERPT_LINES = 40


def _facts(run: RunRecord) -> Mapping[str, Any]:
    return run.engine_facts or {}


def _warning(facts: Mapping[str, Any], kind: str, paths: Sequence[str] = ()) -> str | None:
    for w in facts.get("warnings") or ():
        if isinstance(w, Mapping) and w.get("kind") == kind and isinstance(w.get("text"), str):
            return share.scrub_paths(redact_text(w["text"]), paths)
    return None


def _num(facts: Mapping[str, Any], key: str) -> float | None:
    v = facts.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def observation(run: RunRecord) -> EngineObservation:
    """What the run's engine log said, as an :class:`EngineObservation`."""
    f = _facts(run)
    rid = _rid(run)
    paths = local_paths(run)

    def measured(value: float | None, unit: str) -> Measured | None:
        return Measured(value, unit, rid) if value is not None else None

    # the first that is known: a logged 0.00 GiB is a figure (below the log's precision)
    weights = next((w for w in (_num(f, "weights_gib"), run.weights_gib,
                                _num(f, "checkpoint_gib")) if w is not None), None)
    kv_tokens = _num(f, "kv_pool_tokens") or (
        float(run.kv_pool_tokens) if run.kv_pool_tokens is not None else None)
    fallback = _warning(f, "marlin-weight-only", paths)
    if fallback is None and f.get("marlin_fallback"):
        fallback = "engine log: weight-only Marlin fallback"
    moe = f.get("moe_backend") or f.get("moe_experts_kernel")
    return EngineObservation(
        run_id=rid,
        engine_version=run.engine_version or str(f.get("version") or "unknown"),
        attention_backend=f.get("attention_backend"),
        moe_backend=str(moe) if moe else None,
        weights=measured(weights, "GiB"),
        # vLLM: the memory it made available for KV; llama.cpp: the cache it allocated
        kv_cache=measured(_num(f, "kv_available_gib") or _num(f, "kv_cache_gib"), "GiB"),
        kv_tokens=measured(kv_tokens, "tokens"),
        max_concurrency=measured(_num(f, "max_concurrency"), "x"),
        fallback_line=fallback,
        profiling_skipped_line=_warning(f, "kv-profiling-skipped", paths),
    )


def plan_checks(run: RunRecord) -> tuple[PlanCheck, ...]:
    """The run's plan (``servelab.plan/1``) against what its engine reported: the KV pool
    by the engine's own arithmetic (:func:`servelab.sizing.check.kv_pool_checks`, the checks
    ``servelab run`` prints) and the resident weights."""
    plan = read_plan(run.prediction)
    if plan.kv_engine is None:
        return ()
    obs = observation(run)
    f = _facts(run)
    logged = LoggedKv(
        kv_pool_tokens=int(obs.kv_tokens.value) if obs.kv_tokens is not None else None,
        max_concurrency=_num(f, "max_concurrency"),
        kv_cache_gib=_num(f, "kv_cache_gib"),
    )
    checks = [c for c in kv_pool_checks(plan, logged) if c.both]
    resident = plan.weights_resident_bytes
    if resident is not None and obs.weights is not None and (
            # the engine prints GiB with two decimals: below that there is nothing to compare
            obs.weights.value > 0 or resident >= 0.005 * GIB):
        checks.append(Check(
            "weights resident", resident / GIB, obs.weights.value, "GiB",
            f"checkpoint bytes from the safetensors headers ({plan.weights_source or 'inspect'})"))
    return tuple(PlanCheck(c, _rid(run)) for c in checks)


def memory_split(run: RunRecord) -> MemorySplit | None:
    """The byte-accurate split from the run's ``servelab.inspect/1`` report."""
    rep = run.checkpoint_report
    if not rep:
        return None
    dtypes = [MemoryPart(str(d["dtype"]), int(d["bytes"])) for d in rep.get("dtypes", [])
              if isinstance(d, Mapping) and d.get("bytes")]
    roles = [MemoryPart(str(r["role"]).replace("_", " "), int(r["bytes"]))
             for r in rep.get("roles", []) if isinstance(r, Mapping) and r.get("bytes")]
    if not dtypes:
        return None
    return MemorySplit(_rid(run), tuple(dtypes), tuple(sorted(roles, key=lambda p: -p.bytes)),
                       int(rep.get("tensor_count") or 0))


def _arg_value(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def key_params(args: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--flag value`` pairs of an engine command (bare flags get ``true``)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
                out.append((k, v))
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out.append((a[2:], args[i + 1]))
                i += 1
            else:
                out.append((a[2:], "true"))
        i += 1
    return tuple(out)


# --- pages ------------------------------------------------------------------------------------


def recipe_key(run: RunRecord) -> str:
    return run.recipe_name or run.model_id or "unnamed"


def _build_name(run: RunRecord) -> str:
    extra = run.extra or {}
    build = extra.get("build")
    return str(build) if isinstance(build, str) and build else recipe_key(run)


def recipe_meta(run: RunRecord) -> dict[str, Any]:
    """``title`` / ``description`` / ``port`` of the run's recipe text (TOML), when readable."""
    doc = share.recipe_doc(run.recipe_text)
    if not doc:
        return {}
    out: dict[str, Any] = {k: doc[k] for k in ("title", "description")
                           if isinstance(doc.get(k), str)}
    out["port"] = share.recipe_port(doc)
    return out


def local_paths(run: RunRecord) -> tuple[str, ...]:
    """This machine's paths a run recorded: checkpoint, run directory, engine launcher."""
    extra = run.extra or {}
    paths = [run.checkpoint_path, extra.get("run_dir") if isinstance(extra, Mapping) else None]
    paths += [a for a in run.engine_args if share.is_local_path(a)]
    return tuple(p for p in paths if isinstance(p, str) and p)


def _latest_per_version(runs: Sequence[RunRecord]) -> dict[str, RunRecord]:
    out: dict[str, RunRecord] = {}
    for run in sorted(runs, key=lambda r: (r.started_at, _rid(r))):
        out[run.engine_version or "unknown"] = run
    return out


def _rows(runs_by_version: Mapping[str, RunRecord], metric: str, kind: str,
          single_stream: bool) -> tuple[MeasuredRow, ...]:
    rows: list[MeasuredRow] = []
    for version, run in runs_by_version.items():
        values = point_values(run, metric)
        by_prompt = _single_stream(values) if single_stream else {
            p.prompt_tokens: v for p, v in values.items()}
        preds = predictions(run)
        for prompt, measured in sorted(by_prompt.items()):
            rows.append(MeasuredRow(version, prompt, measured,
                                    _predicted_at(preds, kind, prompt)))
    return tuple(rows)


def _segment(values: Sequence[Measured], formula: str) -> Measured | Derived:
    """One measurement as itself; several as a derived mean naming every run."""
    if len(values) == 1:
        return values[0]
    mean = statistics.fmean(v.value for v in values)
    runs = tuple(dict.fromkeys(v.run_id for v in values))
    return Derived(mean, values[0].unit, f"{formula} over {len(values)} runs", runs)


def history_series(runs: Sequence[RunRecord]) -> tuple[HistorySeries, ...]:
    """Decode and prefill histories per workload point, with change points.

    Change points come from :func:`servelab.analysis.history.analyse_series` (noise-aware
    binary segmentation), so the page shows the same changes ``servelab history`` reports.
    """
    out: list[HistorySeries] = []
    for name in ("decode_tok_s", "prefill_tok_s"):
        metric = METRICS[name]
        seen: dict[str, None] = {}
        for r in sorted(runs, key=lambda r: r.started_at):
            for point in r.points:
                seen.setdefault(point, None)
        for point in seen:
            pid = PointKey.parse(point)
            if pid is None or pid.concurrency not in (1, None) or pid.depth or pid.open_loop:
                continue
            series = analyse_series(runs, metric, point)
            if len(series.rows) < 2:
                continue
            by_id = {_rid(r): r for r in runs}
            points: list[HistoryPoint] = []
            for row in series.rows:
                run = by_id.get(row.run_id)
                values = point_values(run, name) if run is not None else {}
                m = values.get(pid) or Measured(row.value, metric.unit, row.run_id,
                                                samples=row.n or None)
                points.append(HistoryPoint(row.started_at.date().isoformat(), m))
            changes: list[ChangePoint] = []
            bounds = [0, *[c.index for c in series.changes], len(points)]
            for j, c in enumerate(series.changes):
                seg_before = [p.value for p in points[bounds[j]:c.index]]
                seg_after = [p.value for p in points[c.index:bounds[j + 2]]]
                before = _segment(seg_before, "mean")
                after = _segment(seg_after, "mean")
                rel = Derived(c.rel_change * 100.0, "%",
                              f"{format_value(c.after_mean, metric.unit)} / "
                              f"{format_value(c.before_mean, metric.unit)} − 1",
                              (c.last_good_run, c.first_bad_run))
                factors = tuple(
                    f"{f.name}: {f.before or '—'} → {f.after or '—'}"
                    + (" (on every run either side)" if f.consistent else "")
                    for f in c.factors)
                changes.append(ChangePoint(c.index, before, after, rel, factors))
            label = "decode" if name == "decode_tok_s" else "prefill"
            out.append(HistorySeries(f"{label} tok/s @ {pid.prompt_tokens:,}", metric.unit,
                                     tuple(points), tuple(changes)))
    return tuple(out)


def _verification(run: RunRecord) -> Verification:
    note = ""
    if run.status != STATUS_OK:
        note = share.scrub_paths(redact_text(run.status_reason or "failed"), local_paths(run))
    return Verification(_rid(run), run.started_at.date().isoformat(), run.host or "unknown host",
                        run.engine_version or "unknown", run.status, note)


def recipe_page(key: str, runs: Sequence[RunRecord]) -> RecipePage | None:
    """The recipe page of one recipe's runs (measurements from the successful ones)."""
    ok = [r for r in runs if r.status == STATUS_OK]
    if not runs:
        return None
    # A recipe whose every run failed still gets a page: its failures are the news.
    latest = max(ok or runs, key=lambda r: (r.started_at, _rid(r)))
    by_version = _latest_per_version(ok)
    decode = _rows(by_version, "decode_tok_s", "decode", single_stream=True)
    prefill = _rows(by_version, "prefill_tok_s", "prefill", single_stream=True)
    doc = share.recipe_doc(latest.recipe_text)
    port = share.recipe_port(doc)
    ref = share.model_ref(doc, latest.model_id or key)
    args = share.shareable_argv(redact_args(tuple(latest.engine_args)), model=ref.id, port=port)
    facts = _facts(latest)
    ctx = facts.get("max_model_len") or _arg_value(args, "--max-model-len") or 0
    rep = latest.checkpoint_report or {}
    mtp = rep.get("mtp") if isinstance(rep.get("mtp"), Mapping) else {}
    quant = rep.get("quant") if isinstance(rep.get("quant"), Mapping) else {}
    model = latest.model_id or key
    served = (_arg_value(args, "--served-model-name") or _arg_value(args, "--alias")
              or str(facts.get("model") or model))
    if share.is_local_path(served):  # an engine without a served name logs its model path
        served = ref.id
    versions = tuple(sorted(by_version, key=prose.version_key))
    recipe_text = share.shareable_recipe(redact_text(latest.recipe_text or "")) if doc else ""
    page = RecipePage(
        slug=slugify(key), model_name=model, model_slug=slugify(model),
        build_name=_build_name(latest),
        checkpoint=ref.display, served_model_name=served,
        hardware=latest.hardware or "unknown hardware", host=latest.host or "unknown host",
        context_tokens=int(ctx),
        software=Software(engine_display_name(latest.engine_name), versions, torch=latest.torch,
                          driver=latest.driver),
        command=args, key_params=key_params(args[1:] if args else ()),
        decode=decode, prefill=prefill,
        engine=tuple(observation(r) for r in by_version.values()) or (
            (observation(latest),) if latest.engine_facts else ()),
        verifications=tuple(_verification(r) for r in sorted(
            runs, key=lambda r: (r.started_at, _rid(r)))),
        memory=memory_split(latest),
        plan_checks=plan_checks(latest),
        concurrent=concurrent_rows(by_version),
        predicted_load=predicted_load_rows(latest),
        published=published_figures(ref.id, latest.hardware),
        title=str(doc.get("title") or ""), description=str(doc.get("description") or ""),
        port=port, model_note=ref.note, recipe_text=recipe_text,
        gpus=run_layout(latest).world_size,
        layout="" if run_layout(latest).is_single else run_layout(latest).label(),
        acceptance=spec_acceptance(latest),
        quantization=str(quant.get("label")) if quant and quant.get("label") else None,
        mtp_declared_layers=int(mtp["declared_layers"]) if mtp and isinstance(
            mtp.get("declared_layers"), int) else None,
        mtp_tensors=int(mtp["tensors"]) if mtp and isinstance(mtp.get("tensors"), int) else None,
    )
    return replace_page(page, history=history_series(ok))


def replace_page(page: RecipePage, **changes: Any) -> RecipePage:
    import dataclasses

    return dataclasses.replace(page, **changes)


def build_row(page: RecipePage) -> BuildRow:
    """A recipe's row in its model's comparison index."""
    version = prose.primary_version(page)
    obs = [o for o in page.engine if o.engine_version == version]
    return BuildRow(
        recipe_slug=page.slug, build_name=page.build_name, quantization=page.quantization,
        hardware=page.hardware, engine_versions=prose.engine_versions(page),
        decode=tuple((r.prompt_tokens, r.measured) for r in prose.rows_for(page.decode, version)),
        prefill=tuple((r.prompt_tokens, r.measured)
                      for r in prose.rows_for(page.prefill, version)),
        weights=obs[-1].weights if obs else None,
        checkpoint_bytes=page.memory.total_bytes if page.memory else None,
        last_verified=prose.latest_verification(page),
        engine=page.software.engine_name,
    )


def _with_siblings(pages: Sequence[RecipePage]) -> list[RecipePage]:
    out: list[RecipePage] = []
    for page in pages:
        ref = prose.reference_prompt(page)
        sibs: list[SiblingBuild] = []
        for other in pages:
            if other.slug == page.slug or other.model_slug != page.model_slug:
                continue
            v = prose.primary_version(other)
            dec = prose.row_at(other.decode, ref, v)
            pre = prose.row_at(other.prefill, ref, v)
            sibs.append(SiblingBuild(other.slug, other.build_name,
                                     dec.measured if dec else None,
                                     pre.measured if pre else None))
        out.append(replace_page(page, siblings=tuple(sibs)))
    return out


def spec_acceptance(run: RunRecord) -> SpecAcceptance | None:
    """What the run's speculative decoding accepted (vLLM's spec-decode counters over its
    workload); None unless it drafted and the counters were scraped."""
    acc = run_acceptance(run)
    if acc is None:
        return None
    rid = _rid(run)
    return SpecAcceptance(acc.config, Measured(acc.acceptance_length, "tokens/step", rid),
                          tuple(Measured(r, "share", rid) for r in acc.position_rates))


def _run_page(run: RunRecord, recipe_slugs: Mapping[str, str]) -> RunPage:
    metrics: list[tuple[str, Measured]] = []
    for metric, label in (("decode_tok_s", "decode"), ("prefill_tok_s", "prefill")):
        for pid, m in sorted(point_values(run, metric).items(),
                             key=lambda kv: (kv[0].prompt_tokens, kv[0].concurrency or 0)):
            conc = f", concurrency {pid.concurrency}" if pid.concurrency else ""
            metrics.append((f"{label} @ {pid.prompt_tokens:,} tokens{conc}", m))
    obs = observation(run)
    for label, value in (("weights", obs.weights), ("KV cache", obs.kv_cache),
                         ("KV pool", obs.kv_tokens), ("max concurrency", obs.max_concurrency)):
        if value is not None:
            metrics.append((label, value))
    acc = spec_acceptance(run)
    if acc is not None:
        metrics.append((f"speculative acceptance length ({acc.config.label})", acc.length))
    preds = sorted(predictions(run).items())
    tail = (run.log_tail or "").splitlines()[-LOG_EXCERPT_LINES:]
    log = tuple(redact_text(line) for line in tail)
    key = recipe_key(run)
    extra = run.extra or {}
    return RunPage(
        run_id=_rid(run), recipe_slug=recipe_slugs.get(key), recipe_name=key, status=run.status,
        started=_started(run), host=run.host or "unknown host", engine_version=run.engine_version,
        failure=redact_text(run.status_reason) if run.status_reason else None,
        metrics=tuple(metrics),
        predictions=tuple((f"{k} @ {n:,} tokens", p) for (k, n), p in preds),
        log_excerpt=log,
        command=redact_args(tuple(run.engine_args)),
        checkpoint_path=run.checkpoint_path,
        run_dir=str(extra["run_dir"]) if isinstance(extra.get("run_dir"), str) else None,
    )


def _pooled(value: float | None, unit: str, runs: Sequence[str], side: str,
            n: int) -> Measured | Derived | None:
    if value is None or not runs:
        return None
    if len(runs) == 1:
        return Measured(value, unit, runs[0], samples=n or None)
    return Derived(value, unit, f"{side}: mean of {n} requests over {len(runs)} runs",
                   tuple(runs))


def experiment_page(exp: ExperimentRecord, runs: Mapping[str, RunRecord],
                    recipe_slugs: Mapping[str, str]) -> ExperimentPage:
    """An experiment's page from its stored ``servelab.experiment/1`` report and verdict."""
    base = [runs[i] for i in exp.baseline_run_ids if i in runs]
    cand = [runs[i] for i in exp.variant_run_ids if i in runs]
    report = exp.report or {}
    alpha = float(report.get("alpha") or 0.05)
    metrics: list[ExperimentMetric] = []
    for d in report.get("deltas") or ():  # list after JSON, tuple before
        if not isinstance(d, Mapping):
            continue
        unit = str(d.get("unit") or "")
        b = _pooled(d.get("baseline"), unit, exp.baseline_run_ids, "baseline",
                    int(d.get("n_baseline") or 0))
        c = _pooled(d.get("variant"), unit, exp.variant_run_ids, "variant",
                    int(d.get("n_variant") or 0))
        rel = d.get("rel_diff")
        if b is None or c is None or not isinstance(rel, int | float):
            continue
        lo, hi, p = d.get("rel_ci_low"), d.get("rel_ci_high"), d.get("p_value")
        ci = (f", 95% CI {lo * 100:+.1f}% … {hi * 100:+.1f}%"
              if isinstance(lo, int | float) and isinstance(hi, int | float) else "")
        pv = f", Welch p = {p:.3g}" if isinstance(p, int | float) else ""
        change = Derived(rel * 100.0, "%", f"variant / baseline − 1{ci}{pv}",
                         (*exp.baseline_run_ids, *exp.variant_run_ids))
        significant = isinstance(p, int | float) and p < alpha
        pid = PointKey.parse(str(d.get("point") or ""))
        at = f" @ {pid.prompt_tokens:,}" if pid else ""
        metrics.append(ExperimentMetric(f"{d.get('label') or d.get('metric')}{at}", unit, b, c,
                                        change, significant))
    clauses = tuple(
        (str(c.get("text", "")), str(c.get("status", "")), str(c.get("reason", "")))
        for c in report.get("clauses") or () if isinstance(c, Mapping))
    b_label = _build_name(base[0]) if base else str(
        (report.get("baseline") or {}).get("name") or "baseline")
    c_label = _build_name(cand[0]) if cand else str(
        (report.get("variant") or {}).get("name") or "variant")
    exp_id = exp.experiment_id or "experiment"
    return ExperimentPage(
        slug=slugify(exp_id), title=exp.title or f"{c_label} vs {b_label}",
        question=f"Adopt {c_label} over {b_label} if: {exp.criteria}", verdict=exp.verdict,
        baseline_label=b_label, candidate_label=c_label,
        baseline_recipe=recipe_slugs.get(recipe_key(base[0])) if base else None,
        candidate_recipe=recipe_slugs.get(recipe_key(cand[0])) if cand else None,
        metrics=tuple(metrics), clauses=clauses,
        conclusion="; ".join(f"{t}: {st}" for t, st, _ in clauses),
    )


def site_from_records(runs: Sequence[RunRecord], experiments: Sequence[ExperimentRecord] = (),
                      *, title: str = "servelab recipes") -> Site:
    """Every page of the site from stored runs and experiments (pure)."""
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(recipe_key(run), []).append(run)
    built = {k: recipe_page(k, rs) for k, rs in sorted(groups.items())}
    pages = _with_siblings([p for p in built.values() if p is not None])
    slugs = {k: p.slug for k, p in built.items() if p is not None}
    by_id = {_rid(r): r for r in runs}
    exp_pages = [experiment_page(e, by_id, slugs) for e in experiments]
    pages = [
        replace_page(p, experiments=tuple(
            e for e in exp_pages if p.slug in (e.baseline_recipe, e.candidate_recipe)))
        for p in pages
    ]
    models: dict[str, list[RecipePage]] = {}
    for p in pages:
        models.setdefault(p.model_slug, []).append(p)
    indexes = tuple(ModelIndexPage(slug, ps[0].model_name, tuple(build_row(p) for p in ps))
                    for slug, ps in sorted(models.items()))
    run_pages = tuple(_run_page(r, slugs) for r in sorted(
        runs, key=lambda r: (r.started_at, _rid(r)), reverse=True))
    ok = [r for r in runs if r.status == STATUS_OK]
    return Site(title, tuple(pages), indexes, tuple(exp_pages), run_pages, ledger_for_runs(ok))


def collect_site(store: Store, *, title: str = "servelab recipes") -> Site:
    """Read every run (with samples) and experiment from ``store`` into a :class:`Site`
    (without the model pages' answers: :func:`servelab.pipeline.choose.answered_site` adds
    them)."""
    return site_from_records(store.list_runs(samples=True), store.list_experiments(), title=title)


__all__ = [
    "PointKey",
    "build_row",
    "collect_site",
    "concurrent_rows",
    "experiment_page",
    "key_params",
    "mean_ci",
    "memory_split",
    "observation",
    "plan_checks",
    "prediction_of",
    "predictions",
    "recipe_key",
    "recipe_meta",
    "recipe_page",
    "replace_page",
    "site_from_records",
]
