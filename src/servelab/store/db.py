"""The results database: open (SQLite file or PostgreSQL URL), migrate, read and write runs.

Where the database is, in order: the ``url`` argument (``--db``), ``$SERVELAB_DB``, else the
SQLite file ``results.db`` in ``$SERVELAB_HOME`` or platformdirs' ``user_data_dir("servelab")``.
A ``url`` without ``://`` is a SQLite file path. ``postgresql://`` URLs use psycopg 3.

Every run is written in ONE transaction (run row, labels, metrics, samples): a writer killed
mid-write leaves nothing behind, and readers never see a half-written run. SQLite runs in WAL
mode with ``BEGIN IMMEDIATE`` for writes and a busy timeout, so several processes can write
concurrently without losing rows.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from servelab.errors import (
    RunNotFoundError,
    StoreError,
    StoreSchemaError,
)
from servelab.redact import redact, redact_args, redact_text
from servelab.store import schema as t
from servelab.store.connect import (
    display_url,
    make_engine,
    require_sqlite_file,
    resolve_url,
)
from servelab.store.model import (
    JSON,
    ExperimentRecord,
    Metric,
    RunFilter,
    RunRecord,
    Sample,
    utcnow,
)

_PG_LOCK_KEY = 0x5E4E1AB  # advisory lock held while migrating a PostgreSQL database


def new_id(when: datetime | None = None) -> str:
    """A sortable, human-readable id: ``YYYYmmdd-HHMMSS-xxxxxx`` (UTC)."""
    when = (when or utcnow()).astimezone(UTC)
    return f"{when:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def open_store(url: str | None = None, *, migrate: bool = True, create: bool = True) -> Store:
    """Open (and by default create/migrate) the results database at ``url``.

    ``create=False`` (the read-only commands) never creates a database: a SQLite file that
    does not exist is an :class:`InputError` naming it (a mistyped ``--db`` is not an empty
    database). Raises :class:`StoreSchemaError` for a corrupted or foreign file or a newer
    schema, and :class:`StoreError` when the database cannot be reached.
    """
    resolved = resolve_url(url)
    if not create:
        require_sqlite_file(resolved)
    engine = make_engine(resolved)
    store = Store(engine, resolved)
    try:
        store.check_schema(migrate=migrate)
    except BaseException:
        engine.dispose()
        raise
    return store



def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _clean(value: Any) -> Any:
    """Make a document storable everywhere: secrets out, NaN/inf -> None, tuples -> lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise StoreError(f"cannot store a value of type {type(value).__name__} in a JSON document")


def _doc(value: JSON | None) -> JSON | None:
    if value is None:
        return None
    cleaned = _clean(redact(value))
    assert isinstance(cleaned, dict)
    return cleaned


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def recipe_hash(text: str) -> str:
    """sha256 of a recipe's text (as stored, i.e. after redaction)."""
    return hashlib.sha256(text.encode()).hexdigest()


