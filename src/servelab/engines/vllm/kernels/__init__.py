"""Which kernel vLLM runs a build's layers with, from vLLM's own selection code.

Pure: a build's declared quantization (:class:`~servelab.checkpoint.quant.QuantScheme`, as
``inspect`` parses ``config.json`` / ``hf_quant_config.json``), a GPU architecture (a hardware
profile's ``arch``), a vLLM version and the install (:class:`KernelEnv`) in; the backend vLLM
picks, what it computes in, and the source it was read from out (:class:`KernelChoice`).

* :mod:`~servelab.engines.vllm.kernels.layout`: the quantization keys vLLM derives from the
  declaration (``kNvfp4Static`` x ``kNvfp4Dynamic`` ...);
* :mod:`~servelab.engines.vllm.kernels.moe`: the fused-MoE oracles (Fp8, NvFp4, Mxfp4,
  Unquantized, WNA16);
* :mod:`~servelab.engines.vllm.kernels.linear`: the GEMM kernels of the other linear layers.

The rules were read in the wheels of vLLM 0.24.0 to 0.34.0 (:data:`READ_VERSIONS`). Where the
layout, the version, the platform or a step of the selection is one servelab has not read,
the answer says so (``known`` is False, ``reason`` says what is missing): never a guess.
The engine's own log line (``Using 'MARLIN' NvFp4 MoE backend out of potential backends``)
beats this answer when there is one; ``tests/engine/vllm/test_kernels.py`` checks this
module against every such line the project holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servelab.checkpoint.quant import QuantScheme
from servelab.engines.vllm.kernels.device import (
    READ_VERSIONS,
    Device,
    KernelEnv,
    read_version,
    version_tuple,
)
from servelab.engines.vllm.kernels.layout import Layout, UnknownLayout, vllm_layout
from servelab.engines.vllm.kernels.linear import LINEAR
from servelab.engines.vllm.kernels.moe import ORACLES, Backend, Ctx, Oracle
from servelab.hardware.profiles import PRECISIONS, KernelPath

__all__ = [
    "READ_VERSIONS",
    "BuildKernels",
    "Device",
    "KernelChoice",
    "KernelEnv",
    "build_kernels",
    "select_kernel",
]

MOE = "moe"
LINEAR_LAYER = "linear"


@dataclass(frozen=True)
class KernelChoice:
    """The kernel vLLM picks for one layer kind of one build, or why servelab cannot say."""

    layer: str  # "moe" (routed experts) or "linear" (an attention projection)
    known: bool
    backend: str | None  # as the engine logs it: "MARLIN", "CutlassFp8BlockScaledMMKernel"
    oracle: str | None  # "NvFp4", "Fp8", "Fp8LinearMethod", "NVFP4 GEMM", ...
    compute: str | None  # "fp4", "fp8", "bf16"; None where not read
    layout: str  # "NVFP4 W4A16 (kNvfp4Static x none)"
    tag: str  # "W4A16"
    arch: str
    version: str
    env: str
    source: str  # the vLLM files and functions the answer was read from
    reason: str  # why this backend (or why not known)
    refused: tuple[tuple[str, str], ...] = field(default=())  # earlier candidates, why not

    @property
    def path_name(self) -> str:
        """``MARLIN W4A16``, ``FLASHINFER_CUTLASS W4A4``, ``TRITON W8A8``; ``not known``."""
        return f"{self.backend} {self.tag}" if self.known and self.backend else "not known"

    @property
    def line(self) -> str:
        """One line for a terminal: what vLLM picks and why, or why servelab cannot say."""
        if not self.known:
            return f"{self.layer} kernel not known: {self.reason}"
        comp = f", computes in {self.compute.upper()}" if self.compute else ""
        return (f"{self.layer}: {self.path_name}{comp} (vLLM {self.version} on {self.arch}: "
                f"{self.reason})")

    def kernel_path(self) -> KernelPath | None:
        """The :class:`~servelab.hardware.profiles.KernelPath` the speed model reads, citing
        this answer's source; None when not known or the compute precision is not read."""
        if not self.known or self.backend is None or self.compute not in PRECISIONS:
            return None
        return KernelPath(self.path_name, str(self.compute),
                          f"vLLM {self.version} selection ({self.source}): {self.reason}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "layer": self.layer, "known": self.known, "backend": self.backend,
            "path": self.path_name, "oracle": self.oracle, "compute": self.compute,
            "layout": self.layout, "arch": self.arch, "version": self.version,
            "env": self.env, "source": self.source, "reason": self.reason,
            "refused": [list(r) for r in self.refused],
        }


@dataclass(frozen=True)
class BuildKernels:
    """The routed experts' and the attention projections' kernels of one build."""

    moe: KernelChoice
    linear: KernelChoice

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"moe": self.moe.to_dict(), "linear": self.linear.to_dict()}


def _unknown(layer: str, arch: str, version: str, env: KernelEnv, reason: str,
             layout: str = "", tag: str = "") -> KernelChoice:
    return KernelChoice(layer, False, None, None, None, layout, tag, arch, version,
                        env.describe(), "", reason)


