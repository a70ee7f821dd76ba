"""The operators of one decoder step, read from a model's config: what each layer runs.

A model's linear layers come from its family's header-replica layout
(:func:`servelab.synth.replica.replica_tensors`: every tensor a real export carries, at the
config's dimensions), grouped the way vLLM groups them into GEMMs: ``q``/``k``/``v`` into
one ``qkv_proj`` (``QKVParallelLinear``), ``gate``/``up`` into ``gate_up_proj``
(``MergedColumnParallelLinear``), Qwen3.5's ``in_proj_qkv``/``in_proj_z`` into
``in_proj_qkvz`` and ``in_proj_b``/``in_proj_a`` into ``in_proj_ba``, DeepSeek's
``q_a_proj``/``kv_a_proj_with_mqa`` into ``fused_qkv_a_proj``. Routed experts become one
fused-MoE operator (experts, top-k, hidden, intermediate); the attention, Gated DeltaNet,
Mamba2 and MLA cores come from the family's layer kinds (:class:`ModelDims`).

Pure: a config mapping and a quantization layout in, frozen dataclasses out.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servelab.errors import ConfigError
from servelab.families import FULL, LINEAR, MAMBA, MLA, AttentionLayer, ModelDims, model_dims
from servelab.families.layers import LinearAttentionDims, Mamba2Dims, MlaDims
from servelab.synth.replica import QuantLayout, replica_tensors
from servelab.synth.safetensors_set import TensorSpec

#: Tensor-name prefixes of a multimodal export that are not the text decoder.
_NOT_TEXT = re.compile(r"(^|\.)(vision_model|vision_tower|visual|multi_modal_projector|mtp)\.")
_LAYER = re.compile(r"^(?P<prefix>.*?layers)\.(?P<index>\d+)\.(?P<rest>.+)$")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
#: Router / gate modules (BF16, never quantized by the exporters servelab knows).
_ROUTER = re.compile(r"(\.gate|\.router|shared_expert_gate)$")

#: vLLM's fused groups: (members in order, fused name).
_FUSE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("q_proj", "k_proj", "v_proj"), "qkv_proj"),
    (("gate_proj", "up_proj"), "gate_up_proj"),
    (("w1", "w3"), "gate_up_proj"),
    (("in_proj_qkv", "in_proj_z"), "in_proj_qkvz"),
    (("in_proj_b", "in_proj_a"), "in_proj_ba"),
    (("q_a_proj", "kv_a_proj_with_mqa"), "fused_qkv_a_proj"),
)


@dataclass(frozen=True)
class Gemm:
    """One dense GEMM of a layer: ``[tokens, k] @ [k, n]`` (weight ``[n, k]``).

    ``fmt``: the weight's storage (``bf16``, ``fp8-block``, ``fp8-channel``, ...);
    ``role``: ``attention``, ``mlp``, ``shared_expert``, ``router``, ``linear_attention``,
    ``mamba``, ``mla`` or ``lm_head``.
    """

    name: str
    n: int
    k: int
    fmt: str
    role: str


@dataclass(frozen=True)
class Moe:
    """A fused routed-expert block: ``experts`` of ``[inter, hidden]`` gate/up (fused,
    ``2 * inter`` when ``gated``) and ``[hidden, inter]`` down, ``topk`` per token."""

    experts: int
    topk: int
    hidden: int
    inter: int
    fmt: str
    gated: bool = True


@dataclass(frozen=True)
class LayerOps:
    """What one decoder layer runs."""

    index: int
    kind: str
    gemms: tuple[Gemm, ...]
    moe: Moe | None = None
    attention: AttentionLayer | None = None
    mla: MlaDims | None = None
    gdn: LinearAttentionDims | None = None
    mamba: Mamba2Dims | None = None
    num_heads: int = 0
    qk_norm: bool = False


@dataclass(frozen=True)
class StepModel:
    """Every layer's operators plus the model's ends (embedding, final norm, lm_head)."""

    name: str
    family: str
    dims: ModelDims
    layers: tuple[LayerOps, ...]
    lm_head: Gemm
    hidden: int
    vocab: int
    fmt: str

    @property
    def gemm_shapes(self) -> frozenset[tuple[int, int, str]]:
        """Every distinct (n, k, format) this model's GEMMs use (lm_head included)."""
        out = {(g.n, g.k, g.fmt) for layer in self.layers for g in layer.gemms}
        out.add((self.lm_head.n, self.lm_head.k, self.lm_head.fmt))
        return frozenset(out)


def _text_tensors(tensors: tuple[TensorSpec, ...]) -> list[TensorSpec]:
    return [t for t in tensors if not _NOT_TEXT.search(t.name)]


def _role(rest: str) -> str:
    if _ROUTER.search(rest):
        return "router"
    if ".shared_expert" in rest:
        return "shared_expert"
    if rest.startswith("linear_attn."):
        return "linear_attention"
    if rest.startswith(("self_attn.", "attention.")):
        return "attention"
    return "mlp"


