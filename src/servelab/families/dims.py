""":class:`ModelDims`: what planning and prediction need from a model's config. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.families.layers import (
    DTYPE_BYTES,
    FULL,
    LINEAR,
    MAMBA,
    MLA,
    STATE_KINDS,
    AttentionLayer,
    LinearAttentionDims,
    Mamba2Dims,
    MlaDims,
)


@dataclass(frozen=True)
class ModelDims:
    """A model's dimensions as its family reads them (the defaults vLLM sees included).

    ``layer_types`` holds one kind of :mod:`servelab.families.layers` per decoder layer;
    ``attention`` holds, aligned with it, the :class:`AttentionLayer` of each softmax
    attention layer (``None`` for MLA, state and cache-less layers). ``num_kv_heads`` and
    ``head_dim`` are those of the (first) attention layer, for terms that take one value.
    """

    model_type: str
    architecture: str | None
    dtype: str
    num_layers: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None
    linear: LinearAttentionDims | None
    mamba_ssm_dtype: str | None
    mtp_layers: int
    num_experts: int
    experts_per_token: int
    sliding_window: int | None
    family: str = "generic"
    attention: tuple[AttentionLayer | None, ...] = ()
    mla: MlaDims | None = None
    mamba: Mamba2Dims | None = None
    tie_word_embeddings: bool = False
    notes: tuple[str, ...] = ()
    """What transformers warned about while reading the config (shown, never fatal)."""

    def __post_init__(self) -> None:
        if self.attention and len(self.attention) != len(self.layer_types):
            raise ValueError("attention specs must align with layer_types")

    @property
    def num_full_attention_layers(self) -> int:
        """Layers with a full-attention KV cache."""
        return sum(1 for t in self.layer_types if t == FULL)

    @property
    def num_linear_layers(self) -> int:
        """Layers with a fixed-size recurrent state (Gated DeltaNet or Mamba2)."""
        return sum(1 for t in self.layer_types if t in STATE_KINDS)

    @property
    def num_mla_layers(self) -> int:
        """Layers with an MLA latent cache."""
        return sum(1 for t in self.layer_types if t == MLA)

    @property
    def num_mamba_layers(self) -> int:
        """Mamba2 mixer layers."""
        return sum(1 for t in self.layer_types if t == MAMBA)

    @property
    def num_gdn_layers(self) -> int:
        """Gated DeltaNet layers."""
        return sum(1 for t in self.layer_types if t == LINEAR)

    @property
    def is_hybrid(self) -> bool:
        """Whether layers with a per-token cache and layers with a fixed state are mixed."""
        kinds = set(self.layer_types)
        return bool(kinds & STATE_KINDS) and bool(kinds - STATE_KINDS - {"none"})

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of the model's activation dtype."""
        return DTYPE_BYTES[self.dtype]

    def attention_layer(self, i: int) -> AttentionLayer | None:
        """Layer ``i``'s softmax-attention spec (``None`` for other kinds)."""
        return self.attention[i] if self.attention else None
