"""Measure this machine's memory bandwidth and matmul rate (or a GPU's, by a command).

Host probe: numpy large-array copy (``np.copyto``) several times, counting bytes read +
written per copy (the STREAM "copy" convention), and a float32 matmul through numpy's BLAS
(2·n³ FLOP per product). Best and median over the repetitions are reported; the best is
the ceiling a roofline uses.

GPU probe: a user-given command (an argument list, never a shell string) that prints JSON
on stdout::

    {"device": "NVIDIA H200",
     "copy_bandwidth_bytes_per_s": [4.31e12, ...] | 4.31e12,
     "matmul_flops_per_s": {"bf16": [7.9e14, ...] | 7.9e14, ...},
     "kernel_launches_per_s": [1.2e5, ...] | 1.2e5}          # optional

``python -m servelab.hardware.gpu_probe`` is such a command (needs torch with CUDA). The
optional launch rate is the host's side of a GPU: how many tiny kernels per second Python
and the CUDA driver launch back to back. A prefill longer than vLLM's largest CUDA graph
waits on it (on the H200 a 48-layer MoE's 2,048-token prefill kept the GPU busy 34 ms of
104 ms, and took 71-125 ms on different lent hosts: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from servelab.errors import HardwareProfileError, UsageError
from servelab.hardware.cpu_isa import CpuIsa, this_cpu

SCHEMA = "servelab.probe/1"


@dataclass(frozen=True)
class ProbeStat:
    """Repeated measurements of one rate (per second)."""

    samples: tuple[float, ...]
    unit: str

    @property
    def best(self) -> float:
        """The highest rate seen (the ceiling)."""
        return max(self.samples)

    @property
    def median(self) -> float:
        """The median rate."""
        return statistics.median(self.samples)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "unit": self.unit,
            "best": self.best,
            "median": self.median,
            "samples": list(self.samples),
        }


@dataclass(frozen=True)
class ProbeResult:
    """What one probe measured on one device."""

    device: str
    method: str
    copy_bandwidth: ProbeStat
    matmul: Mapping[str, ProbeStat]
    params: Mapping[str, Any] = field(default_factory=dict)
    measured_at: str = ""
    #: Tiny kernels launched per second from Python (a GPU probe's host side), if measured.
    launches: ProbeStat | None = None
    #: A host probe's CPU features (the engines pick CPU kernels and KV blocks by them).
    cpu_isa: CpuIsa | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (schema ``servelab.probe/1``)."""
        out = {
            "schema": SCHEMA,
            "device": self.device,
            "method": self.method,
            "measured_at": self.measured_at,
            "params": dict(self.params),
            "copy_bandwidth_bytes_per_s": self.copy_bandwidth.to_dict(),
            "matmul_flops_per_s": {k: v.to_dict() for k, v in self.matmul.items()},
        }
        if self.launches is not None:
            out["kernel_launches_per_s"] = self.launches.to_dict()
        if self.cpu_isa is not None:
            out["cpu_isa"] = self.cpu_isa.to_dict()
        return out


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def measure_copy_bandwidth(nbytes: int = 256 << 20, reps: int = 7) -> ProbeStat:
    """Bytes moved per second by ``np.copyto`` of an ``nbytes`` array (read + write)."""
    if nbytes < 1 << 20 or reps < 1:
        raise UsageError("copy probe needs at least 1 MiB and one repetition")
    n = nbytes // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch pages before timing
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        dt = time.perf_counter() - t0
        samples.append(2 * n * 8 / dt)
    return ProbeStat(tuple(samples), "bytes/s")


def measure_matmul(n: int = 1024, reps: int = 5, dtype: str = "float32") -> ProbeStat:
    """FLOP/s of an ``n`` x ``n`` matmul through numpy's BLAS (2·n³ per product)."""
    if n < 16 or reps < 1:
        raise UsageError("matmul probe needs n >= 16 and one repetition")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    np.matmul(a, b)  # warm up the BLAS
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.matmul(a, b)
        dt = time.perf_counter() - t0
        samples.append(2.0 * n**3 / dt)
    return ProbeStat(tuple(samples), "FLOP/s")


