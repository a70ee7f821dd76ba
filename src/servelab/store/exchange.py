"""Runs as JSON: export, import, and reading ``vllm bench serve`` result files.

Export format (``"schema": "servelab.runs/1"``)::

    {"schema": "servelab.runs/1", "exported_at": ISO-8601,
     "runs": [ {<every RunRecord field>, "started_at": ISO-8601, ...,
                "metrics": [{name, point, value, ci_low, ci_high, n, unit}],
                "samples": [{point, index, ttft_s, tpot_s, e2e_s, itl_*_s,
                             prompt_tokens, completion_tokens, error}] } ]}

Import accepts that format, a single run object, a servelab bench result
(``"schema": "servelab.bench/1"``, see :func:`run_from_bench_json`), published runs
(``"schema": "servelab.published/1"``, JSON or the TOML of ``servelab/published/runs.toml``;
see :func:`run_from_published`), or a ``vllm bench serve --save-result`` file (one JSON
object, or JSON lines from ``--append-result``). From a vLLM file servelab keeps the
per-request samples when the file has them (``--save-detailed``), vLLM's summary numbers
as metrics, and the rest of the file (minus generated texts) under ``extra["vllm_bench"]``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import statistics
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servelab.bench.metrics import Metrics
from servelab.bench.result import BenchResult, read_result
from servelab.bench.samples import ErrorKind, RequestSample
from servelab.bench.stats import Summary
from servelab.bench.vllm_compat import from_vllm
from servelab.errors import InputError
from servelab.outfile import write_json
from servelab.points import arrival_tag, point_label
from servelab.published.runs import PublishedRun, is_published_doc, parse_published
from servelab.store.db import Store
from servelab.store.model import (
    EXPORT_SCHEMA,
    JSON,
    STATUS_FAILED,
    STATUS_OK,
    Metric,
    RunRecord,
    Sample,
    utcnow,
)

BENCH_SCHEMA = "servelab.bench/1"
_DATETIME_FIELDS = ("started_at", "finished_at", "created_at")
_TUPLE_FIELDS = ("engine_args", "labels")
_RUN_FIELDS = {f.name for f in fields(RunRecord)}
_SAMPLE_FIELDS = {f.name for f in fields(Sample)}
_METRIC_FIELDS = {f.name for f in fields(Metric)}


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import did: ids added, ids already present (skipped)."""

    added: tuple[str, ...]
    skipped: tuple[str, ...]


def run_to_dict(record: RunRecord, *, samples: bool = True) -> JSON:
    """A JSON-able dict of a run (datetimes as ISO-8601 strings)."""
    d = asdict(record)
    for name in _DATETIME_FIELDS:
        value = getattr(record, name)
        d[name] = value.isoformat() if value is not None else None
    d["engine_args"] = list(record.engine_args)
    d["labels"] = list(record.labels)
    d["metrics"] = [asdict(m) for m in record.metrics]
    d["samples"] = [asdict(s) for s in record.samples] if samples else []
    return d


def run_from_dict(d: JSON, *, source: str = "input") -> RunRecord:
    """Rebuild a :class:`RunRecord` from :func:`run_to_dict` output; unknown keys are errors."""
    if not isinstance(d, dict):
        raise InputError("a run must be a JSON object", path=source)
    unknown = set(d) - _RUN_FIELDS
    if unknown:
        raise InputError(f"unknown run fields: {', '.join(sorted(unknown))}", path=source)
    kw: dict[str, Any] = dict(d)
    try:
        for name in _DATETIME_FIELDS:
            if kw.get(name) is not None:
                kw[name] = _parse_dt(kw[name])
        if "started_at" not in kw or kw["started_at"] is None:
            raise InputError("run has no started_at", path=source)
        for name in _TUPLE_FIELDS:
            kw[name] = tuple(str(x) for x in kw.get(name) or ())
        kw["metrics"] = tuple(_metric(m, source) for m in kw.get("metrics") or ())
        kw["samples"] = tuple(_sample(s, source) for s in kw.get("samples") or ())
        return RunRecord(**kw)
    except (TypeError, ValueError) as exc:
        raise InputError(f"malformed run: {exc}", path=source) from exc


