"""Lint findings about a checkpoint: stable codes, one-line explanations.

Codes (stable; tests and pages refer to them):

=========================  ========  ========================================================
code                       severity  meaning
=========================  ========  ========================================================
mtp-declared-missing       warning   config declares an MTP head but no MTP tensor ships
mtp-undeclared             info      MTP tensors ship but the config declares no MTP head
quant-ignored              info      modules the quantization ignore list keeps unquantized
ignored-but-quantized      warning   a module in the ignore list still ships quantized
tied-embeddings            info      ``tie_word_embeddings``: lm_head reads the embedding
tied-but-lm-head-ships     warning   embeddings are tied yet an ``lm_head`` tensor ships
unknown-role               warning   tensors whose role servelab cannot classify
dtype-scheme-mismatch      error     stored dtypes contradict the declared quantization
scale-without-weight       warning   a quantization scale whose weight is not in the file
experts-mismatch           warning   config expert count differs from the tensors
layers-mismatch            warning   config layer count differs from the tensors
layer-types-mismatch       warning   config layer types differ from the tensors present
moe-topk-unknown           warning   MoE tensors but no top-k in config: decode bytes are
                                     an upper bound (all experts counted)
=========================  ========  ========================================================
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.checkpoint.quant import QuantScheme
from servelab.checkpoint.roles import Role, TensorRole
from servelab.checkpoint.safetensors_format import TensorEntry

INFO = "info"
WARNING = "warning"
ERROR = "error"

_FLOAT8 = frozenset({"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
_HIGH_PRECISION = frozenset({"BF16", "F16", "F32"})
_MAX_EXAMPLES = 3


@dataclass(frozen=True)
class Finding:
    """One lint result: a stable ``code``, a severity and a one-line message."""

    code: str
    severity: str
    message: str
    count: int = 1
    examples: tuple[str, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The finding as plain JSON types."""
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "count": self.count,
            "examples": list(self.examples),
        }


#: Config keys that declare MTP layers (named in findings; the count is the family's).
_MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers", "n_mtp_layers")


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else name


def _examples(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(names[:_MAX_EXAMPLES])


def _fmt_examples(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_EXAMPLES])
    return shown + (", …" if len(names) > _MAX_EXAMPLES else "")


@dataclass(frozen=True)
class LintContext:
    """What the linter looks at: tensors with their roles plus the derived facts."""

    tensors: Sequence[TensorEntry]
    roles: Sequence[TensorRole]
    text_config: Mapping[str, Any]
    quant: QuantScheme
    num_layers_config: int | None
    num_layers_tensors: int | None
    layer_types_config: tuple[str, ...]
    layer_types_tensors: tuple[str, ...]
    num_experts_config: int | None
    num_experts_tensors: int | None
    experts_per_token: int | None
    tie_word_embeddings: bool
    mtp_declared_layers: int = 0
    """MTP layers the config declares, as the model's family reads them."""


def _mtp(ctx: LintContext) -> list[Finding]:
    declared = ctx.mtp_declared_layers
    mtp = [t.name for t, r in zip(ctx.tensors, ctx.roles, strict=True) if r.base is Role.MTP]
    out: list[Finding] = []
    if declared and not mtp:
        key = next(
            (k for k in _MTP_KEYS if ctx.text_config.get(k)), "its MTP key"
        )
        out.append(
            Finding(
                "mtp-declared-missing",
                WARNING,
                f"config declares {key}: {declared} but none of the {len(ctx.tensors):,} "
                "tensors is an MTP tensor: MTP speculative decoding is unavailable",
            )
        )
    elif mtp and not declared:
        out.append(
            Finding(
                "mtp-undeclared",
                INFO,
                f"{len(mtp):,} MTP tensors ship but the config declares no MTP head "
                f"(e.g. {_fmt_examples(mtp)})",
                count=len(mtp),
                examples=_examples(mtp),
            )
        )
    return out


