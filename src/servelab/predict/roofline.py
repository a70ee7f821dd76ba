"""The roofline as speed-model coefficients: the physical prior of every fit and the bound
no fit goes below.

The **roofline** (an upper bound) is bytes / peak bandwidth for decode and
max(FLOPs / peak compute, bytes / peak bandwidth) for prefill. The **prediction** is the
"""

from __future__ import annotations

from servelab.errors import UsageError
from servelab.hardware.profiles import HardwareProfile
from servelab.predict.form import Coefficients
from servelab.sizing.weights import Weights


def roofline_decode_tok_s(bytes_per_token: float, bandwidth: float) -> float:
    """Decode tokens/s when every step streams ``bytes_per_token`` at ``bandwidth``."""
    if bytes_per_token <= 0 or bandwidth <= 0:
        raise UsageError("bytes per token and bandwidth must be positive")
    return bandwidth / bytes_per_token


#: Speed-model coefficients of each kind (``{"decode": ..., "prefill": ...}``).
ByKind = dict[str, Coefficients]


def coefficients(bandwidth: float, rate: float | None) -> ByKind:
    """The roofline as speed-model coefficients: ``1 / bandwidth`` per byte, ``1 / rate`` per
    FLOP, dense or routed-expert (0 without a rate), no overheads."""
    per_flop = 1.0 / rate if rate else 0.0
    return {
        "decode": Coefficients.of("decode", s_per_byte=1.0 / bandwidth),
        "prefill": Coefficients.of(
            "prefill", s_per_flop=per_flop, s_per_expert_flop=per_flop, s_per_byte=1.0 / bandwidth
        ),
    }


def bounds(coef: ByKind, *, cpu: bool) -> ByKind:
    """What no fit may go below: ``coef`` itself, except the per-FLOP cost on a CPU, whose
    ``host`` compute figure is a quick numpy probe that vLLM's oneDNN kernels beat (prefill
    measured above it on the reference box): bounded by zero only."""
    if not cpu:
        return coef
    return {**coef, "prefill": coef["prefill"].replace(s_per_flop=0.0, s_per_expert_flop=0.0)}


def roofline_coefficients(hardware: HardwareProfile, compute: str) -> ByKind:
    """:func:`coefficients` of ``hardware``'s ceiling bandwidth and ``compute``'s peak rate
    (the prior of last resort and the lower bound)."""
    bw, _ = hardware.effective_bandwidth_ceiling()
    return coefficients(bw, hardware.compute_rate(compute) or hardware.compute_rate("bf16"))


def lower_bounds(hardware: HardwareProfile, compute: str) -> ByKind:
    """:func:`bounds` of :func:`roofline_coefficients` on ``hardware``."""
    return bounds(roofline_coefficients(hardware, compute), cpu=hardware.platform == "cpu")


def physical_prior(hardware: HardwareProfile, weights: Weights) -> ByKind:
    """:func:`roofline_coefficients` for the kernel path ``weights`` take on ``hardware``."""
    path = hardware.kernel_path(weights.scheme, moe=weights.moe)
    return roofline_coefficients(hardware, path.compute)