def _metric(m: Any, source: str) -> Metric:
    if not isinstance(m, dict) or set(m) - _METRIC_FIELDS:
        raise InputError(f"malformed metric: {str(m)[:80]}", path=source)
    return Metric(**m)


def _sample(s: Any, source: str) -> Sample:
    if not isinstance(s, dict) or set(s) - _SAMPLE_FIELDS:
        raise InputError(f"malformed sample: {str(s)[:80]}", path=source)
    return Sample(**s)


def _parse_dt(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"timestamp must be an ISO-8601 string, got {value!r}")
    dt = datetime.fromisoformat(value)
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def export_doc(records: Iterable[RunRecord]) -> JSON:
    """The export document for these runs (see the module docstring)."""
    return {
        "schema": EXPORT_SCHEMA,
        "exported_at": utcnow().isoformat(),
        "runs": [run_to_dict(r) for r in records],
    }


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write JSON to ``path`` through a temporary file and a rename (never half a file)."""
    write_json(path, doc, sort_keys=False)


def read_import_file(path: Path) -> list[RunRecord]:
    """Runs from a servelab export, a single run, or a ``vllm bench serve`` result file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", path=path) from exc
    docs: list[Any]
    if path.suffix.lower() == ".toml":  # published runs as the shipped table writes them
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"not valid TOML: {exc}", path=path) from exc
        if not is_published_doc(doc):
            raise InputError(f"a TOML import must be published runs (schema = "
                             f"\"servelab.published/1\"), not {doc.get('schema')!r}", path=path)
        return [run_from_published(r) for r in parse_published(doc, str(path))]
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError as exc:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:
            docs = [json.loads(ln) for ln in lines]
        except json.JSONDecodeError:
            raise InputError(
                f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", path=path
            ) from exc
        if not docs:
            raise InputError("empty file", path=path) from exc
    out: list[RunRecord] = []
    for doc in docs:
        out.extend(_records_from_doc(doc, str(path)))
    return out


def _records_from_doc(doc: Any, source: str) -> list[RunRecord]:
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object", path=source)
    if doc.get("schema") == BENCH_SCHEMA:
        return [run_from_bench_json(doc, source=source)]
    if is_published_doc(doc):
        return [run_from_published(r) for r in parse_published(doc, source)]
    if "schema" in doc:
        if doc["schema"] != EXPORT_SCHEMA:
            raise InputError(
                f"unsupported export schema {doc['schema']!r} (expected {EXPORT_SCHEMA})",
                path=source,
            )
        runs = doc.get("runs")
        if not isinstance(runs, list):
            raise InputError("export has no 'runs' list", path=source)
        return [run_from_dict(r, source=source) for r in runs]
    if is_vllm_bench_result(doc):
        return [run_from_vllm_bench(doc, source=source)]
    if "started_at" in doc:
        return [run_from_dict(doc, source=source)]
    raise InputError("neither a servelab export nor a 'vllm bench serve' result file", path=source)


#: The label every published run carries, so that nothing reads it as a run of its own.
PUBLISHED_LABEL = "published"


