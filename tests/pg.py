"""A real, throw-away PostgreSQL server for tests (Debian's ``postgresql`` package).

``PgServer.start(port_range)`` runs ``initdb`` into a fresh temp dir and ``pg_ctl start`` on a
free port, as the ``postgres`` OS user when running as root (PostgreSQL refuses root), with
its unix socket inside the temp dir. ``stop()`` shuts it down and removes the directory.

Missing binaries are an ERROR, never a skip: ``scripts/test`` apt-installs PostgreSQL.

Usage from any test package::

    from tests.pg import PgServer
    server = PgServer.start()
    url = server.create_database("mytest")   # postgresql+psycopg://... URL
    ...
    server.stop()
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PORT_RANGE = range(18500, 18600)


def pg_bin_dir() -> Path:
    """Directory holding initdb/pg_ctl (newest installed major version)."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if not candidates:
        found = shutil.which("initdb")
        if found:
            return Path(found).parent
        raise RuntimeError(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb); "
            "install them with `apt-get install -y postgresql` (scripts/test does this)"
        )
    return Path(candidates[-1]).parent


def _free_port(ports: range) -> int:
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port in {ports.start}-{ports.stop - 1}")


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root but there is no 'postgres' OS user") from exc
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class PgServer:
    """A running PostgreSQL cluster owned by the test session."""

    root: Path
    port: int
    bin_dir: Path
    user: str

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def sockdir(self) -> Path:
        return self.root / "sock"

    @classmethod
    def start(cls, ports: range = PORT_RANGE) -> PgServer:
        """initdb + pg_ctl start on a free port; returns once it accepts connections."""
        bin_dir = pg_bin_dir()
        prefix = _as_user()
        user = "postgres" if prefix else pwd.getpwuid(os.geteuid()).pw_name
        root = Path(tempfile.mkdtemp(prefix="servelab-pg-"))
        os.chmod(root, 0o755)
        (root / "sock").mkdir()
        if prefix:
            pw = pwd.getpwnam("postgres")
            os.chown(root, pw.pw_uid, pw.pw_gid)
            os.chown(root / "sock", pw.pw_uid, pw.pw_gid)
        server = cls(root=root, port=0, bin_dir=bin_dir, user=user)
        subprocess.run(
            [
                *prefix,
                str(bin_dir / "initdb"),
                "-D",
                str(server.datadir),
                "-U",
                user,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        last_err = ""
        for _attempt in range(5):
            server.port = _free_port(ports)
            opts = (
                f"-p {server.port} -k {server.sockdir} -c listen_addresses='127.0.0.1' "
                "-c fsync=off -c max_connections=60 -c shared_buffers=32MB"
            )
            proc = subprocess.run(
                [
                    *prefix,
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(server.datadir),
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(root / "server.log"),
                    "-o",
                    opts,
                    "start",
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode == 0:
                return server
            last_err = proc.stdout + proc.stderr
            time.sleep(0.5)
        log = (
            (root / "server.log").read_text(errors="replace")
            if (root / "server.log").exists()
            else ""
        )
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {last_err}\n{log[-2000:]}")

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL (TCP on loopback) for ``database``."""
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE name; returns its URL."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        subprocess.run(
            [
                *_as_user(),
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            text=True,
        )
        shutil.rmtree(self.root, ignore_errors=True)
