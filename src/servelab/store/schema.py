"""Database schema and its numbered migrations (SQLAlchemy Core; SQLite and PostgreSQL).

The schema is versioned by the ``servelab_migrations`` table: one row per applied step
(``version``, ``name``, ``applied_at``). A database is "servelab's" when that table exists;
a database with other tables but no migration table is foreign and is refused, and one whose
latest applied step is newer than this servelab knows is refused too.

Steps (each runs in its own transaction, together with its row in the migration table):

1. ``initial``: ``runs`` (typed columns + JSON documents), ``samples`` (one row per request),
   ``metrics`` (computed metrics with CIs per workload point), ``run_labels``.
2. ``experiments-and-power``: the ``experiments`` table (A/B verdicts linked to the recipe they
   target) and a ``runs.power_w`` column for probed power.

To add a step: append a function to ``MIGRATIONS``; never edit a step that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

metadata = sa.MetaData()

migrations_table = sa.Table(
    "servelab_migrations",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


def _v1_run_columns() -> list[sa.Column[object]]:
    """Fresh column objects of the ``runs`` table as shipped in schema v1."""
    return [
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_reason", sa.Text),
        sa.Column("recipe_name", sa.String(200), index=True),
        sa.Column("recipe_text", sa.Text),
        sa.Column("recipe_hash", sa.String(64)),
        sa.Column("model_id", sa.String(300), index=True),
        sa.Column("checkpoint_revision", sa.String(100)),
        sa.Column("checkpoint_path", sa.Text),
        sa.Column("checkpoint_header_hash", sa.String(64)),
        sa.Column("hardware", sa.String(100)),
        sa.Column("host", sa.String(200)),
        sa.Column("driver", sa.String(100)),
        sa.Column("cuda", sa.String(50)),
        sa.Column("torch", sa.String(100)),
        sa.Column("engine_name", sa.String(50)),
        sa.Column("engine_version", sa.String(100)),
        sa.Column("engine_args", sa.JSON),
        sa.Column("decode_tok_s", sa.Float),
        sa.Column("prefill_tok_s", sa.Float),
        sa.Column("weights_gib", sa.Float),
        sa.Column("kv_pool_tokens", sa.BigInteger),
        sa.Column("checkpoint_report", sa.JSON),
        sa.Column("hardware_profile", sa.JSON),
        sa.Column("hardware_probe", sa.JSON),
        sa.Column("engine_facts", sa.JSON),
        sa.Column("workload", sa.JSON),
        sa.Column("prediction", sa.JSON),
        sa.Column("extra", sa.JSON),
        sa.Column("log_tail", sa.Text),
    ]


runs = sa.Table(
    "runs",
    metadata,
    *_v1_run_columns(),
    sa.Column("power_w", sa.Float),  # added by step 2
)

samples = sa.Table(
    "samples",
    metadata,
    sa.Column(
        "run_id", sa.String(40), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("point", sa.String(100), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("ttft_s", sa.Float),
    sa.Column("tpot_s", sa.Float),
    sa.Column("e2e_s", sa.Float),
    sa.Column("itl_mean_s", sa.Float),
    sa.Column("itl_p50_s", sa.Float),
    sa.Column("itl_p99_s", sa.Float),
    sa.Column("itl_max_s", sa.Float),
    sa.Column("prompt_tokens", sa.Integer),
    sa.Column("completion_tokens", sa.Integer),
    sa.Column("error", sa.Text),
)

metrics = sa.Table(
    "metrics",
    metadata,
    sa.Column(
        "run_id", sa.String(40), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("point", sa.String(100), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("unit", sa.String(30), nullable=False),
)

run_labels = sa.Table(
    "run_labels",
    metadata,
    sa.Column(
        "run_id", sa.String(40), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("label", sa.String(200), primary_key=True, index=True),
)

experiments = sa.Table(
    "experiments",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("title", sa.String(300)),
    sa.Column("target_recipe", sa.String(200), index=True),
    sa.Column("baseline_run_ids", sa.JSON, nullable=False),
    sa.Column("variant_run_ids", sa.JSON, nullable=False),
    sa.Column("criteria", sa.Text, nullable=False),
    sa.Column("verdict", sa.String(30), nullable=False),
    sa.Column("report", sa.JSON, nullable=False),
)

# ---------------------------------------------------------------------------------------------
# Migration steps. Each step creates exactly what existed at that version, with its own
# table definitions (not the current ``metadata``), so that replaying step 1 builds the real v1.


def _step1_initial(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table("runs", md, *_v1_run_columns())
    for table in (samples, metrics, run_labels):
        table.to_metadata(md)
    md.create_all(conn)


def _step2_experiments_and_power(conn: Connection) -> None:
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN power_w FLOAT"))
    md = sa.MetaData()
    experiments.to_metadata(md)
    md.create_all(conn)


Migration = tuple[int, str, Callable[[Connection], None]]

MIGRATIONS: tuple[Migration, ...] = (
    (1, "initial", _step1_initial),
    (2, "experiments-and-power", _step2_experiments_and_power),
)

LATEST_VERSION = MIGRATIONS[-1][0]