def run_from_published(row: PublishedRun) -> RunRecord:
    """A stored run from one published figure: the build, machine, engine and flags as
    published, the figure as a metric (at its prompt length and concurrency when stated, and
    as the headline it is), the label ``published``, and the row itself (source, where to
    check it, the quote) under ``extra["published"]``. It carries no plan, so no calibration
    takes a sample from it; the same row imported twice is one run."""
    started = datetime.fromisoformat(row.date).replace(tzinfo=UTC)
    point = point_label(row.prompt_tokens, row.concurrency or 1) \
        if row.prompt_tokens is not None else ""
    headline: dict[str, Any] = (
        {"kv_pool_tokens": round(row.value)} if row.metric == "kv_pool_tokens"
        else {row.metric: row.value}  # decode_tok_s, prefill_tok_s, weights_gib: RunRecord's
    )
    doc = row.to_dict()
    return RunRecord(
        run_id=content_id(started, doc),
        started_at=started,
        status=STATUS_OK,
        model_id=row.build,
        hardware=row.hardware,
        engine_name=row.engine,
        engine_version=row.engine_version,
        engine_args=row.flags,
        workload={"source": "published", "prompt_tokens": row.prompt_tokens,
                  "output_tokens": row.output_tokens, "concurrency": row.concurrency,
                  "context": row.context, "spec": row.spec, "gpus": row.gpus},
        extra={"published": doc},
        labels=(PUBLISHED_LABEL,),
        metrics=(Metric(name=row.metric, value=row.value, point=point, n=0, unit=row.unit),),
        **headline,
    )


def is_vllm_bench_result(doc: JSON) -> bool:
    """True for a ``vllm bench serve`` saved result (summary keys like ``mean_ttft_ms``)."""
    return "completed" in doc and ("mean_ttft_ms" in doc or "ttfts" in doc) and "date" in doc


def content_id(started: datetime, doc: Any) -> str:
    """A run id made from the document's content (``YYYYmmdd-HHMMSS-xxxxxx`` like every id),
    so that importing the same result twice finds it stored and skips it."""
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:6]
    return f"{started.astimezone(UTC):%Y%m%d-%H%M%S}-{digest}"


