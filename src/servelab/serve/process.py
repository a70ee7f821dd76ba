"""The engine as a child process: start, watch, wait until ready, stop. No orphans, ever.

The engine runs in its own session/process group (``start_new_session``) from an
argument list. A reader thread copies its output to the run's log file and feeds the
live log parser of the spec's engine (:meth:`servelab.engines.base.Engine.log_parser`).
:func:`start_engine` returns only once the engine says it serves
(:meth:`~servelab.engines.base.Engine.ready`: for vLLM, ``/health`` answers and
``/v1/models`` lists the served model); on *any* failure (early exit, timeout, Ctrl-C,
a bug) it stops the whole process group before raising.
:meth:`EngineProcess.stop` sends SIGTERM to the group, then SIGKILL after a grace
period, and waits until no process of the group is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from servelab import redact
from servelab.engines import get_engine
from servelab.engines.facts import TRACEBACK_LINE, EngineFacts, Phase
from servelab.errors import EngineError, EngineNotFoundError, EngineStartupError, PortInUseError

__all__ = [
    "EngineProcess",
    "LaunchSpec",
    "PhaseCallback",
    "RunningEngine",
    "group_alive",
    "pick_free_port",
    "port_is_free",
    "start_engine",
]

PID_FILE = "engine.pid"

PhaseCallback = Callable[[Phase, float], None]
"""Called with the new phase and the seconds since the engine was started."""

_NOISE = (
    "Route: ",
    "nanobind:",
    " - leaked ",
    "Loading safetensors checkpoint shards",
    "warnings.warn(",
    "FutureWarning:",
    "DeprecationWarning:",
    "resource_tracker:",
    "NUMA binding:",
)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one engine process."""

    argv: tuple[str, ...]
    host: str
    port: int
    log_path: Path
    served_model_name: str
    env: Mapping[str, str] = field(default_factory=dict)
    auto_env: Mapping[str, str] = field(default_factory=dict)
    """The part of ``env`` servelab computed (the engine's :meth:`auto_env`), for the record."""
    model_dir: Path | None = None
    startup_timeout_s: float = 900.0
    stop_grace_s: float = 20.0
    cwd: Path | None = None
    engine: str = "vllm"  # registry name: picks the log parser and the readiness check

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server (``0.0.0.0`` is reached via loopback)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


