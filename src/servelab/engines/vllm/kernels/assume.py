"""The kernel path a plan assumes for a build on vLLM, from vLLM's own selection
(:func:`~servelab.engines.vllm.kernels.select_kernel`), and the problems reported with it.

For a MoE model the path is the routed experts' (they are most of the bytes decode reads and
of the FLOPs prefill computes); for a dense model the linear layers'. Where servelab has not
read the selection for the build's layout, the version or the platform, the plan takes the
hardware profile's table and says why.

The speed model calibrates a path under a name: the profile table's where its entry for the
scheme computes in the same precision as vLLM's choice (the shipped priors and stored runs
recorded the path under the table's name, e.g. ``TRITON Fp8 W8A8``), else vLLM's own name (a
path no run has recorded, such as FlashInfer's CUTLASS FP4 MoE on a GB10, is then calibrated
with the pooled runs of the hardware and the plan's interval says so).

Reported risks (:data:`RISKS`) are kernel paths that public reports say give wrong output or
fail on a device family, each with its sources: ``choose`` weighs them when builds tie.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servelab.checkpoint.quant import QuantScheme
from servelab.engines.vllm.kernels import (
    LINEAR_LAYER,
    MOE,
    KernelChoice,
    KernelEnv,
    build_kernels,
)
from servelab.engines.vllm.kernels.device import Device
from servelab.hardware.profiles import HardwareProfile
from servelab.sizing.kernels import ENGINE, KernelAssumption, profile_assumption
from servelab.sizing.weights import Weights

__all__ = ["RISKS", "KernelRisk", "plan_kernels", "risk_of"]


@dataclass(frozen=True)
class KernelRisk:
    """A kernel path reported to give wrong output or fail on a device family."""

    backends: tuple[str, ...]  # as vLLM logs them
    oracle: str  # "NvFp4"
    family: int  # Device.family: 12 for SM12x (GB10, RTX Blackwell)
    text: str
    sources: tuple[str, ...]

    @property
    def line(self) -> str:
        """The risk and its sources."""
        return f"{self.text} ({'; '.join(self.sources)})"


RISKS: tuple[KernelRisk, ...] = (
    KernelRisk(
        ("FLASHINFER_CUTLASS", "VLLM_CUTLASS"), "NvFp4", 12,
        "native FP4 MoE on SM12x is reported to give garbage output until patched (a DGX "
        "Spark answering '!!!!' on SM121; the CUTLASS grouped-GEMM FP4 MoE backends on "
        "SM120), and NVIDIA's own DGX Spark command for its Qwen3.6 NVFP4 build passes "
        "--moe-backend marlin",
        ("https://ai-muninn.com/en/blog/part1-why-your-dgx-spark-says-exclamation-marks "
         "(2026-03-17)",
         "'NVFP4 MoE on SM120 (RTX PRO 6000 Blackwell): Full Debug Report', r/LocalLLaMA, "
         "2026-03-13 (https://reddit.sentinel-team.org/posts/1roqkw4/snapshots/"
         "2026-03-13T23%3A00%3A09.503181Z)",
         "the nvidia/Qwen3.6-35B-A3B-NVFP4 model card's DGX Spark command "
         "(https://huggingface.co/nvidia/Qwen3.6-35B-A3B-NVFP4)"),
    ),
)


def risk_of(choice: KernelChoice, arch: str, platform: str = "cuda") -> KernelRisk | None:
    """The reported risk of ``choice`` on ``arch``, if any."""
    device = Device.of(arch, platform)
    if device is None or not choice.known or choice.backend is None:
        return None
    for r in RISKS:
        if choice.backend in r.backends and choice.oracle == r.oracle and \
                device.family == r.family:
            return r
    return None


def plan_kernels(quant: QuantScheme, weights: Weights, hardware: HardwareProfile,
                 version: str, *, model_type: str | None = None,
                 env: KernelEnv | None = None) -> KernelAssumption:
    """The kernel path vLLM ``version`` takes for ``weights`` (declaring ``quant``) on
    ``hardware``: its own selection where servelab read it, else the profile's table."""
    env = env or KernelEnv(text_model_type=model_type)
    kernels = build_kernels(quant, arch=hardware.arch, version=version,
                            platform=hardware.platform, env=env)
    choice = kernels.moe if weights.moe else kernels.linear
    layers = {MOE: kernels.moe.to_dict(), LINEAR_LAYER: kernels.linear.to_dict()} \
        if weights.moe else {LINEAR_LAYER: kernels.linear.to_dict()}
    path = choice.kernel_path()
    if path is None:
        why = (f"vLLM {version}'s {choice.layer} kernel for this build is not known to "
               f"servelab ({choice.reason})" if not choice.known else
               f"vLLM {version} takes {choice.path_name} here, whose compute precision "
               "servelab has not read")
        return replace(profile_assumption(hardware, weights, why), layers=layers)
    table = hardware.kernel_path(weights.scheme, moe=weights.moe)
    label = table.key if table.compute == path.compute else path.name
    path = replace(path, source=choice.source,
                   calibration=label if label != path.name else "")
    risk = risk_of(choice, hardware.arch, hardware.platform)
    why = choice.reason.split("; refused before it:")[0]
    refused = f" ({len(choice.refused)} tried before it refuse it)" if choice.refused else ""
    reason = (f"vLLM {choice.version} on {choice.arch} for the "
              f"{'routed experts' if weights.moe else 'linear layers'}, "
              f"{choice.layout}: {why}{refused}; read in {choice.source}")
    return KernelAssumption(path, ENGINE, reason, risk.line if risk else None, layers)
