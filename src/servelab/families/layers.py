"""Layer kinds: what each decoder layer keeps per request while it serves.

This is the engine-neutral description of a model's cache-bearing layers. Families
(:mod:`servelab.families`) produce it from a config; each engine's KV arithmetic
(``servelab.engines.<engine>.kv``) turns it into that engine's pages, groups and pool.
Decode's bytes read per token per kind are a property of the layer, so they live here too.

Kinds (the strings are stable: they appear in plan JSON and stored runs):

* :data:`FULL`: softmax attention over the whole context (K and V per token);
* :data:`SLIDING`: softmax attention over the last ``window`` tokens (Gemma, gpt-oss,
  Mistral's ``sliding_window``);
* :data:`CHUNKED`: attention within fixed chunks of ``chunk`` tokens (Llama 4's local
  layers);
* :data:`MLA`: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one latent of
  ``kv_lora_rank + qk_rope_head_dim`` values per token, shared by all heads;
* :data:`LINEAR`: Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5/3.6): a fixed
  conv + recurrent state per request;
* :data:`MAMBA`: a Mamba2 mixer (Nemotron-H): conv + SSM state per request;
* :data:`NONE`: a layer with no cache (Nemotron-H's MLP-only and MoE-only layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

FULL: Final = "full_attention"
SLIDING: Final = "sliding_attention"
CHUNKED: Final = "chunked_attention"
MLA: Final = "mla_attention"
LINEAR: Final = "linear_attention"
MAMBA: Final = "mamba"
NONE: Final = "none"

#: Every kind, in the order tables list them.
KINDS: Final = (FULL, SLIDING, CHUNKED, MLA, LINEAR, MAMBA, NONE)
#: Kinds whose cache grows with the context (a page per block of tokens).
ATTENTION_KINDS: Final = frozenset({FULL, SLIDING, CHUNKED, MLA})
#: Kinds with a fixed-size state per request.
STATE_KINDS: Final = frozenset({LINEAR, MAMBA})

DTYPE_BYTES: Final[dict[str, int]] = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
    "int8": 1,
    "uint8": 1,
}


@dataclass(frozen=True)
class AttentionLayer:
    """One softmax-attention layer's cache shape (kinds FULL, SLIDING, CHUNKED).

    ``window`` is set for SLIDING, ``chunk`` for CHUNKED. ``sinks`` marks learned
    attention sinks (gpt-oss): they add no cache but pick kernels.
    """

    kind: str
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None = None
    chunk: int | None = None
    sinks: bool = False

    def kv_elements_per_token(self) -> int:
        """K and V values one token adds to this layer (all KV heads)."""
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)

    def tokens_read(self, context: int) -> int:
        """Cached tokens one decode step reads at ``context`` tokens of context."""
        if self.kind == SLIDING and self.window is not None:
            return min(context, self.window)
        if self.kind == CHUNKED and self.chunk is not None:
            return min(context, self.chunk)
        return context


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention: what the cache holds per token (one latent)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None

    @property
    def latent_dim(self) -> int:
        """Values cached per token per layer: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def conv_state_elements(conv_kernel: int, conv_dim: int) -> int:
    """Values a causal conv keeps per request: its last ``conv_kernel - 1`` inputs."""
    return (conv_kernel - 1) * conv_dim


@dataclass(frozen=True)
class LinearAttentionDims:
    """Gated DeltaNet dimensions (one linear-attention layer)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        """Channels of the causal-conv state: q and k (key heads) plus v (value heads)."""
        return (
            self.key_head_dim * self.num_key_heads * 2
            + self.value_head_dim * self.num_value_heads
        )

    @property
    def conv_state_elements(self) -> int:
        """Values of the conv state one request keeps (the last ``conv_kernel - 1`` inputs)."""
        return conv_state_elements(self.conv_kernel, self.conv_dim)

    @property
    def recurrent_state_elements(self) -> int:
        """Values of the recurrent (delta-rule) state: a key x value matrix per value head."""
        return self.num_value_heads * self.value_head_dim * self.key_head_dim


@dataclass(frozen=True)
class Mamba2Dims:
    """A Mamba2 mixer (Nemotron-H): conv state and SSM state per request."""

    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    intermediate_size: int

    @property
    def conv_dim(self) -> int:
        """Channels of the causal-conv state: x plus B and C of every group."""
        return self.intermediate_size + 2 * self.n_groups * self.state_size

    @property
    def conv_state_elements(self) -> int:
        """Values of the conv state one request keeps (the last ``conv_kernel - 1`` inputs)."""
        return conv_state_elements(self.conv_kernel, self.conv_dim)

    @property
    def recurrent_state_elements(self) -> int:
        """Values of the SSM state: ``head_dim x state_size`` per head."""
        return self.num_heads * self.head_dim * self.state_size
