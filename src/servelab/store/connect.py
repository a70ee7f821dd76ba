"""Where the results database is and how servelab connects to it: the data directory, the
database URL (``--db``, ``$SERVELAB_DB``, the default SQLite file), the SQLAlchemy engine (a
SQLite file checked to be one, its pragmas), and a display form of a URL without its secret.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import platformdirs
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from servelab.errors import InputError, StoreError, StoreFileError, UsageError
from servelab.redact import redact_text

__all__ = ["ENV_DB", "ENV_HOME", "data_dir", "display_url", "make_engine",
           "require_sqlite_file", "resolve_url"]

ENV_DB = "SERVELAB_DB"
ENV_HOME = "SERVELAB_HOME"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def data_dir() -> Path:
    """servelab's data directory: ``$SERVELAB_HOME`` or the platform's user data dir."""
    home = os.environ.get(ENV_HOME)
    if home:
        return Path(home)
    return Path(platformdirs.user_data_dir("servelab"))


def resolve_url(url: str | None = None) -> str:
    """Turn ``--db`` / ``$SERVELAB_DB`` / the default into a SQLAlchemy URL string."""
    raw = url or os.environ.get(ENV_DB) or str(data_dir() / "results.db")
    if "://" not in raw:
        return f"sqlite:///{Path(raw).expanduser().absolute()}"
    if raw.startswith("postgres://"):
        raw = "postgresql://" + raw[len("postgres://") :]
    if raw.startswith("postgresql://"):
        raw = "postgresql+psycopg://" + raw[len("postgresql://") :]
    return raw


def display_url(url: str) -> str:
    """A URL safe to print (password hidden)."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return redact_text(url)



def require_sqlite_file(url: str) -> None:
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        return  # make_engine says what is wrong with it
    db = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and db and db != ":memory:" \
            and not Path(db).exists():
        raise InputError("no results database here (check --db or $SERVELAB_DB; "
                         "'servelab bench' and 'servelab run' record one)", path=db)


def make_engine(url: str) -> Engine:
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise UsageError(f"not a database URL: {display_url(url)}") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        db = parsed.database or ""
        if db and db != ":memory:":
            _check_sqlite_file(Path(db))
        engine = sa.create_engine(url, connect_args={"timeout": 60})
        _sqlite_events(engine)
        return engine
    if backend == "postgresql":
        try:
            return sa.create_engine(url, pool_pre_ping=True)
        except (ImportError, sa.exc.NoSuchModuleError) as exc:
            raise UsageError(
                f"no driver for {display_url(url)} ({exc}); use postgresql:// (psycopg 3)"
            ) from exc
    raise UsageError(f"unsupported database {backend!r} (use a SQLite path or postgresql:// URL)")


def _check_sqlite_file(path: Path) -> None:
    if path.is_dir():
        raise StoreFileError("is a directory, not a results database", path=path)
    if path.exists():
        with path.open("rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
        if head and head != _SQLITE_MAGIC:
            raise StoreFileError(
                "not a SQLite database (corrupted or foreign file); move it away or pass --db",
                path=path,
            )
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the database directory: {exc.strerror}", path=path.parent
            ) from exc


def _sqlite_events(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's BEGIN below own the transaction (pysqlite's own is unreliable).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout = 60000")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("servelab_write") else "BEGIN")