def run_from_vllm_bench(doc: JSON, *, source: str = "input") -> RunRecord:
    """Convert a ``vllm bench serve`` result into a RunRecord (samples when saved detailed).

    The file is read by :func:`servelab.bench.vllm_compat.from_vllm` (the one parser of
    vLLM's result JSON, also behind ``servelab bench-import``); its requests become samples
    through :func:`sample_of`, as servelab's own do."""
    started = _vllm_date(doc.get("date"), source)
    try:
        parsed = from_vllm(doc, path=source)  # the one reader of vLLM's file
    except (TypeError, ValueError, IndexError) as exc:
        raise InputError(f"malformed vllm bench serve result: {exc!r}", path=source) from exc
    in_lens = ([s.prompt_len for s in parsed.samples]
               if isinstance(doc.get("input_lens"), list) else [])
    conc = doc.get("max_concurrency")
    raw_rate = doc.get("request_rate")  # "inf" (or absent): all at once, closed loop
    rate = (float(raw_rate) if isinstance(raw_rate, int | float)
            and not isinstance(raw_rate, bool) and 0 < raw_rate < float("inf") else None)
    burst = doc.get("burstiness")
    shape = float(burst) if isinstance(burst, int | float) else 1.0
    if in_lens and rate is not None:  # vLLM's arrivals: gamma gaps, Poisson at shape 1
        point = point_label(round(statistics.median(in_lens)), conc, 0, rate,
                            arrival_tag("poisson" if shape == 1 else "gamma", shape))
    elif in_lens:
        point = point_label(round(statistics.median(in_lens)), conc)
    else:
        point = f"c{conc if conc is not None else 'max'}"  # no prompt length: not a PointKey
    samples = [sample_of(r, point) for r in parsed.samples]
    metrics: list[Metric] = []
    for key, name, scale, unit in (
        ("output_throughput", "output_throughput_tok_s", 1.0, "tok/s"),
        ("total_token_throughput", "total_throughput_tok_s", 1.0, "tok/s"),
        ("request_throughput", "request_throughput_req_s", 1.0, "req/s"),
        ("mean_ttft_ms", "ttft_mean_s", 1e-3, "s"),
        ("median_ttft_ms", "ttft_median_s", 1e-3, "s"),
        ("p99_ttft_ms", "ttft_p99_s", 1e-3, "s"),
        ("mean_tpot_ms", "tpot_mean_s", 1e-3, "s"),
        ("median_tpot_ms", "tpot_median_s", 1e-3, "s"),
        ("p99_tpot_ms", "tpot_p99_s", 1e-3, "s"),
        ("mean_itl_ms", "itl_mean_s", 1e-3, "s"),
        ("p99_itl_ms", "itl_p99_s", 1e-3, "s"),
        ("mean_e2el_ms", "e2e_mean_s", 1e-3, "s"),
    ):
        value = parsed.aggregates.get(key)
        if value is not None:
            metrics.append(
                Metric(
                    name=name,
                    value=float(value) * scale,
                    point=point,
                    n=int(doc.get("completed") or 0),
                    unit=unit,
                )
            )
    decode = None
    tpot = doc.get("median_tpot_ms")
    if isinstance(tpot, (int, float)) and tpot > 0:
        decode = 1000.0 / float(tpot)
    dropped = {
        "ttfts",
        "itls",
        "latencies",
        "input_lens",
        "output_lens",
        "errors",
        "generated_texts",
        "start_times",
        "queue_times",
    }
    summary = {k: v for k, v in doc.items() if k not in dropped}
    failed = int(doc.get("failed") or 0)
    completed = int(doc.get("completed") or 0)
    status = STATUS_OK if completed > 0 else STATUS_FAILED
    return RunRecord(
        run_id=content_id(started, doc),  # same file -> same id: re-import skips
        started_at=started,
        status=status,
        status_reason=None if status == STATUS_OK else f"{failed} requests failed, none completed",
        model_id=str(doc["model_id"]) if doc.get("model_id") else None,
        engine_name=str(doc.get("backend") or "vllm"),
        decode_tok_s=decode,
        workload={
            "source": "vllm bench serve",
            "num_prompts": doc.get("num_prompts"),
            "max_concurrency": conc,
            "request_rate": doc.get("request_rate"),
            "point": point,
        },
        extra={"vllm_bench": summary, "imported_from": Path(source).name},
        labels=tuple(x for x in (doc.get("label"),) if isinstance(x, str) and x),
        metrics=tuple(metrics),
        samples=tuple(samples),
    )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def point_name(prompt_len: Any, concurrency: Any, source: str, depth: Any = 0,
               rate: Any = None, workload: Any = None) -> str:
    """The label of a bench point (:class:`~servelab.points.PointKey`); integers required
    (``depth`` may be absent: documents written before depth grids have none). An open-loop
    point (``rate``) carries its rate and the ``workload``'s arrival profile; a trace replay
    carries ``trace`` instead of its mean rate."""
    if not _is_int(prompt_len) or not (concurrency is None or _is_int(concurrency)) or not (
        depth is None or (_is_int(depth) and depth >= 0)
    ):
        raise InputError("bench point needs integer prompt_len, concurrency and depth",
                         path=source)
    if rate is not None and (not isinstance(rate, int | float) or isinstance(rate, bool)
                             or rate <= 0):
        raise InputError(f"bench point has a bad request_rate: {rate!r}", path=source)
    w = workload if isinstance(workload, dict) else {}
    profile = str(w.get("profile") or "poisson")
    if rate is None or profile == "trace" or w.get("trace"):
        arrival = "trace" if rate is not None else ""
        return point_label(prompt_len, concurrency, depth or 0, None, arrival)
    burst = w.get("burstiness")
    end = w.get("ramp_end_rate")
    arrival = arrival_tag(profile, float(burst) if isinstance(burst, int | float) else 1.0,
                          float(end) if isinstance(end, int | float) else None)
    return point_label(prompt_len, concurrency, depth or 0, float(rate), arrival)


_BENCH_METRICS = (
    # (key in the bench point's metrics, stored name, scale, unit)
    ("decode_tok_s", "decode_tok_s", 1.0, "tok/s"),
    ("prefill_tok_s", "prefill_tok_s", 1.0, "tok/s"),
    ("ttft_ms", "ttft_s", 1e-3, "s"),
    ("tpot_ms", "tpot_s", 1e-3, "s"),
    ("itl_ms", "itl_s", 1e-3, "s"),
    ("e2el_ms", "e2e_s", 1e-3, "s"),
)


