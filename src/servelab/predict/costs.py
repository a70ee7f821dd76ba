"""What one point of serving costs in bytes and FLOPs: plan arithmetic, from the checkpoint
and the model's dimensions. Pure. The speed model (:mod:`servelab.predict`) turns these costs
into times.

Decode, one sequence, context ``c``::

    bytes/token = weights read per token (inspect's decode bytes)
                + KV read, per layer: kv_heads x (k_dim + v_dim) x kv bytes x tokens read
                  (c for full attention, min(c, window) sliding, min(c, chunk) chunked;
                  MLA: (kv_lora_rank + qk_rope_head_dim) x kv bytes x c)
                + Gated DeltaNet / Mamba2 state read and written back: 2 x state bytes

Prefill, a prompt of ``P`` tokens::

    FLOPs = 2 x (active params - lm_head) x P + 2 x lm_head (logits of the last token only)
          + 2 x pairs x q_heads x (qk dim + v dim) per attention layer (causal QKᵀ and AV;
            pairs = P²/2, fewer for a sliding window or chunks; MLA: nope + rope, v dims)
          + 4 x P x state values per Gated DeltaNet / Mamba2 layer
    bytes = non-routed weights + routed x (1 - (1 - k/E)^P) + KV written

"""

from __future__ import annotations

from servelab.families import DTYPE_BYTES, LINEAR, MAMBA, MLA, ModelDims
from servelab.families.layers import CHUNKED, FULL, SLIDING
from servelab.sizing.weights import Weights

SOFTMAX_KINDS = frozenset({FULL, SLIDING, CHUNKED})


def layer_token_bytes(dims: ModelDims, i: int, kv_dtype_bytes: int) -> int:
    """Bytes one cached token holds in layer ``i`` (0 for state and cache-less layers)."""
    kind = dims.layer_types[i]
    if kind == MLA:
        return dims.mla.latent_dim * kv_dtype_bytes if dims.mla is not None else 0
    if kind not in SOFTMAX_KINDS:
        return 0
    layer = dims.attention_layer(i)
    if layer is None:
        return 2 * dims.num_kv_heads * dims.head_dim * kv_dtype_bytes
    return layer.kv_elements_per_token() * kv_dtype_bytes


def _tokens_read(dims: ModelDims, i: int, context_len: int) -> int:
    """Cached tokens layer ``i`` reads at ``context_len``: a sliding layer at most its
    window, a chunked layer at most its chunk, the others the whole context."""
    layer = dims.attention_layer(i)
    return layer.tokens_read(context_len) if layer is not None else context_len


def kv_read_bytes(dims: ModelDims, context_len: int, kv_dtype_bytes: int) -> int:
    """KV bytes one decode step reads at ``context_len``: every full-attention layer its
    whole context, a sliding layer at most its window, a chunked layer at most its chunk,
    an MLA layer the latent (``kv_lora_rank + qk_rope_head_dim``) of every token."""
    return sum(
        layer_token_bytes(dims, i, kv_dtype_bytes) * _tokens_read(dims, i, context_len)
        for i in range(dims.num_layers)
    )


def kv_write_bytes(dims: ModelDims, tokens: int, kv_dtype_bytes: int) -> int:
    """KV bytes writing ``tokens`` new tokens takes (every attention layer caches each)."""
    return tokens * sum(
        layer_token_bytes(dims, i, kv_dtype_bytes) for i in range(dims.num_layers)
    )


def state_bytes_per_layer(dims: ModelDims, kind: str, ssm_dtype: str) -> int:
    """One request's state in one Gated DeltaNet or Mamba2 layer: the conv state in the
    model dtype, the recurrent state in ``ssm_dtype``."""
    state = dims.linear if kind == LINEAR else dims.mamba if kind == MAMBA else None
    if state is None:
        return 0
    return (
        state.conv_state_elements * dims.dtype_bytes
        + state.recurrent_state_elements * DTYPE_BYTES[ssm_dtype]
    )


def state_traffic_bytes(dims: ModelDims, ssm_dtype: str) -> int:
    """State bytes read and written back per decode step (Gated DeltaNet and Mamba2)."""
    return 2 * sum(state_bytes_per_layer(dims, t, ssm_dtype) for t in dims.layer_types)