def probe_host(
    *, copy_bytes: int = 256 << 20, copy_reps: int = 7, matmul_n: int = 1024, matmul_reps: int = 5
) -> ProbeResult:
    """Measure this CPU's copy bandwidth and float32 matmul rate."""
    bw = measure_copy_bandwidth(copy_bytes, copy_reps)
    mm = measure_matmul(matmul_n, matmul_reps)
    return ProbeResult(
        device=f"host {platform.machine()} {platform.processor() or platform.node()}".strip(),
        method="numpy copyto + numpy matmul (BLAS)",
        copy_bandwidth=bw,
        matmul={"fp32": mm},
        params={
            "copy_bytes": copy_bytes,
            "copy_reps": copy_reps,
            "matmul_n": matmul_n,
            "matmul_reps": matmul_reps,
            "numpy": np.__version__,
        },
        measured_at=_now(),
        cpu_isa=this_cpu(),
    )


def _stat(value: Any, unit: str, where: str) -> ProbeStat:
    vals = value if isinstance(value, list) else [value]
    out: list[float] = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise HardwareProfileError(f"probe output {where} must be positive numbers, got {v!r}")
        out.append(float(v))
    if not out:
        raise HardwareProfileError(f"probe output {where} is empty")
    return ProbeStat(tuple(out), unit)


def parse_probe_output(text: str, *, command: Sequence[str]) -> ProbeResult:
    """Parse a probe command's JSON stdout (see module docs)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HardwareProfileError(
            f"probe command {command[0]!r} did not print JSON on stdout: {exc}"
        ) from exc
    if not isinstance(data, Mapping):
        raise HardwareProfileError(f"probe command {command[0]!r} printed JSON that is no object")
    if "copy_bandwidth_bytes_per_s" not in data:
        raise HardwareProfileError(
            f"probe command {command[0]!r} output lacks copy_bandwidth_bytes_per_s"
        )
    bw = _stat(data["copy_bandwidth_bytes_per_s"], "bytes/s", "copy_bandwidth_bytes_per_s")
    mm_raw = data.get("matmul_flops_per_s", {})
    if not isinstance(mm_raw, Mapping):
        raise HardwareProfileError("probe output matmul_flops_per_s must be an object")
    mm = {str(k): _stat(v, "FLOP/s", f"matmul_flops_per_s.{k}") for k, v in mm_raw.items()}
    params = data.get("params", {})
    launches = data.get("kernel_launches_per_s")
    return ProbeResult(
        device=str(data.get("device", "unknown device")),
        method=f"command: {' '.join(command)}",
        copy_bandwidth=bw,
        matmul=mm,
        params=dict(params) if isinstance(params, Mapping) else {},
        measured_at=_now(),
        launches=None
        if launches is None
        else _stat(launches, "launches/s", "kernel_launches_per_s"),
    )


def probe_command(command: Sequence[str], *, timeout_s: float = 600.0) -> ProbeResult:
    """Run a probe command (argument list) and parse its JSON stdout."""
    if not command:
        raise UsageError("probe command is empty")
    try:
        proc = subprocess.run(  # argument list, never a shell string
            list(command), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise HardwareProfileError(f"probe command not found: {command[0]!r}") from exc
    except subprocess.TimeoutExpired as exc:
        raise HardwareProfileError(
            f"probe command {command[0]!r} did not finish in {timeout_s:.0f} s"
        ) from exc
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
        raise HardwareProfileError(
            f"probe command {command[0]!r} exited {proc.returncode}: {tail[0]}"
        )
    return parse_probe_output(proc.stdout, command=command)


def _saved(stat: Mapping[str, Any], unit: str) -> ProbeStat:
    """A :class:`ProbeStat` from its JSON form (``ProbeStat.to_dict``)."""
    return ProbeStat(tuple(float(x) for x in stat["samples"]), unit)


def load_probe(data: Mapping[str, Any]) -> ProbeResult:
    """A :class:`ProbeResult` from its JSON form (``to_dict``)."""
    try:
        bw = data["copy_bandwidth_bytes_per_s"]
        mm = data.get("matmul_flops_per_s", {})
        return ProbeResult(
            device=str(data.get("device", "")),
            method=str(data.get("method", "")),
            copy_bandwidth=_saved(bw, "bytes/s"),
            matmul={str(k): _saved(v, "FLOP/s") for k, v in mm.items()},
            params=dict(data.get("params", {})),
            measured_at=str(data.get("measured_at", "")),
            launches=None
            if (ln := data.get("kernel_launches_per_s")) is None
            else _saved(ln, "launches/s"),
            cpu_isa=CpuIsa.from_dict(data["cpu_isa"], source=f"probe of {data.get('device')}"
                                     f" ({data.get('measured_at', '')})")
            if data.get("cpu_isa") else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HardwareProfileError(f"probe JSON is malformed: {exc}") from exc