def sample_of(req: RequestSample, point: str) -> Sample:
    """A stored :class:`Sample` from one measured request (servelab's client or a
    ``vllm bench serve`` file read by :mod:`servelab.bench.vllm_compat`): TTFT and E2E to
    the first and last chunk, TPOT over the tokens after the first, inter-chunk gaps."""
    chunks = req.chunk_ns
    err = req.error
    ct = req.completion_tokens
    ttft = chunks[0] / 1e9 if chunks else None
    latency = chunks[-1] / 1e9 if chunks else None
    tpot = None
    if err is None and ttft is not None and latency is not None and ct is not None and ct > 1:
        tpot = (latency - ttft) / (ct - 1)
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(chunks)] if err is None else []
    detail = req.error_detail
    return Sample(
        point=point,
        index=req.index,
        ttft_s=ttft if err is None else None,
        tpot_s=tpot,
        e2e_s=latency if err is None else None,
        itl_mean_s=statistics.fmean(gaps) if gaps else None,
        itl_p50_s=statistics.median(gaps) if gaps else None,
        itl_p99_s=_pct(gaps, 99) if gaps else None,
        itl_max_s=max(gaps) if gaps else None,
        prompt_tokens=req.prompt_tokens,
        completion_tokens=ct,
        error=None if err is None else detail if err is ErrorKind.REPORTED and detail
        else f"{err.value}: {detail}" if detail else err.value,
    )


def _summary_metrics(metrics: Metrics, point: str) -> list[Metric]:
    """A bench point's summaries (mean with its 95 % CI) as stored metrics."""
    out: list[Metric] = []
    for key, stored, scale, unit in _BENCH_METRICS:
        summ = getattr(metrics, key)
        if not isinstance(summ, Summary):
            continue
        out.append(Metric(name=stored, value=summ.mean * scale, point=point,
                          ci_low=summ.ci_low * scale, ci_high=summ.ci_high * scale,
                          n=summ.n, unit=unit))
    return out


def run_from_bench(result: BenchResult, *, source: str = "input",
                   document: JSON | None = None, **fields: Any) -> RunRecord:
    """A RunRecord from a :class:`~servelab.bench.result.BenchResult`, read directly.

    Every measured (non-warm-up) request becomes a :class:`Sample` at point
    ``p{prompt_len}-c{concurrency}`` (``p{prompt_len}-d{depth}-c{concurrency}`` for a point of
    a depth grid, ``...-r{rate}[-profile]`` for an open-loop point); each point's summaries
    (mean with ``ci95``) become metrics; the headline decode/prefill are those of the
    closed-loop concurrency-1 point (with a decode figure) whose prompt length is nearest
    2,048 tokens. ``document`` is the result's stored JSON when it was read from a file (its
    content names the run, so that importing it twice skips it); otherwise
    ``result.to_json()``. ``fields`` set or override any RunRecord field (recipe, engine,
    hardware, ...), so the run pipeline can call this with what it knows about the serving
    side.
    """
    doc = document if document is not None else result.to_json()
    workload = result.workload.to_json()
    samples: list[Sample] = []
    metrics: list[Metric] = []
    # the single-stream headline of each rate: the point nearest 2,048 prompt tokens that has
    # a figure of it (a point where no request could be timed per token, or whose rate's CI
    # reached zero, has none: the nearest point that has one is the headline)
    best: dict[str, tuple[int, float]] = {}
    for pr in result.points:
        pt = pr.point
        name = point_name(pt.prompt_len, pt.concurrency, source, pt.depth, pt.request_rate,
                          workload)
        # in request order, as the store gives them back: requests of an open-loop point
        # finish out of order, and a record must equal its stored copy
        samples.extend(sample_of(r, name) for r in sorted(pr.samples, key=lambda r: r.index)
                       if not r.warmup)
        mine = _summary_metrics(pr.metrics, name)
        metrics.extend(mine)
        means = {m.name: m.value for m in mine}
        if pt.concurrency == 1 and not pt.depth and pt.request_rate is None:
            dist = abs(pt.prompt_len - 2048)
            for key in ("decode_tok_s", "prefill_tok_s"):
                value = means.get(key)
                if value is not None and (key not in best or dist < best[key][0]):
                    best[key] = (dist, value)
    completed = sum(s.ok for s in samples)
    started = _parse_dt(result.started_at)
    finished = _parse_dt(result.finished_at) if result.finished_at else None
    base: dict[str, Any] = {
        # same result -> same id: re-import skips (an SLO evaluated over it changes nothing)
        "run_id": content_id(started, {k: v for k, v in doc.items() if k != "slo"}),
        "labels": ("partial",) if result.partial else (),
        "started_at": started,
        "finished_at": finished,
        "status": STATUS_OK if completed else STATUS_FAILED,
        "status_reason": None if completed else "no request completed",
        "model_id": result.model or None,
        "decode_tok_s": best["decode_tok_s"][1] if "decode_tok_s" in best else None,
        "prefill_tok_s": best["prefill_tok_s"][1] if "prefill_tok_s" in best else None,
        "workload": workload,
        "extra": {
            "bench": {k: v for k, v in doc.items() if k not in ("points", "workload")},
            "bench_points": [
                {k: v for k, v in p.items() if k != "samples"}
                for p in doc.get("points") or ()
                if isinstance(p, dict)
            ],
        },
        "metrics": tuple(metrics),
        "samples": tuple(samples),
    }
    base.update(fields)
    try:
        return RunRecord(**base)
    except TypeError as exc:
        raise InputError(f"bad run field: {exc}", path=source) from exc


