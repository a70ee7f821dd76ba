"""CheckpointReport: what is in a checkpoint, byte by byte, from its headers alone.

:func:`build_report` is pure (a :class:`~servelab.checkpoint.sources.CheckpointSource`
in, a frozen :class:`CheckpointReport` out); :func:`inspect_checkpoint` adds the I/O.

Definitions
-----------
* **bytes by role**: every tensor's stored bytes under its primary role; scales and
  quantization metadata are their own role ``quant_scale``. ``bytes_by_role_incl_scales``
  folds each scale into the role of the weight it scales ("routed experts incl. scales").
* **params** (``total_params``, ``params_by_role``): *logical* weight elements of
  non-scale tensors; packed ``U8``/``I32`` weights count by the declared bits (an NVFP4
  ``weight_packed`` [out, in/2] U8 is out × in weights).
* **effective bits** of a role: its bytes incl. scales × 8 ÷ its params. NVFP4 ≈ 4.5.
* **decode bytes per token** (text): every non-expert weight the forward pass touches
  (attention, linear attention, norms, router, shared experts, dense MLP, lm_head and
  unclassified tensors) + top-k/E of the routed-expert bytes, all incl. their scales; one
  embedding row, not the table (tied embeddings: the lm_head reads the table); vision and
  MTP excluded. KV-cache/state reads depend on context and are the planner's job.
* **active params**: the same rule applied to params.

JSON schema ``servelab.inspect/1`` (:meth:`CheckpointReport.to_json_dict`)::

    {"schema": "servelab.inspect/1",
     "source": {"location", "kind", "revision", "commit", "header_sha256",
                "bytes_fetched", "shards"},
     "model": {"model_type", "architectures"},
     "tensor_count": int, "total_bytes": int, "total_gib": float,
     "params": {"total": int, "active": int},
     "dtypes": [{"dtype", "tensors", "bytes", "elements", "gib"}],        # bytes desc
     "roles": [{"role", "tensors", "bytes", "gib", "bytes_incl_scales",
                "gib_incl_scales", "params", "effective_bits" (float|null),
                "dtypes": {dtype: bytes}, "decode_bytes"}],               # fixed role order
     "layers": {"count", "types": [str], "types_from_tensors": [str],
                "counts": {type: n}},
     "experts": {"total", "per_token", "layout": "per-expert"|"fused"|"mixed"|null,
                 "shared_expert": bool},
     "quant": {"method", "format", "label", "declared_in", "ignore": [str],
               "kv_cache_bits", "groups": [{"name", "targets", "format",
               "weights": {...}|null, "input_activations": {...}|null}],
               "routed_expert_bits": float|null},
     "decode": {"bytes_per_token", "gib_per_token", "routed_fraction",
                "by_role": {role: bytes}},
     "mtp": {"declared_layers", "tensors", "bytes"},
     "vision": {"tensors", "bytes"},
     "tie_word_embeddings": bool,
     "findings": [{"code", "severity", "message", "count", "examples"}]}

Within one schema version fields are only ever added, never renamed or removed.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from servelab.checkpoint.configs import text_config as _text_config
from servelab.checkpoint.lint import WARNING, Finding, LintContext, lint_checkpoint
from servelab.checkpoint.quant import QuantArgs, QuantScheme, detect_quant
from servelab.checkpoint.roles import ROLE_ORDER, Role, RoleClassifier
from servelab.checkpoint.sources import CheckpointSource, load_checkpoint
from servelab.checkpoint.structure import NOT_DECODED, experts_from_tensors, tensor_layer_types
from servelab.errors import ConfigError
from servelab.families import ModelDims, family_for, model_dims
from servelab.units import GIB, format_bytes

SCHEMA = "servelab.inspect/1"



def _ro(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class SourceIdentity:
    """Where the report came from and which exact headers it describes."""

    location: str
    kind: str
    revision: str | None
    commit: str | None
    header_sha256: str
    bytes_fetched: int
    shards: int


@dataclass(frozen=True)
class DtypeStats:
    """Tensors, stored bytes and stored elements of one dtype."""

    dtype: str
    tensors: int
    bytes: int
    elements: int


@dataclass(frozen=True)
class RoleStats:
    """One role's share of the checkpoint (see the module docstring for definitions)."""

    role: str
    tensors: int
    bytes: int
    bytes_incl_scales: int
    params: int
    dtypes: Mapping[str, int]
    decode_bytes: int

    @property
    def effective_bits(self) -> float | None:
        """Bytes incl. scales × 8 per logical weight; ``None`` for roles without weights."""
        return self.bytes_incl_scales * 8 / self.params if self.params else None


