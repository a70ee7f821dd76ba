"""What vLLM's kernel selection reads besides the build: the GPU, the version, the install.

Pure values. :class:`Device` is a hardware profile's ``arch`` (``sm_121``) as vLLM's platform
sees it: a compute capability (``121``) and its family (``12``: vLLM's
``is_device_capability_family(120)`` is ``capability // 10 == 12``,
``vllm/platforms/interface.py``). :class:`KernelEnv` is what the selection code reads from the
installed packages and the environment; its defaults are a plain ``pip install vllm==X`` of a
read version (flashinfer-python and humming-kernels are in the wheel's Requires-Dist, DeepGEMM
is vendored as ``vllm.third_party.deep_gemm``), tensor parallel only (no expert or data
parallel, no LoRA), ``--moe-backend auto`` and ``--linear-backend auto``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servelab.errors import UsageError

#: Releases whose wheels were read (their selection functions compared function by function
#: across every release in the range); a version outside is "not known", never guessed.
READ_VERSIONS: tuple[str, ...] = (
    "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
    "0.33.0", "0.34.0",
)  # fmt: skip

_SM = re.compile(r"^sm_?(\d{2,3})[a-z]?$", re.IGNORECASE)


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"0.26.0"`` -> ``(0, 26, 0)`` (a ``v`` prefix and rc/dev suffixes are ignored)."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not m:
        raise UsageError(f"engine version {version!r} is not of the form MAJOR.MINOR[.PATCH]")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def read_version(version: str) -> str | None:
    """The read release ``version`` is (``0.26`` and ``v0.26.0`` are ``0.26.0``), else None."""
    v = version_tuple(version)
    for r in READ_VERSIONS:
        if version_tuple(r) == v:
            return r
    return None


@dataclass(frozen=True)
class Device:
    """A CUDA GPU as vLLM's platform layer sees it."""

    arch: str
    capability: int

    @classmethod
    def of(cls, arch: str, platform: str = "cuda") -> Device | None:
        """``sm_121`` on ``cuda`` -> ``Device("sm_121", 121)``; None for anything else (a CPU,
        Apple or ROCm profile: servelab has read vLLM's CUDA selection only)."""
        m = _SM.match(arch.strip())
        if platform != "cuda" or not m:
            return None
        return cls(arch, int(m.group(1)))

    @property
    def family(self) -> int:
        """``is_device_capability_family``'s family: 9 (Hopper), 10 (B200/GB200), 12 (RTX
        Blackwell, GB10)."""
        return self.capability // 10

    def at_least(self, capability: int) -> bool:
        """``has_device_capability(c)``: this capability or newer."""
        return self.capability >= capability


@dataclass(frozen=True)
class KernelEnv:
    """What the selection reads from the install and the environment (defaults: a plain
    ``pip install vllm`` of a read release, started with no kernel flags)."""

    flashinfer: bool = True
    """flashinfer-python importable (a Requires-Dist of every read wheel); the project's H200
    runs left it out (benchmarks/gpu/prepare_wheels.sh)."""
    humming: bool = True
    """humming-kernels importable (a Requires-Dist since 0.24.0; left out on the H200 runs)."""
    use_deep_gemm: bool = True
    """``VLLM_USE_DEEP_GEMM`` (vLLM's default 1; DeepGEMM is vendored in the wheel)."""
    deep_gemm_env_set: bool = False
    """Whether ``VLLM_USE_DEEP_GEMM`` was set explicitly: vLLM's FP8 MoE selection treats an
    explicit 1 as "use DeepGEMM" and an explicit 0 as "never" (``select_fp8_moe_backend``)."""
    text_model_type: str | None = None
    """The text config's ``model_type`` (``qwen3_5_moe_text``): vLLM turns DeepGEMM off on
    Blackwell for some (``should_auto_disable_deep_gemm``)."""
    moe_backend: str | None = None
    """``--moe-backend`` as given (``marlin``, ``flashinfer_cutlass``, ``flashinfer_b12x``);
    None is vLLM's ``auto``. vLLM then takes that backend or refuses to start."""

    @classmethod
    def from_environ(cls, env: dict[str, str], **kw: object) -> KernelEnv:
        """The defaults with ``VLLM_USE_DEEP_GEMM`` as an engine's environment sets it."""
        raw = env.get("VLLM_USE_DEEP_GEMM")
        flags = {"use_deep_gemm": raw is None or raw.strip() not in ("0", ""),
                 "deep_gemm_env_set": raw is not None}
        return cls(**{**flags, **kw})  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line naming what differs from a plain install."""
        parts = []
        if not self.flashinfer:
            parts.append("no flashinfer")
        if not self.humming:
            parts.append("no humming-kernels")
        if self.deep_gemm_env_set:
            parts.append(f"VLLM_USE_DEEP_GEMM={int(self.use_deep_gemm)}")
        if self.moe_backend:
            parts.append(f"--moe-backend {self.moe_backend}")
        return ", ".join(parts) or "a plain pip install of vLLM, no kernel flags"