def decode_bytes_per_token(
    weights: Weights, dims: ModelDims, context_len: int, *, kv_dtype_bytes: int, ssm_dtype: str
) -> tuple[int, int, int]:
    """(weight, KV, state) bytes read per generated token at ``context_len``."""
    return (
        weights.decode_bytes_per_token,
        kv_read_bytes(dims, context_len, kv_dtype_bytes),
        state_traffic_bytes(dims, ssm_dtype),
    )



def attended_pairs(prompt_len: int, *, window: int | None = None, chunk: int | None = None
                   ) -> float:
    """(query, key) pairs causal attention over ``prompt_len`` tokens scores: ``P²/2`` in
    all, ``P·w - w²/2`` with a window ``w < P``, ``c²/2`` per chunk of ``c`` tokens."""
    p = float(prompt_len)
    if window is not None and window < prompt_len:
        return p * window - window * window / 2
    if chunk is not None and chunk < prompt_len:
        whole, rest = divmod(prompt_len, chunk)
        return whole * chunk * chunk / 2 + rest * rest / 2
    return p * p / 2


def attention_flops(dims: ModelDims, prompt_len: int) -> float:
    """FLOPs of causal attention (QKᵀ and AV) over ``prompt_len`` tokens, every layer:
    2 x pairs x q_heads x (qk dim + v dim); MLA with its nope + rope query/key dims."""
    q = dims.num_attention_heads
    flops = 0.0
    for i, kind in enumerate(dims.layer_types):
        if kind == MLA and dims.mla is not None:
            m = dims.mla
            dims_sum = m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim
            flops += 2.0 * attended_pairs(prompt_len) * q * dims_sum
        elif kind in SOFTMAX_KINDS:
            layer = dims.attention_layer(i)
            window = layer.window if layer is not None and kind == SLIDING else None
            chunk = layer.chunk if layer is not None and kind == CHUNKED else None
            d = (layer.head_dim + layer.v_head_dim) if layer is not None else 2 * dims.head_dim
            flops += 2.0 * attended_pairs(prompt_len, window=window, chunk=chunk) * q * d
    return flops


def prefill_flops(weights: Weights, dims: ModelDims, prompt_len: int) -> float:
    """FLOPs of prefilling ``prompt_len`` tokens (matmuls + attention + state updates)."""
    p = prompt_len
    body = weights.active_params - weights.lm_head_params
    flops = 2.0 * body * p + 2.0 * weights.lm_head_params  # vLLM computes last-token logits
    flops += attention_flops(dims, p)
    if dims.linear is not None:
        flops += dims.num_gdn_layers * 4.0 * p * dims.linear.recurrent_state_elements
    if dims.mamba is not None:
        flops += dims.num_mamba_layers * 4.0 * p * dims.mamba.recurrent_state_elements
    return flops


def prefill_expert_flops(weights: Weights, prompt_len: int) -> float:
    """Of :func:`prefill_flops`, the routed experts' matmuls (every token through its top-k)."""
    return 2.0 * weights.active_routed_params * prompt_len


def distinct_expert_fraction(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected fraction of ``num_experts`` that ``tokens`` independent top-``k`` draws touch."""
    if num_experts <= 0 or top_k <= 0:
        return 0.0
    return 1.0 - (1.0 - top_k / num_experts) ** tokens


def routed_bytes_touched(weights: Weights, tokens: int) -> float:
    """Routed-expert bytes a forward pass over ``tokens`` tokens reads (expected)."""
    if not weights.moe:
        return 0.0
    frac = distinct_expert_fraction(weights.num_experts, weights.experts_per_token, tokens)
    return weights.routed_expert_bytes * frac


def prefill_bytes_read(weights: Weights, dims: ModelDims, prompt_len: int, kv_bytes: int) -> int:
    """Weight bytes a prefill of ``prompt_len`` touches (expert coverage grows with P)."""
    routed = routed_bytes_touched(weights, prompt_len)
    kv_write = kv_write_bytes(dims, prompt_len, kv_bytes)
    return int(weights.prefill_fixed_bytes + routed + kv_write)