def _quant(ctx: LintContext) -> list[Finding]:
    q = ctx.quant
    out: list[Finding] = []
    pairs = list(zip(ctx.tensors, ctx.roles, strict=True))
    names = {t.name for t in ctx.tensors}
    # Weights whose module is in the ignore list.
    if q.is_quantized and q.ignore:
        ignored: list[str] = []
        ignored_roles: Counter[str] = Counter()
        bad: list[str] = []
        for t, r in pairs:
            if r.is_scale or not t.name.endswith(".weight") or len(t.shape) < 2:
                continue
            mod = _module(t.name)
            if q.ignores(mod):
                ignored.append(mod)
                ignored_roles[r.base.value] += 1
                if t.dtype not in _HIGH_PRECISION or any(
                    f"{mod}.{s}" in names for s in ("weight_scale", "weight_scale_inv")
                ):
                    bad.append(mod)
        if ignored:
            split = ", ".join(f"{n} {role}" for role, n in ignored_roles.most_common())
            out.append(
                Finding(
                    "quant-ignored",
                    INFO,
                    f"{len(ignored):,} modules are in the quantization ignore list and ship "
                    f"unquantized ({split})",
                    count=len(ignored),
                    examples=_examples(ignored),
                )
            )
        if bad:
            out.append(
                Finding(
                    "ignored-but-quantized",
                    WARNING,
                    f"{len(bad):,} modules are in the ignore list yet ship quantized "
                    f"(e.g. {_fmt_examples(bad)})",
                    count=len(bad),
                    examples=_examples(bad),
                )
            )
    # Stored dtypes vs the declared scheme.
    weights = [(t, r) for t, r in pairs if not r.is_scale and len(t.shape) >= 2]
    if q.is_quantized:
        expected = q.expected_weight_dtypes()
        routed = [t for t, r in weights if r.base is Role.ROUTED_EXPERT]
        if expected and routed and not any(t.dtype in expected for t in routed):
            got = sorted({t.dtype for t in routed})
            out.append(
                Finding(
                    "dtype-scheme-mismatch",
                    ERROR,
                    f"{q.label} is declared but no routed-expert weight has a quantized dtype "
                    f"({', '.join(sorted(expected))}); they are {', '.join(got)}",
                    count=len(routed),
                    examples=_examples([t.name for t in routed]),
                )
            )
        elif (
            expected and not routed and weights and not any(t.dtype in expected for t, _ in weights)
        ):
            out.append(
                Finding(
                    "dtype-scheme-mismatch",
                    ERROR,
                    f"{q.label} is declared but no weight has a quantized dtype "
                    f"({', '.join(sorted(expected))})",
                    count=len(weights),
                )
            )
    else:
        quantized = [t.name for t, _ in weights if t.dtype in _FLOAT8 or t.dtype == "F4"]
        scales = [t.name for t, r in pairs if r.is_scale]
        if quantized or scales:
            shown = quantized or scales
            out.append(
                Finding(
                    "dtype-scheme-mismatch",
                    ERROR,
                    "no quantization is declared but "
                    f"{len(quantized):,} low-precision weights and {len(scales):,} scale tensors "
                    f"ship (e.g. {_fmt_examples(shown)})",
                    count=len(shown),
                    examples=_examples(shown),
                )
            )
    # Scales whose weight is missing.
    orphans = []
    for t, r in pairs:
        if not r.is_scale:
            continue
        mod, _, leaf = t.name.rpartition(".")
        if leaf.startswith("weight_") and not any(
            f"{mod}.{w}" in names for w in ("weight", "weight_packed")
        ):
            orphans.append(t.name)
    if orphans:
        out.append(
            Finding(
                "scale-without-weight",
                WARNING,
                f"{len(orphans):,} quantization scales have no weight next to them "
                f"(e.g. {_fmt_examples(orphans)})",
                count=len(orphans),
                examples=_examples(orphans),
            )
        )
    return out


def _structure(ctx: LintContext) -> list[Finding]:
    out: list[Finding] = []
    pairs = list(zip(ctx.tensors, ctx.roles, strict=True))
    has_lm_head = any(r.base is Role.LM_HEAD for _, r in pairs)
    if ctx.tie_word_embeddings:
        if has_lm_head:
            out.append(
                Finding(
                    "tied-but-lm-head-ships",
                    WARNING,
                    "tie_word_embeddings is true yet an lm_head tensor ships; engines may "
                    "ignore one of the two",
                )
            )
        else:
            out.append(
                Finding(
                    "tied-embeddings",
                    INFO,
                    "tie_word_embeddings: the lm_head reuses the embedding table, so decode "
                    "reads the whole table once per token",
                )
            )
    unknown = [t.name for t, r in pairs if r.base is Role.UNKNOWN]
    if unknown:
        out.append(
            Finding(
                "unknown-role",
                WARNING,
                f"{len(unknown):,} tensors have no recognised role (e.g. "
                f"{_fmt_examples(unknown)}); decode counts them as read every token",
                count=len(unknown),
                examples=_examples(unknown),
            )
        )
    if (
        ctx.num_experts_config is not None
        and ctx.num_experts_tensors is not None
        and ctx.num_experts_config != ctx.num_experts_tensors
    ):
        out.append(
            Finding(
                "experts-mismatch",
                WARNING,
                f"config declares {ctx.num_experts_config} experts but the tensors hold "
                f"{ctx.num_experts_tensors}",
            )
        )
    if ctx.num_experts_tensors and not ctx.experts_per_token:
        out.append(
            Finding(
                "moe-topk-unknown",
                WARNING,
                "routed-expert tensors ship but the config gives no experts-per-token; "
                "decode bytes count every expert (an upper bound)",
            )
        )
    if (
        ctx.num_layers_config is not None
        and ctx.num_layers_tensors is not None
        and ctx.num_layers_config != ctx.num_layers_tensors
    ):
        out.append(
            Finding(
                "layers-mismatch",
                WARNING,
                f"config declares {ctx.num_layers_config} layers but tensors cover "
                f"{ctx.num_layers_tensors}",
            )
        )
    if (
        ctx.layer_types_config
        and ctx.layer_types_tensors
        and len(ctx.layer_types_config) == len(ctx.layer_types_tensors)
    ):
        diff = [
            i
            for i, (a, b) in enumerate(
                zip(ctx.layer_types_config, ctx.layer_types_tensors, strict=True)
            )
            if _attn_kind(a) != _attn_kind(b)
        ]
        if diff:
            out.append(
                Finding(
                    "layer-types-mismatch",
                    WARNING,
                    f"{len(diff)} layers have a type in the config that their tensors "
                    f"contradict (first: layer {diff[0]}: config "
                    f"{ctx.layer_types_config[diff[0]]}, tensors "
                    f"{ctx.layer_types_tensors[diff[0]]})",
                    count=len(diff),
                )
            )
    return out


def _attn_kind(layer_type: str) -> str:
    """Collapse sliding/chunked/full attention into one kind; keep linear separate."""
    if layer_type in ("linear_attention", "mamba", "linear"):
        return "linear"
    if layer_type in ("none", "mlp", "moe"):
        return "none"
    return "attention"


def lint_checkpoint(ctx: LintContext) -> tuple[Finding, ...]:
    """All findings for a checkpoint, errors first, each code at most once."""
    found = [*_mtp(ctx), *_quant(ctx), *_structure(ctx)]
    rank = {ERROR: 0, WARNING: 1, INFO: 2}
    return tuple(sorted(found, key=lambda f: (rank[f.severity], f.code)))