class Store:
    """A results database. Create with :func:`open_store`; close with :meth:`close`."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self.backend = engine.dialect.name

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Release every connection."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                conn.info["servelab_write"] = True
                try:
                    with conn.begin():
                        yield conn
                finally:
                    conn.info.pop("servelab_write", None)
        except sa.exc.DatabaseError as exc:
            raise self._db_error(exc) from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn, conn.begin():
                yield conn
        except sa.exc.DatabaseError as exc:
            raise self._db_error(exc) from exc

    def _db_error(self, exc: sa.exc.DatabaseError) -> StoreError:
        text = str(exc.orig) if exc.orig is not None else str(exc)
        text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        where = display_url(self.url)
        if "file is not a database" in text or "malformed" in text:
            return StoreSchemaError(f"corrupted database ({text})", path=where)
        if isinstance(exc, sa.exc.OperationalError):
            return StoreError(f"database unavailable: {redact_text(text)}", path=where)
        return StoreError(f"database error: {redact_text(text)}", path=where)

    # -- schema -----------------------------------------------------------------------------

    def schema_version(self) -> int:
        """The latest applied migration step (0 for an empty database)."""
        with self._read() as conn:
            return _applied_version(conn)

    def check_schema(self, *, migrate: bool = True) -> int:
        """Refuse foreign/newer schemas; migrate an empty or older one. Returns the version."""
        try:
            with self._read() as conn:
                version = _applied_version(conn)
        except StoreSchemaError as exc:
            if exc.path is None:
                raise StoreSchemaError(exc.message, path=display_url(self.url)) from exc
            raise
        if version > t.LATEST_VERSION:
            raise StoreSchemaError(
                f"schema version {version} is newer than this servelab supports "
                f"({t.LATEST_VERSION}); upgrade servelab",
                path=display_url(self.url),
            )
        if version < t.LATEST_VERSION:
            if not migrate:
                raise StoreSchemaError(
                    f"schema version {version} needs migrating to {t.LATEST_VERSION}",
                    path=display_url(self.url),
                )
            self.migrate()
            version = t.LATEST_VERSION
        return version

    def migrate(self, target: int | None = None) -> int:
        """Apply the pending migration steps up to ``target`` (default: latest), in order.

        Each step and its migration-table row commit together; concurrent migrators serialize
        (SQLite write lock, PostgreSQL advisory lock) and re-check the version under the lock.
        """
        target = t.LATEST_VERSION if target is None else target
        for version, name, step in t.MIGRATIONS:
            if version > target:
                break
            with self._write() as conn:
                if self.backend == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
                if _applied_version(conn) >= version:
                    continue
                if version == 1:
                    t.migrations_table.create(conn, checkfirst=True)
                step(conn)
                conn.execute(
                    t.migrations_table.insert().values(
                        version=version, name=name, applied_at=utcnow()
                    )
                )
        return self.schema_version()

    # -- runs -------------------------------------------------------------------------------

    def add_run(self, record: RunRecord) -> str:
        """Store one run (secrets redacted) in one transaction; returns its id."""
        run_id = record.run_id or new_id(record.started_at)
        row = self._run_row(replace(record, run_id=run_id))
        try:
            with self._write() as conn:
                self._insert_run(conn, row, record)
        except StoreError as exc:
            if isinstance(exc.__cause__, sa.exc.IntegrityError) and self.has_run(run_id):
                raise StoreError(f"run {run_id} is already stored") from exc
            raise
        return run_id

    def _run_row(self, record: RunRecord) -> dict[str, Any]:
        text = redact_text(record.recipe_text) if record.recipe_text is not None else None
        rhash = record.recipe_hash or (recipe_hash(text) if text is not None else None)
        return {
            "id": record.run_id,
            "created_at": _aware(record.created_at) or utcnow(),
            "started_at": _aware(record.started_at),
            "finished_at": _aware(record.finished_at),
            "status": record.status,
            "status_reason": (
                redact_text(record.status_reason) if record.status_reason is not None else None
            ),
            "recipe_name": record.recipe_name,
            "recipe_text": text,
            "recipe_hash": rhash,
            "model_id": record.model_id,
            "checkpoint_revision": record.checkpoint_revision,
            "checkpoint_path": record.checkpoint_path,
            "checkpoint_header_hash": record.checkpoint_header_hash,
            "hardware": record.hardware,
            "host": record.host,
            "driver": record.driver,
            "cuda": record.cuda,
            "torch": record.torch,
            "engine_name": record.engine_name,
            "engine_version": record.engine_version,
            "engine_args": list(redact_args(record.engine_args)),
            "decode_tok_s": _finite(record.decode_tok_s),
            "prefill_tok_s": _finite(record.prefill_tok_s),
            "weights_gib": _finite(record.weights_gib),
            "kv_pool_tokens": record.kv_pool_tokens,
            "power_w": _finite(record.power_w),
            "checkpoint_report": _doc(record.checkpoint_report),
            "hardware_profile": _doc(record.hardware_profile),
            "hardware_probe": _doc(record.hardware_probe),
            "engine_facts": _doc(record.engine_facts),
            "workload": _doc(record.workload),
            "prediction": _doc(record.prediction),
            "extra": _doc(record.extra),
            "log_tail": redact_text(record.log_tail) if record.log_tail is not None else None,
        }

    def _insert_run(self, conn: Connection, row: dict[str, Any], record: RunRecord) -> None:
        run_id = row["id"]
        conn.execute(t.runs.insert().values(**row))
        labels = sorted(set(record.labels))
        if labels:
            conn.execute(t.run_labels.insert(), [{"run_id": run_id, "label": x} for x in labels])
        seen: set[tuple[str, str]] = set()
        metric_rows = []
        for m in record.metrics:
            if (m.name, m.point) in seen:
                raise StoreError(f"run {run_id}: metric {m.name!r} at {m.point!r} given twice")
            seen.add((m.name, m.point))
            value = _finite(m.value)
            if value is None:
                continue
            metric_rows.append(
                {
                    "run_id": run_id,
                    "name": m.name,
                    "point": m.point,
                    "value": value,
                    "ci_low": _finite(m.ci_low),
                    "ci_high": _finite(m.ci_high),
                    "n": m.n,
                    "unit": m.unit,
                }
            )
        if metric_rows:
            conn.execute(t.metrics.insert(), metric_rows)
        if record.samples:
            conn.execute(
                t.samples.insert(),
                [
                    {
                        "run_id": run_id,
                        "point": s.point,
                        "idx": s.index,
                        "ttft_s": _finite(s.ttft_s),
                        "tpot_s": _finite(s.tpot_s),
                        "e2e_s": _finite(s.e2e_s),
                        "itl_mean_s": _finite(s.itl_mean_s),
                        "itl_p50_s": _finite(s.itl_p50_s),
                        "itl_p99_s": _finite(s.itl_p99_s),
                        "itl_max_s": _finite(s.itl_max_s),
                        "prompt_tokens": s.prompt_tokens,
                        "completion_tokens": s.completion_tokens,
                        "error": redact_text(s.error) if s.error is not None else None,
                    }
                    for s in record.samples
                ],
            )

    def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is ``run_id`` or starts with it."""
        with self._read() as conn:
            return _resolve(conn, t.runs, run_id, "run")

    def get_run(self, run_id: str, *, samples: bool = True) -> RunRecord:
        """The run with this id (or unique id prefix), with its samples unless told not to."""
        with self._read() as conn:
            full = _resolve(conn, t.runs, run_id, "run")
            row = conn.execute(sa.select(t.runs).where(t.runs.c.id == full)).mappings().one()
            return self._records(conn, [dict(row)], samples=samples)[0]

    def list_runs(
        self, filters: RunFilter | None = None, *, samples: bool = False
    ) -> list[RunRecord]:
        """Runs matching ``filters``, oldest first (newest first if the filter says so).

        Samples are left out unless ``samples=True`` (they are the bulk of the data).
        """
        f = filters or RunFilter()
        r = t.runs.c
        q = sa.select(t.runs)
        if f.recipe_name is not None:
            q = q.where(r.recipe_name == f.recipe_name)
        if f.model_id is not None:
            q = q.where(r.model_id == f.model_id)
        if f.model_or_recipe is not None:
            q = q.where(sa.or_(r.recipe_name == f.model_or_recipe, r.model_id == f.model_or_recipe))
        if f.status is not None:
            q = q.where(r.status == f.status)
        if f.host is not None:
            q = q.where(r.host == f.host)
        if f.hardware is not None:
            q = q.where(r.hardware == f.hardware)
        if f.engine_version is not None:
            q = q.where(r.engine_version == f.engine_version)
        if f.since is not None:
            q = q.where(r.started_at >= _aware(f.since))
        if f.until is not None:
            q = q.where(r.started_at <= _aware(f.until))
        if f.label is not None:
            q = q.where(
                r.id.in_(sa.select(t.run_labels.c.run_id).where(t.run_labels.c.label == f.label))
            )
        order = (r.started_at.desc(), r.id.desc()) if f.newest_first else (r.started_at, r.id)
        q = q.order_by(*order)
        if f.limit is not None:
            q = q.limit(f.limit)
        with self._read() as conn:
            rows = [dict(m) for m in conn.execute(q).mappings()]
            return self._records(conn, rows, samples=samples)

    def count_runs(self) -> int:
        """How many runs are stored."""
        with self._read() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar_one())

    def delete_run(self, run_id: str) -> str:
        """Delete one run with its samples, metrics and labels; returns the full id."""
        with self._write() as conn:
            full = _resolve(conn, t.runs, run_id, "run")
            for table in (t.samples, t.metrics, t.run_labels):
                conn.execute(table.delete().where(table.c.run_id == full))
            conn.execute(t.runs.delete().where(t.runs.c.id == full))
        return full

    def has_run(self, run_id: str) -> bool:
        """True when a run with exactly this id is stored."""
        with self._read() as conn:
            q = sa.select(t.runs.c.id).where(t.runs.c.id == run_id)
            return conn.execute(q).first() is not None

    def _records(
        self, conn: Connection, rows: list[dict[str, Any]], *, samples: bool
    ) -> list[RunRecord]:
        if not rows:
            return []
        ids = [row["id"] for row in rows]
        labels: dict[str, list[str]] = {i: [] for i in ids}
        metrics: dict[str, list[Metric]] = {i: [] for i in ids}
        sample_map: dict[str, list[Sample]] = {i: [] for i in ids}
        for chunk in _chunks(ids, 500):
            for lrow in conn.execute(
                sa.select(t.run_labels)
                .where(t.run_labels.c.run_id.in_(chunk))
                .order_by(t.run_labels.c.label)
            ).mappings():
                labels[lrow["run_id"]].append(lrow["label"])
            for mrow in conn.execute(
                sa.select(t.metrics)
                .where(t.metrics.c.run_id.in_(chunk))
                .order_by(t.metrics.c.name, t.metrics.c.point)
            ).mappings():
                metrics[mrow["run_id"]].append(
                    Metric(
                        name=mrow["name"],
                        value=mrow["value"],
                        point=mrow["point"],
                        ci_low=mrow["ci_low"],
                        ci_high=mrow["ci_high"],
                        n=mrow["n"],
                        unit=mrow["unit"],
                    )
                )
            if samples:
                for srow in conn.execute(
                    sa.select(t.samples)
                    .where(t.samples.c.run_id.in_(chunk))
                    .order_by(t.samples.c.run_id, t.samples.c.point, t.samples.c.idx)
                ).mappings():
                    sample_map[srow["run_id"]].append(
                        Sample(
                            point=srow["point"],
                            index=srow["idx"],
                            ttft_s=srow["ttft_s"],
                            tpot_s=srow["tpot_s"],
                            e2e_s=srow["e2e_s"],
                            itl_mean_s=srow["itl_mean_s"],
                            itl_p50_s=srow["itl_p50_s"],
                            itl_p99_s=srow["itl_p99_s"],
                            itl_max_s=srow["itl_max_s"],
                            prompt_tokens=srow["prompt_tokens"],
                            completion_tokens=srow["completion_tokens"],
                            error=srow["error"],
                        )
                    )
        out = []
        for row in rows:
            started = _aware(row["started_at"])
            assert started is not None
            out.append(
                RunRecord(
                    run_id=row["id"],
                    created_at=_aware(row["created_at"]),
                    started_at=started,
                    finished_at=_aware(row["finished_at"]),
                    status=row["status"],
                    status_reason=row["status_reason"],
                    recipe_name=row["recipe_name"],
                    recipe_text=row["recipe_text"],
                    recipe_hash=row["recipe_hash"],
                    model_id=row["model_id"],
                    checkpoint_revision=row["checkpoint_revision"],
                    checkpoint_path=row["checkpoint_path"],
                    checkpoint_header_hash=row["checkpoint_header_hash"],
                    hardware=row["hardware"],
                    host=row["host"],
                    driver=row["driver"],
                    cuda=row["cuda"],
                    torch=row["torch"],
                    engine_name=row["engine_name"],
                    engine_version=row["engine_version"],
                    engine_args=tuple(row["engine_args"] or ()),
                    decode_tok_s=row["decode_tok_s"],
                    prefill_tok_s=row["prefill_tok_s"],
                    weights_gib=row["weights_gib"],
                    kv_pool_tokens=row["kv_pool_tokens"],
                    power_w=row.get("power_w"),
                    checkpoint_report=row["checkpoint_report"],
                    hardware_profile=row["hardware_profile"],
                    hardware_probe=row["hardware_probe"],
                    engine_facts=row["engine_facts"],
                    workload=row["workload"],
                    prediction=row["prediction"],
                    extra=row["extra"],
                    log_tail=row["log_tail"],
                    labels=tuple(labels[row["id"]]),
                    metrics=tuple(metrics[row["id"]]),
                    samples=tuple(sample_map[row["id"]]),
                )
            )
        return out

    # -- experiments ------------------------------------------------------------------------

    def add_experiment(self, exp: ExperimentRecord) -> str:
        """Store an experiment verdict, linked to its target recipe; returns its id."""
        exp_id = exp.experiment_id or new_id()
        with self._write() as conn:
            conn.execute(
                t.experiments.insert().values(
                    id=exp_id,
                    created_at=_aware(exp.created_at) or utcnow(),
                    title=exp.title,
                    target_recipe=exp.target_recipe,
                    baseline_run_ids=list(exp.baseline_run_ids),
                    variant_run_ids=list(exp.variant_run_ids),
                    criteria=exp.criteria,
                    verdict=exp.verdict,
                    report=_doc(exp.report),
                )
            )
        return exp_id

    def list_experiments(self, target_recipe: str | None = None) -> list[ExperimentRecord]:
        """Stored experiments (optionally only those targeting one recipe), oldest first."""
        e = t.experiments.c
        q = sa.select(t.experiments).order_by(e.created_at, e.id)
        if target_recipe is not None:
            q = q.where(e.target_recipe == target_recipe)
        with self._read() as conn:
            return [
                ExperimentRecord(
                    experiment_id=row["id"],
                    created_at=_aware(row["created_at"]),
                    title=row["title"],
                    target_recipe=row["target_recipe"],
                    baseline_run_ids=tuple(row["baseline_run_ids"]),
                    variant_run_ids=tuple(row["variant_run_ids"]),
                    criteria=row["criteria"],
                    verdict=row["verdict"],
                    report=row["report"],
                )
                for row in conn.execute(q).mappings()
            ]


def _applied_version(conn: Connection) -> int:
    names = set(sa.inspect(conn).get_table_names())
    if t.migrations_table.name not in names:
        if names:
            shown = ", ".join(sorted(names)[:5])
            raise StoreSchemaError(
                f"not a servelab results database (it has other tables: {shown})"
            )
        return 0
    version = conn.execute(sa.select(sa.func.max(t.migrations_table.c.version))).scalar()
    return int(version or 0)


def _resolve(conn: Connection, table: sa.Table, given: str, what: str) -> str:
    given = given.strip()
    if not given:
        raise RunNotFoundError(f"empty {what} id")
    exact = conn.execute(sa.select(table.c.id).where(table.c.id == given)).first()
    if exact is not None:
        return str(exact[0])
    escaped = given.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = [
        str(r[0])
        for r in conn.execute(
            sa.select(table.c.id).where(table.c.id.like(f"{escaped}%", escape="\\")).limit(3)
        )
    ]
    if not found:
        raise RunNotFoundError(f"no {what} with id {given!r}")
    if len(found) > 1:
        raise RunNotFoundError(f"{what} id {given!r} is ambiguous ({', '.join(found[:2])}, ...)")
    return found[0]


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