@dataclass(frozen=True)
class CheckpointReport:
    """Everything servelab knows about a checkpoint from its headers and configs.

    Consumers (the planner) should use the plain fields: ``total_bytes``,
    ``bytes_by_role``, ``bytes_by_role_incl_scales``, ``bytes_by_dtype``,
    ``decode_bytes_per_token`` and ``decode_bytes_by_role``, ``num_layers``,
    ``layer_types``, ``num_experts``, ``experts_per_token``, ``active_params``,
    ``total_params``, ``quant``, ``text_config``, ``findings``, ``source``.
    """

    source: SourceIdentity
    tensor_count: int
    total_bytes: int
    total_params: int
    active_params: int
    dtypes: tuple[DtypeStats, ...]
    roles: tuple[RoleStats, ...]
    num_layers: int | None
    num_layers_from_tensors: int | None
    layer_types: tuple[str, ...]
    layer_types_from_tensors: tuple[str, ...]
    num_experts: int | None
    experts_per_token: int | None
    expert_layout: str | None
    has_shared_expert: bool
    quant: QuantScheme
    routed_expert_bits: float | None
    decode_bytes_per_token: int
    decode_bytes_by_role: Mapping[str, int]
    routed_fraction: float | None
    mtp_declared_layers: int
    mtp_tensors: int
    mtp_bytes: int
    vision_tensors: int
    vision_bytes: int
    tie_word_embeddings: bool
    text_config: Mapping[str, Any]
    model_type: str | None
    architectures: tuple[str, ...]
    findings: tuple[Finding, ...] = ()

    schema: str = SCHEMA
    dims: ModelDims | None = dataclasses.field(default=None, repr=False, compare=False)
    """The config as its model family reads it (the one reading a plan uses; ``None`` when
    there is no config or its family cannot read it). Not part of the JSON report."""
    family: str = ""
    """The model family of ``dims`` (:mod:`servelab.families`), "" without them."""

    # -- plain views -----------------------------------------------------------------
    @property
    def total_gib(self) -> float:
        """Total stored bytes in GiB."""
        return self.total_bytes / GIB

    @property
    def bytes_by_dtype(self) -> Mapping[str, int]:
        """Stored bytes per dtype."""
        return _ro({d.dtype: d.bytes for d in self.dtypes})

    @property
    def elements_by_dtype(self) -> Mapping[str, int]:
        """Stored elements per dtype (packed weights count as stored, see params)."""
        return _ro({d.dtype: d.elements for d in self.dtypes})

    @property
    def bytes_by_role(self) -> Mapping[str, int]:
        """Stored bytes per primary role (scales under ``quant_scale``); sums to total."""
        return _ro({r.role: r.bytes for r in self.roles if r.tensors})

    @property
    def bytes_by_role_incl_scales(self) -> Mapping[str, int]:
        """Stored bytes per role with each scale counted in the role it scales."""
        return _ro({r.role: r.bytes_incl_scales for r in self.roles if r.bytes_incl_scales})

    @property
    def params_by_role(self) -> Mapping[str, int]:
        """Logical weight elements per role."""
        return _ro({r.role: r.params for r in self.roles if r.params})

    def role(self, role: Role | str) -> RoleStats:
        """The stats of one role (zeros when absent)."""
        key = Role(role).value
        for r in self.roles:
            if r.role == key:
                return r
        return RoleStats(key, 0, 0, 0, 0, _ro({}), 0)

    # -- export ------------------------------------------------------------------------
    def to_json_dict(self) -> dict[str, Any]:
        """The report as plain JSON types, schema ``servelab.inspect/1``."""
        q = self.quant
        counts = Counter(self.layer_types)
        return {
            "schema": self.schema,
            "source": dataclasses.asdict(self.source),
            "model": {"model_type": self.model_type, "architectures": list(self.architectures)},
            "tensor_count": self.tensor_count,
            "total_bytes": self.total_bytes,
            "total_gib": round(self.total_gib, 4),
            "params": {"total": self.total_params, "active": self.active_params},
            "dtypes": [
                {
                    "dtype": d.dtype,
                    "tensors": d.tensors,
                    "bytes": d.bytes,
                    "elements": d.elements,
                    "gib": round(d.bytes / GIB, 4),
                }
                for d in self.dtypes
            ],
            "roles": [
                {
                    "role": r.role,
                    "tensors": r.tensors,
                    "bytes": r.bytes,
                    "gib": round(r.bytes / GIB, 4),
                    "bytes_incl_scales": r.bytes_incl_scales,
                    "gib_incl_scales": round(r.bytes_incl_scales / GIB, 4),
                    "params": r.params,
                    "effective_bits": _round(r.effective_bits, 3),
                    "dtypes": dict(r.dtypes),
                    "decode_bytes": r.decode_bytes,
                }
                for r in self.roles
                if r.tensors or r.bytes_incl_scales
            ],
            "layers": {
                "count": self.num_layers,
                "types": list(self.layer_types),
                "types_from_tensors": list(self.layer_types_from_tensors),
                "counts": dict(counts),
            },
            "experts": {
                "total": self.num_experts,
                "per_token": self.experts_per_token,
                "layout": self.expert_layout,
                "shared_expert": self.has_shared_expert,
            },
            "quant": {
                "method": q.method,
                "format": q.format,
                "label": q.label,
                "declared_in": q.declared_in,
                "ignore": list(q.ignore),
                "kv_cache_bits": q.kv_cache_bits,
                "groups": [
                    {
                        "name": g.name,
                        "targets": list(g.targets),
                        "format": g.format,
                        "weights": _args_json(g.weights),
                        "input_activations": _args_json(g.input_activations),
                    }
                    for g in q.groups
                ],
                "routed_expert_bits": _round(self.routed_expert_bits, 3),
            },
            "decode": {
                "bytes_per_token": self.decode_bytes_per_token,
                "gib_per_token": round(self.decode_bytes_per_token / GIB, 4),
                "routed_fraction": _round(self.routed_fraction, 6),
                "by_role": dict(self.decode_bytes_by_role),
            },
            "mtp": {
                "declared_layers": self.mtp_declared_layers,
                "tensors": self.mtp_tensors,
                "bytes": self.mtp_bytes,
            },
            "vision": {"tensors": self.vision_tensors, "bytes": self.vision_bytes},
            "tie_word_embeddings": self.tie_word_embeddings,
            "findings": [f.to_json_dict() for f in self.findings],
        }

    def to_markdown(self) -> str:
        """A Markdown rendering (tables) suitable for a recipe page or an issue."""
        lines = [
            f"## Checkpoint `{self.source.location}`",
            "",
            f"- {self.tensor_count:,} tensors, {self.total_bytes:,} bytes "
            f"({format_bytes(self.total_bytes)}), {self.total_params / 1e9:.2f} B params "
            f"({self.active_params / 1e9:.2f} B active per token)",
            f"- quantization: {self.quant.label}"
            + (
                f"; routed experts {self.routed_expert_bits:.2f} bits/weight incl. scales"
                if self.routed_expert_bits
                else ""
            ),
            f"- layers: {self.num_layers if self.num_layers is not None else '?'}"
            + (f" ({_layer_summary(self.layer_types)})" if self.layer_types else ""),
        ]
        if self.num_experts:
            lines.append(
                f"- experts: {self.num_experts} routed, top-{self.experts_per_token or '?'}"
                f", {self.expert_layout or '?'} layout"
                + (", plus a shared expert" if self.has_shared_expert else "")
            )
        lines.append(
            f"- MTP: config declares {self.mtp_declared_layers} layer(s); "
            f"{self.mtp_tensors:,} MTP tensors ship ({format_bytes(self.mtp_bytes)})"
        )
        lines.append(
            f"- decode reads {format_bytes(self.decode_bytes_per_token)} per generated token "
            "(weights only; KV/state excluded)"
        )
        lines += ["", "| dtype | tensors | size | elements |", "|---|---:|---:|---:|"]
        for d in self.dtypes:
            size = format_bytes(d.bytes)
            lines.append(f"| {d.dtype} | {d.tensors:,} | {size} | {d.elements:,} |")
        lines += [
            "",
            "| role | tensors | size | incl. scales | bits/weight | decode read/token |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in self.roles:
            if not (r.tensors or r.bytes_incl_scales):
                continue
            bits = f"{r.effective_bits:.2f}" if r.effective_bits else "–"
            lines.append(
                f"| {r.role} | {r.tensors:,} | {format_bytes(r.bytes)} | "
                f"{format_bytes(r.bytes_incl_scales)} | {bits} | {format_bytes(r.decode_bytes)} |"
            )
        if self.findings:
            lines += ["", "| finding | severity | explanation |", "|---|---|---|"]
            for f in self.findings:
                msg = f.message.replace("|", "\\|")
                lines.append(f"| `{f.code}` | {f.severity} | {msg} |")
        return "\n".join(lines) + "\n"


def _round(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)


def _args_json(a: QuantArgs | None) -> dict[str, Any] | None:
    if a is None:
        return None
    d = dataclasses.asdict(a)
    if a.block_structure is not None:
        d["block_structure"] = list(a.block_structure)
    return d


def _layer_summary(types: Sequence[str]) -> str:
    c = Counter(types)
    return ", ".join(f"{n} {t}" for t, n in c.most_common())


def _family_dims(
    config: Mapping[str, Any] | None, location: str
) -> tuple[ModelDims | None, Finding | None]:
    """The config as its model family reads it (the reading plan uses), or why not."""
    if not config:
        return None, None
    source = f"{location}/config.json"
    try:
        return model_dims(config, source), None
    except ConfigError as e:
        return None, Finding(
            "config-unread",
            WARNING,
            f"{e}; layer types, experts and MTP come from the tensors alone",
        )


def build_report(source: CheckpointSource) -> CheckpointReport:
    """Analyse a loaded checkpoint (headers + configs); pure, no I/O."""
    tensors = source.tensors
    text_cfg = _text_config(source.config)
    dims, unread = _family_dims(source.config, str(source.location))
    n_layers_cfg = dims.num_layers if dims else None
    hint = None
    family = ""
    if dims is not None:
        fam = family_for(source.config or {})
        family = fam.name
        hint = fam.role_hint(dims) if fam.role_hint else None
    classify = RoleClassifier(n_layers_cfg, hint)
    roles = [classify(t.name) for t in tensors]
    quant = detect_quant(source.config, source.quant_config)

    # One pass: aggregate (primary role, base role, dtype) -> [tensors, bytes, elements];
    # everything by dtype / by role is summed from this small table.
    agg: dict[tuple[Role, Role, str], list[int]] = {}
    embed_row_bytes = 0
    embed_row_params = 0
    for t, r in zip(tensors, roles, strict=True):
        key = (r.role, r.base, t.dtype)
        a = agg.get(key)
        if a is None:
            a = agg[key] = [0, 0, 0]
        nb, ne = t.end - t.begin, math.prod(t.shape)
        a[0] += 1
        a[1] += nb
        a[2] += ne
        if r.base is Role.EMBEDDING and len(t.shape) >= 2 and t.shape[0]:
            embed_row_bytes += nb // t.shape[0]
            if not r.is_scale:
                embed_row_params += ne * quant.packing_factor(t.dtype) // t.shape[0]
    d_t: Counter[str] = Counter()
    d_b: Counter[str] = Counter()
    d_e: Counter[str] = Counter()
    r_t: Counter[Role] = Counter()
    r_b: Counter[Role] = Counter()
    r_bs: Counter[Role] = Counter()
    r_p: Counter[Role] = Counter()
    r_dt: dict[Role, Counter[str]] = defaultdict(Counter)
    for (role, base, dtype), (n, nb, ne) in agg.items():
        d_t[dtype] += n
        d_b[dtype] += nb
        d_e[dtype] += ne
        r_t[role] += n
        r_b[role] += nb
        r_dt[role][dtype] += nb
        r_bs[base] += nb
        if role is not Role.QUANT_SCALE:
            r_p[base] += ne * quant.packing_factor(dtype)

    tie = dims.tie_word_embeddings if dims else False
    n_exp_cfg = (dims.num_experts or None) if dims else None
    topk = (dims.experts_per_token or None) if dims else None
    n_exp_t, layout = experts_from_tensors(tensors, roles)
    num_experts = n_exp_cfg if n_exp_cfg is not None else n_exp_t
    routed_fraction: float | None = None
    if r_bs[Role.ROUTED_EXPERT]:
        routed_fraction = (topk / num_experts) if (topk and num_experts) else 1.0

    # decode bytes per token and active params
    has_lm_head = r_bs[Role.LM_HEAD] > 0
    decode: dict[Role, int] = {}
    active = 0
    for role in ROLE_ORDER:
        if role is Role.QUANT_SCALE:
            continue
        b, p = r_bs[role], r_p[role]
        if role in NOT_DECODED:
            db, ap = 0, 0
        elif role is Role.ROUTED_EXPERT:
            frac = routed_fraction or 0.0
            db, ap = round(b * frac), round(p * frac)
        elif role is Role.EMBEDDING:
            db, ap = embed_row_bytes, embed_row_params
        else:
            db, ap = b, p
        decode[role] = db
        active += ap
    if tie and not has_lm_head:
        decode[Role.LM_HEAD] = r_bs[Role.EMBEDDING]
        active += r_p[Role.EMBEDDING]

    role_stats = tuple(
        RoleStats(
            role=role.value,
            tensors=r_t[role],
            bytes=r_b[role],
            bytes_incl_scales=r_bs[role],  # 0 for quant_scale: folded into its roles
            params=r_p[role],
            dtypes=_ro(dict(r_dt[role].most_common())),
            decode_bytes=decode.get(role, 0),
        )
        for role in ROLE_ORDER
    )
    routed = next(s for s in role_stats if s.role == Role.ROUTED_EXPERT.value)

    cfg_types = dims.layer_types if dims else ()
    t_types, n_layers_t = tensor_layer_types(tensors, roles)
    num_layers = n_layers_cfg if n_layers_cfg is not None else n_layers_t
    layer_types = cfg_types or t_types
    total_bytes = sum(d_b.values())
    cfg = source.config or {}
    archs = cfg.get("architectures")
    report = CheckpointReport(
        source=SourceIdentity(
            location=source.location,
            kind=str(source.kind),
            revision=source.revision,
            commit=source.commit,
            header_sha256=source.header_sha256,
            bytes_fetched=source.bytes_fetched,
            shards=len(source.shards),
        ),
        tensor_count=len(tensors),
        total_bytes=total_bytes,
        total_params=sum(r_p.values()),
        active_params=active,
        dtypes=tuple(
            DtypeStats(dt, d_t[dt], d_b[dt], d_e[dt])
            for dt in sorted(d_b, key=lambda k: (-d_b[k], k))
        ),
        roles=role_stats,
        num_layers=num_layers,
        num_layers_from_tensors=n_layers_t,
        layer_types=layer_types,
        layer_types_from_tensors=t_types,
        num_experts=num_experts,
        experts_per_token=topk if num_experts else None,
        expert_layout=layout,
        has_shared_expert=r_bs[Role.SHARED_EXPERT] > 0,
        quant=quant,
        routed_expert_bits=routed.effective_bits,
        decode_bytes_per_token=sum(decode.values()),
        decode_bytes_by_role=_ro({k.value: v for k, v in decode.items() if v}),
        routed_fraction=routed_fraction,
        mtp_declared_layers=dims.mtp_layers if dims else 0,
        mtp_tensors=sum(1 for r in roles if r.base is Role.MTP),
        mtp_bytes=r_bs[Role.MTP],
        vision_tensors=sum(1 for r in roles if r.base is Role.VISION),
        vision_bytes=r_bs[Role.VISION],
        tie_word_embeddings=tie,
        text_config=_ro(text_cfg),
        model_type=str(cfg["model_type"]) if "model_type" in cfg else None,
        architectures=tuple(str(a) for a in archs) if isinstance(archs, list) else (),
        dims=dims,
        family=family,
    )
    findings = lint_checkpoint(
        LintContext(
            tensors=tensors,
            roles=roles,
            text_config=text_cfg,
            quant=quant,
            num_layers_config=n_layers_cfg,
            num_layers_tensors=n_layers_t,
            layer_types_config=cfg_types,
            layer_types_tensors=t_types,
            num_experts_config=n_exp_cfg,
            num_experts_tensors=n_exp_t,
            experts_per_token=topk,
            tie_word_embeddings=tie,
            mtp_declared_layers=dims.mtp_layers if dims else 0,
        )
    )
    source_findings = tuple(
        Finding(f"source-{w.code}", "warning", w.message) for w in source.warnings
    ) + ((unread,) if unread else ())
    return dataclasses.replace(report, findings=source_findings + findings)


def inspect_checkpoint(
    location: str | Path,
    *,
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> CheckpointReport:
    """Read a checkpoint's headers and configs (local path or Hub repo id) and report."""
    source = load_checkpoint(location, revision=revision, token=token, endpoint=endpoint)
    return build_report(source)