def exit_text(rc: int) -> str:
    """``with status 1``, or ``on signal SIGSEGV (-11)`` for a process a signal ended."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"on signal {name} ({rc})"
    return f"with status {rc}"


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` and we could bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # Like the engine's server: a port in TIME_WAIT is free, a listener is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_free_port(
    host: str = "127.0.0.1", *, start: int | None = None, end: int | None = None
) -> int:
    """A port nobody listens on: the first free one in ``[start, end]`` or one the OS picks."""
    if start is not None:
        for port in range(start, (end if end is not None else start + 99) + 1):
            if port_is_free(host, port):
                return port
        raise PortInUseError(f"no free port on {host} in {start}-{end}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def group_alive(pgid: int) -> bool:
    """True while any process of process group ``pgid`` exists (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_executable(argv0: str) -> None:
    if os.sep in argv0:
        p = Path(argv0)
        if not p.exists():
            raise EngineNotFoundError("engine executable does not exist", path=p)
        if not os.access(p, os.X_OK):
            raise EngineNotFoundError("engine executable is not executable", path=p)
    elif shutil.which(argv0) is None:
        raise EngineNotFoundError(f"engine executable {argv0!r} is not on PATH")


def secret_values(spec: LaunchSpec) -> tuple[str, ...]:
    """Values that must never reach a log or record: API keys, tokens (argv and env)."""
    return redact.secret_values(spec.argv, spec.env)


class EngineProcess:
    """A started engine. Use :func:`start_engine`; stop with :meth:`stop` or ``with``."""

    def __init__(self, spec: LaunchSpec, proc: subprocess.Popen[bytes], log_fh: IO[str]) -> None:
        self.spec = spec
        self._proc = proc
        self.pgid = proc.pid  # leader of its own session: pgid == pid
        self._log_fh = log_fh
        self._engine = get_engine(spec.engine)
        self._parser = self._engine.log_parser()
        self._secrets = secret_values(spec)
        self._lock = threading.Lock()
        self._tail: deque[str] = deque(maxlen=400)
        self._phases: deque[Phase] = deque()
        self.started_at = time.monotonic()
        self.ready_s: float | None = None
        self._stopped = False
        self._reader = threading.Thread(
            target=self._read, name=f"engine-log-{proc.pid}", daemon=True
        )
        self._reader.start()

    # -- output ----------------------------------------------------------------------
    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in iter(self._proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            for secret in self._secrets:
                line = line.replace(secret, redact.REDACTED)
            with self._lock:
                self._log_fh.write(line)
                self._log_fh.flush()
                self._tail.append(line.rstrip("\n"))
                phase = self._parser.feed(line)
                if phase is not None:
                    self._phases.append(phase)
        with self._lock:
            self._log_fh.flush()

    def _drain_phases(self) -> list[Phase]:
        with self._lock:
            out = list(self._phases)
            self._phases.clear()
        return out

    @property
    def pid(self) -> int:
        """Process id of the engine's main process."""
        return self._proc.pid

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the engine."""
        return self.spec.base_url

    @property
    def log_path(self) -> Path:
        """The log file the engine's output is copied to."""
        return self.spec.log_path

    @property
    def model_dir(self) -> Path | None:
        """Local checkpoint directory served, when local."""
        return self.spec.model_dir

    @property
    def served_model_name(self) -> str:
        """The model name clients put in requests."""
        return self.spec.served_model_name

    @property
    def facts(self) -> EngineFacts:
        """Facts parsed from the engine's log so far."""
        with self._lock:
            return self._parser.facts()

    @property
    def phase(self) -> Phase:
        """The latest startup phase seen (READY once :func:`start_engine` returned)."""
        with self._lock:
            return Phase.READY if self.ready_s is not None else self._parser.phase

    def returncode(self) -> int | None:
        """The main process's exit status, or ``None`` while it runs."""
        return self._proc.poll()

    @property
    def alive(self) -> bool:
        """True while the main process runs."""
        return self._proc.poll() is None

    def log_tail(self, n: int = 15) -> list[str]:
        """The last ``n`` relevant output lines (progress bars and route lists left out)."""
        with self._lock:
            lines = [
                ln
                for ln in self._tail
                if ln.strip() and not any(x in ln for x in _NOISE) and not TRACEBACK_LINE.match(ln)
            ]
        return lines[-n:]

    def check_alive(self) -> None:
        """Raise :class:`EngineError` (with the engine's error and log tail) if it died."""
        rc = self._proc.poll()
        if rc is not None:
            self._reader.join(timeout=5)
            raise EngineError(
                self._death_message(f"engine exited {exit_text(rc)}"), path=self.log_path
            )

    def _death_message(self, head: str) -> str:
        facts = self.facts
        parts = [head]
        root = facts.root_error()
        if root is not None:
            parts.append("engine error: " + root.text)
        tail = self.log_tail(8)
        if tail:
            parts.append("last log lines:\n  " + "\n  ".join(tail))
        return "\n".join(parts)

    # -- readiness -------------------------------------------------------------------
    def wait_ready(self, on_phase: PhaseCallback | None = None, poll_s: float = 0.5) -> None:
        """Block until ``/health`` is 200 and ``/v1/models`` lists the served model.

        Raises :class:`EngineStartupError` when the engine exits or the startup timeout
        passes (the caller stops the engine).
        """
        deadline = self.started_at + self.spec.startup_timeout_s
        base = self.base_url
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                for phase in self._drain_phases():
                    if on_phase is not None:
                        on_phase(phase, time.monotonic() - self.started_at)
                rc = self._proc.poll()
                if rc is not None:
                    self._reader.join(timeout=5)
                    for phase in self._drain_phases():
                        if on_phase is not None:
                            on_phase(phase, time.monotonic() - self.started_at)
                    raise EngineStartupError(
                        self._death_message(f"engine exited early {exit_text(rc)}"),
                        path=self.log_path,
                    )
                if self._ready(client, base):
                    break
                if time.monotonic() > deadline:
                    raise EngineStartupError(
                        self._death_message(
                            f"engine not ready after {self.spec.startup_timeout_s:.0f} s "
                            f"(last phase: {self.phase.label})"
                        ),
                        path=self.log_path,
                    )
                time.sleep(poll_s)
        self.ready_s = time.monotonic() - self.started_at
        if on_phase is not None:
            on_phase(Phase.READY, self.ready_s)

    def _ready(self, client: httpx.Client, base: str) -> bool:
        return self._engine.ready(client, base, self.spec.served_model_name)

    # -- stopping --------------------------------------------------------------------
    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace_s``; wait until it is gone.

        Safe to call more than once and after the engine died. Returns the main
        process's exit status.
        """
        # A second Ctrl-C while stopping must not leave the engine behind.
        saved = _ignore_interrupts()
        try:
            return self._stop(grace_s)
        finally:
            _restore_interrupts(saved)

    def _stop(self, grace_s: float | None) -> int | None:
        grace = self.spec.stop_grace_s if grace_s is None else grace_s
        if not self._stopped:
            self._stopped = True
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (
                self._proc.poll() is None or group_alive(self.pgid)
            ):
                time.sleep(0.1)
            if self._proc.poll() is None or group_alive(self.pgid):
                self._signal(signal.SIGKILL)
        # Reap the leader and wait for every member of the group to disappear.
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self._proc.wait()
        end = time.monotonic() + 30
        while group_alive(self.pgid) and time.monotonic() < end:
            self._signal(signal.SIGKILL)
            time.sleep(0.1)
        self._reader.join(timeout=10)
        if self._proc.stdout is not None and not self._reader.is_alive():
            self._proc.stdout.close()
        with self._lock:
            if not self._log_fh.closed:
                self._log_fh.close()
        return self._proc.returncode

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_Handlers = dict[int, Any]


def _ignore_interrupts() -> _Handlers:
    if threading.current_thread() is not threading.main_thread():
        return {}
    saved: _Handlers = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        saved[sig] = signal.signal(sig, signal.SIG_IGN)
    return saved


def _restore_interrupts(saved: _Handlers) -> None:
    for sig, handler in saved.items():
        signal.signal(sig, handler)


RunningEngine = EngineProcess
"""What the ``vllm_engine`` test fixture and ``servelab serve`` hand out: a ready engine."""


def spawn(spec: LaunchSpec) -> EngineProcess:
    """Start the engine process (not waiting for readiness). Checks port and executable."""
    if not spec.argv:
        raise EngineError("empty engine command")
    _check_executable(spec.argv[0])
    if not port_is_free(spec.host, spec.port):
        raise PortInUseError(f"port {spec.port} on {spec.host} is already in use")
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fh = spec.log_path.open("w", encoding="utf-8")
    env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            list(spec.argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=spec.cwd,
            start_new_session=True,
        )
    except FileNotFoundError:
        log_fh.close()
        raise EngineNotFoundError("engine executable does not exist", path=spec.argv[0]) from None
    except OSError as exc:
        log_fh.close()
        raise EngineError(f"cannot start the engine: {exc}", path=spec.argv[0]) from None
    # The process-group id, for people and tools that must find (or reap) the engine.
    (spec.log_path.parent / PID_FILE).write_text(f"{proc.pid}\n", encoding="utf-8")
    return EngineProcess(spec, proc, log_fh)


def start_engine(spec: LaunchSpec, on_phase: PhaseCallback | None = None) -> EngineProcess:
    """Start the engine and wait until it serves; on any failure nothing is left running."""
    engine = spawn(spec)
    try:
        if on_phase is not None:
            on_phase(Phase.STARTING, 0.0)
        engine.wait_ready(on_phase)
    except BaseException:
        engine.stop(grace_s=min(spec.stop_grace_s, 5.0))
        raise
    return engine


def stop_all(engines: Sequence[EngineProcess]) -> None:
    """Stop several engines (each stop is independent: one failing does not skip others)."""
    for eng in engines:
        with contextlib.suppress(Exception):
            eng.stop()