def run_from_bench_json(doc: JSON, *, source: str = "input", **fields: Any) -> RunRecord:
    """A RunRecord from a stored ``servelab.bench/1`` document: read by the typed reader
    (:func:`servelab.bench.result.read_result`, an InputError naming ``source`` and the
    problem), then :func:`run_from_bench`."""
    return run_from_bench(read_result(doc, source=source), source=source, document=doc,
                          **fields)


def fields_from_engine_facts(facts: JSON) -> dict[str, Any]:
    """RunRecord fields from an engine-facts document (``EngineFacts.to_dict()``).

    Sets ``engine_version`` (``version``), ``weights_gib`` (``weights_gib``, else the CPU
    build's ``checkpoint_gib``), ``kv_pool_tokens`` and keeps the whole document as
    ``engine_facts``; use as ``run_from_bench_json(doc, **fields_from_engine_facts(f))``.
    """
    weights = facts.get("weights_gib")
    if weights is None:
        weights = facts.get("checkpoint_gib")
    kv = facts.get("kv_pool_tokens")
    out: dict[str, Any] = {"engine_facts": dict(facts)}
    if isinstance(facts.get("version"), str):
        out["engine_version"] = facts["version"]
    if isinstance(weights, (int, float)):
        out["weights_gib"] = float(weights)
    if isinstance(kv, int):
        out["kv_pool_tokens"] = kv
    return out


def _vllm_date(value: Any, source: str) -> datetime:
    if isinstance(value, str):
        for fmt in ("%Y%m%d-%H%M%S", "%Y-%m-%dT%H:%M:%S"):
            try:
                return datetime.strptime(value, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
    raise InputError(f"vllm bench result has no readable 'date' ({value!r})", path=source)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def import_runs(store: Store, records: Iterable[RunRecord]) -> ImportResult:
    """Add runs; a run whose id is already stored is skipped (imports are idempotent)."""
    added: list[str] = []
    skipped: list[str] = []
    for record in records:
        if record.run_id is not None and store.has_run(record.run_id):
            skipped.append(record.run_id)
            continue
        added.append(store.add_run(record))
    return ImportResult(added=tuple(added), skipped=tuple(skipped))
