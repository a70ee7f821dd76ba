"""What planning needs from a checkpoint's weights, taken from ``inspect``'s report.

:class:`Weights` is a small frozen value so that prediction stays pure and testable; it
is built from a :class:`~servelab.checkpoint.report.CheckpointReport` by
:func:`weights_from_report`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servelab.errors import ConfigError

if TYPE_CHECKING:
    from servelab.checkpoint.quant import QuantScheme
    from servelab.checkpoint.report import CheckpointReport

# Weight schemes, by how an engine can compute with them.
# Roles vLLM keeps whole on every tensor-parallel rank.
REPLICATED_ROLES = ("norm", "router", "unknown")

SCHEMES = ("bf16", "fp8", "fp8a16", "nvfp4", "nvfp4a16", "mxfp4", "int4", "int8")


@dataclass(frozen=True)
class Weights:
    """Bytes and parameters of a checkpoint as decode and prefill see them.

    ``decode_bytes_per_token`` is inspect's definition (non-expert weights touched + top-k/E
    of routed experts, scales included, one embedding row; no vision, no MTP).
    """

    name: str
    resident_bytes: int
    decode_bytes_per_token: int
    routed_expert_bytes: int
    active_params: int
    total_params: int
    scheme: str
    quant_label: str
    num_experts: int
    experts_per_token: int
    routed_expert_bits: float | None
    mtp_tensors: int
    mtp_bytes: int
    vision_bytes: int
    source: str
    lm_head_params: int = 0
    embedding_bytes: int = 0
    lm_head_bytes: int = 0
    replicated_bytes: int = 0
    routed_expert_params: int = 0  # logical weight elements of every routed expert

    def _per_token(self, routed: int) -> int:
        """The top-k / E of ``routed`` (a routed-expert total) one token touches."""
        return routed * self.experts_per_token // self.num_experts if self.moe else 0

    @property
    def active_routed_params(self) -> int:
        """Routed-expert parameters one token multiplies by (top-k of E experts)."""
        return self._per_token(self.routed_expert_params)

    @property
    def moe(self) -> bool:
        """Whether the model routes tokens to experts."""
        return self.num_experts > 0 and self.experts_per_token > 0

    @property
    def prefill_fixed_bytes(self) -> int:
        """Bytes a forward pass reads however many tokens it holds (non-routed weights)."""
        active_routed = self._per_token(self.routed_expert_bytes)
        return self.decode_bytes_per_token - active_routed


def weight_scheme(quant: QuantScheme) -> str:
    """Classify a quantization declaration into one of :data:`SCHEMES`, or a GGUF file's
    type as ``gguf-<file type>`` (``gguf-q8_0``, ``gguf-q4_k_m``, ``gguf-f16``): llama.cpp's
    kernels are their own, so a GGUF is never labelled as a vLLM scheme (a Q8_0 file is not
    "bf16")."""
    if quant.method == "gguf":
        return f"gguf-{(quant.format or 'unknown').lower()}"
    if not quant.is_quantized:
        return "bf16"
    if quant.method == "other":  # an unknown quant_method is never planned as BF16
        raise ConfigError(
            f"{quant.declared_in}: quant_method {quant.format!r} is not a quantization "
            "servelab sizes (its kernels and packed weights are unknown)"
        )
    fmt = (quant.format or "").lower()
    w = quant.weights
    a = quant.input_activations
    if quant.method == "mxfp4" or "mxfp4" in fmt:
        return "mxfp4"
    if quant.method == "fp8":
        return "fp8"  # fine-grained FP8: vLLM quantizes activations per block on the fly
    if quant.method == "modelopt":
        if "nvfp4" in fmt or "fp4" in fmt:
            return "nvfp4" if a is not None or "a16" not in fmt else "nvfp4a16"
        if "fp8" in fmt:
            return "fp8"
    if w is None:
        return "bf16"
    if w.num_bits == 8 and w.type == "float":
        return "fp8" if a is not None and a.num_bits == 8 else "fp8a16"
    if w.num_bits == 4 and w.type == "float":
        return "nvfp4" if a is not None and a.num_bits == 4 else "nvfp4a16"
    if w.num_bits == 8:
        return "int8"
    return "int4"


def weights_from_report(report: CheckpointReport, *, name: str | None = None) -> Weights:
    """:class:`Weights` from inspect's report (header bytes, not estimates)."""
    by_role = report.bytes_by_role_incl_scales
    routed = by_role.get("routed_expert", 0)
    return Weights(
        name=name or report.source.location,
        resident_bytes=report.total_bytes,
        decode_bytes_per_token=report.decode_bytes_per_token,
        routed_expert_bytes=int(routed),
        active_params=report.active_params,
        total_params=report.total_params,
        scheme=weight_scheme(report.quant),
        quant_label=report.quant.label,
        num_experts=report.num_experts or 0,
        experts_per_token=report.experts_per_token or 0,
        routed_expert_bits=report.routed_expert_bits,
        mtp_tensors=report.mtp_tensors,
        mtp_bytes=report.mtp_bytes,
        vision_bytes=report.vision_bytes,
        source="checkpoint headers (servelab inspect)",
        lm_head_params=int(report.params_by_role.get("lm_head", 0)),
        embedding_bytes=int(by_role.get("embedding", 0)),
        lm_head_bytes=int(by_role.get("lm_head", 0)),
        # Norms and routers are replicated on every rank; unclassified tensors are
        # counted as replicated too (the conservative choice for "does it fit").
        replicated_bytes=sum(int(by_role.get(r, 0)) for r in REPLICATED_ROLES),
        routed_expert_params=int(report.params_by_role.get("routed_expert", 0)),
    )