def _fuse(mods: dict[str, tuple[int, int, str]]) -> list[tuple[str, int, int, str]]:
    """Group one layer's linear modules (``local name -> (n, k, fmt)``) as vLLM does."""
    left = dict(mods)
    out: list[tuple[str, int, int, str]] = []
    for members, fused in _FUSE:
        by_parent: dict[str, list[str]] = defaultdict(list)
        for name in left:
            parent, _, leaf = name.rpartition(".")
            if leaf in members:
                by_parent[parent].append(name)
        for parent, names in by_parent.items():
            if len(names) != len(members):
                continue
            ks = {left[n][1] for n in names}
            if len(ks) != 1:
                continue
            n_sum = sum(left[n][0] for n in names)
            fmts = {left[n][2] for n in names}
            fmt = fmts.pop() if len(fmts) == 1 else "bf16"
            out.append((f"{parent}.{fused}" if parent else fused, n_sum, ks.pop(), fmt))
            for n in names:
                del left[n]
    out.extend((name, n, k, fmt) for name, (n, k, fmt) in left.items())
    return out


def step_model(
    config: Mapping[str, Any], layout: QuantLayout | None = None, *, name: str = "model",
    dims: ModelDims | None = None,
) -> StepModel:
    """The operators of ``config``'s decoder step with its linear layers stored as
    ``layout`` says (BF16 when ``None``); ``dims``: ``config`` already read (a plan reads
    its config once)."""
    layout = layout or QuantLayout()
    dims = dims or model_dims(config)
    plan = replica_tensors(config, layout, dims=dims)
    tensors = _text_tensors(plan.tensors)
    shapes = {t.name: t.shape for t in tensors}
    linear = [m for m in plan.linear_modules if not _NOT_TEXT.search(m)]

    per_layer: dict[int, dict[str, tuple[int, int, str]]] = defaultdict(dict)
    experts: dict[int, dict[str, Any]] = defaultdict(dict)
    lm_head: Gemm | None = None
    for mod in linear:
        shape = shapes.get(f"{mod}.weight") or shapes.get(f"{mod}.weight_packed")
        fmt = layout.kind_of(mod) or "bf16"
        m = _LAYER.match(mod)
        if m is None:
            if mod.endswith("lm_head"):
                if shape is None:
                    raise ConfigError(f"{name}: no lm_head weight in the replica")
                k = shape[-1] * (2 if fmt in ("nvfp4", "modelopt-nvfp4") else 1)
                lm_head = Gemm("lm_head", shape[0], k, fmt, "lm_head")
            continue
        if shape is None:
            raise ConfigError(f"{name}: no weight for linear module {mod}")
        i, rest = int(m["index"]), m["rest"]
        n, k = shape[0], shape[-1] * (2 if fmt in ("nvfp4", "modelopt-nvfp4") else 1)
        em = _EXPERT.search("." + rest)
        if em:
            leaf = rest.rsplit(".", 1)[-1]
            e = experts[i]
            e.setdefault("ids", set()).add(int(em.group(1)))
            e["fmt"] = fmt
            if leaf in ("gate_proj", "w1", "up_proj", "w3"):
                e["inter"], e["hidden"] = n, k
            continue
        per_layer[i][rest] = (n, k, fmt)
    # fused expert tensors (gpt-oss MXFP4 blocks, Llama 4 / Qwen3.5 fused BF16)
    for t in tensors:
        m = _LAYER.match(t.name)
        if m is None:
            continue
        i, rest = int(m["index"]), m["rest"]
        if rest.endswith("experts.gate_up_proj_blocks"):  # [E, 2I, H/32, 16] MXFP4
            experts[i].update(ids=set(range(t.shape[0])), inter=t.shape[1] // 2,
                              hidden=t.shape[2] * 32, fmt="mxfp4")
        elif rest.endswith("experts.gate_up_proj") and len(t.shape) == 3:
            e_count, a, b = t.shape
            # Llama 4: [E, H, 2I]; Qwen3.5 fused: [E, 2I, H]
            hidden = dims.hidden_size
            inter = (b if a == hidden else a) // 2
            experts[i].update(ids=set(range(e_count)), inter=inter, hidden=hidden,
                              fmt=layout.kind_of(t.name.rsplit(".", 1)[0]) or "bf16")

    if lm_head is None:  # tied embeddings: the embedding matrix is the lm_head
        lm_head = Gemm("lm_head", dims.vocab_size, dims.hidden_size, "bf16", "lm_head")

    layers: list[LayerOps] = []
    for i, kind in enumerate(dims.layer_types):
        gemms = tuple(
            Gemm(nm, n, k, fmt, _role(nm))
            for nm, n, k, fmt in _fuse(per_layer.get(i, {}))
        )
        moe = None
        ex = experts.get(i)
        if ex and "inter" in ex:
            moe = Moe(len(ex["ids"]), dims.experts_per_token, ex["hidden"], ex["inter"],
                      ex.get("fmt", "bf16"), gated=dims.family != "nemotron_h")
        layers.append(
            LayerOps(
                index=i,
                kind=kind,
                gemms=gemms,
                moe=moe,
                attention=dims.attention_layer(i),
                mla=dims.mla if kind == MLA else None,
                gdn=dims.linear if kind == LINEAR else None,
                mamba=dims.mamba if kind == MAMBA else None,
                num_heads=dims.num_attention_heads if kind in (FULL, MLA)
                or dims.attention_layer(i) is not None else 0,
                qk_norm=any(".q_norm." in t.name or ".q_layernorm." in t.name
                            for t in tensors if _layer_of(t.name) == i),
            )
        )
    return StepModel(
        name=name,
        family=dims.family,
        dims=dims,
        layers=tuple(layers),
        lm_head=lm_head,
        hidden=dims.hidden_size,
        vocab=dims.vocab_size,
        fmt=layout.kind,
    )


def _layer_of(tensor: str) -> int | None:
    m = _LAYER.match(tensor)
    return int(m["index"]) if m else None
