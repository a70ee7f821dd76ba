"""Why two builds of a model decode at different speeds: bytes, kernel path, efficiency.

Decode tok/s = bandwidth x efficiency / bytes per token, so the ratio of two builds'
speeds factors exactly into a bytes ratio and an efficiency ratio (same hardware). The
kernel path explains the efficiency; the routed-expert bits explain the bytes. When the
build with the better kernel path still loses, the verdict is the seed's "bytes beat
kernels".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from servelab.plan.build import Plan
from servelab.units import GIB


@dataclass(frozen=True)
class BuildSide:
    """One build's decode-relevant facts at the compared context length."""

    name: str
    scheme: str
    kernel_path: str
    compute_precision: str
    routed_expert_bytes: int
    routed_expert_bits: float | None
    bytes_per_token: int
    efficiency: float | None
    efficiency_source: str
    predicted_tok_s: float
    predicted: bool = True


@dataclass(frozen=True)
class Explanation:
    """The factored comparison of build A against build B."""

    hardware: str
    context_len: int
    a: BuildSide
    b: BuildSide
    bytes_ratio: float
    efficiency_ratio: float
    speed_ratio: float
    verdict: str
    lines: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``predicted: true``)."""
        d = asdict(self)
        d["predicted"] = True
        return d


_PATH_RANK = {"fp4": 3, "fp8": 2, "bf16": 1, "fp32": 0}


def better_kernel(precision: str, than: str) -> bool:
    """Whether a kernel computing in ``precision`` is the better path than one computing in
    ``than`` (FP4 > FP8 > BF16 > FP32): the "kernels" side of "bytes beat kernels"."""
    return _PATH_RANK.get(precision, 0) > _PATH_RANK.get(than, 0)


def _side(plan: Plan, idx: int) -> BuildSide:
    point = plan.speed.decode[idx]
    fit = plan.speed.decode_fit
    calibrated = point.predicted_tok_s is not None and fit is not None
    tok_s = point.predicted_tok_s if point.predicted_tok_s is not None else point.roofline_tok_s
    return BuildSide(
        name=plan.checkpoint,
        scheme=plan.weights.scheme,
        kernel_path=plan.speed.kernel_path.name,
        compute_precision=plan.speed.compute_precision,
        routed_expert_bytes=plan.weights.routed_expert_bytes,
        routed_expert_bits=plan.weights.routed_expert_bits,
        bytes_per_token=point.bytes_per_token,
        efficiency=tok_s / point.roofline_tok_s if calibrated else None,
        efficiency_source=fit.label() if calibrated and fit else "none (roofline bound)",
        predicted_tok_s=tok_s,
    )


def explain(a: Plan, b: Plan, *, context_index: int = 0) -> Explanation:
    """Factor the predicted decode-speed ratio of build ``a`` over build ``b``."""
    sa, sb = _side(a, context_index), _side(b, context_index)
    ctx = a.speed.decode[context_index].context_len
    bytes_ratio = sb.bytes_per_token / sa.bytes_per_token
    ea, eb = sa.efficiency or 1.0, sb.efficiency or 1.0
    eff_ratio = ea / eb
    speed_ratio = sa.predicted_tok_s / sb.predicted_tok_s
    lines = [
        f"Decode reads {sa.bytes_per_token / GIB:.2f} GiB per token for A and "
        f"{sb.bytes_per_token / GIB:.2f} GiB for B at a {ctx:,}-token context: B reads "
        f"{bytes_ratio:.2f}x the bytes of A.",
    ]
    if sa.routed_expert_bytes and sb.routed_expert_bytes:
        bits = (
            f" ({sa.routed_expert_bits:.2f} vs {sb.routed_expert_bits:.2f} bits)"
            if sa.routed_expert_bits and sb.routed_expert_bits
            else ""
        )
        lines.append(
            f"Routed experts: {sa.routed_expert_bytes / GIB:.2f} GiB in A against "
            f"{sb.routed_expert_bytes / GIB:.2f} GiB in B{bits}."
        )
    lines.append(
        f"Kernel path: A runs {sa.kernel_path} ({sa.compute_precision} compute), "
        f"B runs {sb.kernel_path} ({sb.compute_precision} compute)."
    )
    if sa.efficiency is not None or sb.efficiency is not None:
        lines.append(
            f"Efficiency (predicted / roofline): A {ea:.2f} [{sa.efficiency_source}], "
            f"B {eb:.2f} [{sb.efficiency_source}]."
        )
    lines.append(
        f"Predicted decode: A {sa.predicted_tok_s:.1f} tok/s, B {sb.predicted_tok_s:.1f} tok/s "
        f"= {speed_ratio:.2f}x (bytes {bytes_ratio:.2f}x x efficiency {eff_ratio:.2f}x)."
    )
    faster, slower = (sa, sb) if speed_ratio >= 1 else (sb, sa)
    fewer_bytes = faster.bytes_per_token < slower.bytes_per_token
    if better_kernel(slower.compute_precision, faster.compute_precision) and fewer_bytes:
        verdict = (
            f"Bytes beat kernels: {slower.name} has the better kernel path "
            f"({slower.kernel_path}) but reads more bytes per token, and decode is "
            "bandwidth-bound."
        )
    elif fewer_bytes:
        verdict = f"{faster.name} reads fewer bytes per token; decode is bandwidth-bound."
    else:
        verdict = f"{faster.name} is faster through efficiency, not bytes."
    lines.append(verdict)
    return Explanation(
        hardware=a.hardware.name,
        context_len=ctx,
        a=sa,
        b=sb,
        bytes_ratio=bytes_ratio,
        efficiency_ratio=eff_ratio,
        speed_ratio=speed_ratio,
        verdict=verdict,
        lines=tuple(lines),
    )