def select_kernel(
    scheme: QuantScheme,
    *,
    arch: str,
    version: str,
    layer: str = MOE,
    platform: str = "cuda",
    env: KernelEnv | None = None,
) -> KernelChoice:
    """The backend vLLM ``version`` picks on ``arch`` for ``layer`` (``moe``: the routed
    experts; ``linear``: an attention projection) of a build declaring ``scheme``."""
    env = env or KernelEnv()
    if layer not in (MOE, LINEAR_LAYER):
        raise ValueError(f"layer must be {MOE!r} or {LINEAR_LAYER!r}, not {layer!r}")
    device = Device.of(arch, platform)
    if device is None:
        return _unknown(layer, arch, version, env,
                        f"{platform} {arch}: servelab has read vLLM's CUDA kernel selection only")
    read = read_version(version)
    if read is None:
        return _unknown(layer, arch, version, env,
                        f"vLLM {version}: its selection code was not read (read: "
                        f"{READ_VERSIONS[0]} to {READ_VERSIONS[-1]})")
    lay = vllm_layout(scheme, moe=layer == MOE)
    if isinstance(lay, UnknownLayout):
        return _unknown(layer, arch, read, env, f"layout not read: {lay.reason}")
    table = ORACLES if layer == MOE else LINEAR
    build = table.get(lay.family)
    if build is None:
        return _unknown(layer, arch, read, env,
                        f"{lay.label} {layer} layers: vLLM's selection not read",
                        lay.label, lay.tag)
    ctx = Ctx(device, lay, env, version_tuple(read))
    oracle = build(ctx)
    asked = env.moe_backend not in (None, "auto")
    if layer == MOE and asked and not oracle.forced_by.startswith("--moe-backend"):
        return _unknown(layer, arch, read, env,
                        f"--moe-backend {env.moe_backend} with the {oracle.name} oracle: not "
                        "reproduced (servelab reads explicit backends for NvFp4 and Fp8 only)",
                        lay.label, lay.tag)
    return _walk(ctx, layer, oracle, lay, read)


def _walk(ctx: Ctx, layer: str, oracle: Oracle, lay: Layout, version: str) -> KernelChoice:
    arch, env = ctx.device.arch, ctx.env
    if oracle.forced is not None:
        forced = [b for b in (*oracle.order, *oracle.requestable) if b.name == oracle.forced]
        if not forced:
            return _unknown(layer, arch, version, env,
                            f"{oracle.forced_by}: vLLM refuses to start or takes a backend "
                            f"servelab does not reproduce ({oracle.forced})", lay.label, lay.tag)
        why = forced[0].test(ctx)
        if why is not None:
            return _unknown(layer, arch, version, env,
                            f"{oracle.forced_by} asks for {oracle.forced} and vLLM refuses to "
                            f"start: {why}", lay.label, lay.tag)
        b = forced[0]
        return KernelChoice(layer, True, b.name, oracle.name, b.compute, lay.label, _tag(b, lay),
                            arch, version, env.describe(), f"{oracle.source}; {b.source}",
                            f"{b.name} asked for by {oracle.forced_by}")
    if not oracle.order:
        return _unknown(layer, arch, version, env,
                        f"{oracle.source}: this step of the selection is not reproduced",
                        lay.label, lay.tag)
    refused: list[tuple[str, str]] = []
    for b in oracle.order:
        why = b.test(ctx)
        if why is None:
            first = not refused
            reason = (f"{b.name} is the first {oracle.name} candidate" if first else
                      f"{b.name} is the first {oracle.name} candidate that accepts "
                      f"{lay.tag}; refused before it: "
                      + "; ".join(f"{n} ({r})" for n, r in refused))
            return KernelChoice(layer, True, b.name, oracle.name, b.compute, lay.label,
                                _tag(b, lay), arch, version, env.describe(),
                                f"{oracle.source}; {b.source}", reason, tuple(refused))
        refused.append((b.name, why))
    return _unknown(layer, arch, version, env,
                    f"no {oracle.name} backend servelab reproduces accepts {lay.label} on "
                    f"{arch} ({'; '.join(f'{n}: {r}' for n, r in refused)})",
                    lay.label, lay.tag)


def _tag(b: Backend, lay: Layout) -> str:
    """What the kernel runs: a weight-only kernel (Marlin) is W4A16/W8A16 whatever the
    checkpoint's activations."""
    return f"{lay.tag.split('A')[0]}A16" if b.weight_only else lay.tag


def build_kernels(
    scheme: QuantScheme, *, arch: str, version: str, platform: str = "cuda",
    env: KernelEnv | None = None,
) -> BuildKernels:
    """Both layer kinds of one build (what ``plan`` and ``choose`` will show per build)."""
    return BuildKernels(
        moe=select_kernel(scheme, arch=arch, version=version, layer=MOE, platform=platform,
                          env=env),
        linear=select_kernel(scheme, arch=arch, version=version, layer=LINEAR_LAYER,
                             platform=platform, env=env),
    )
