"""Hardware profiles: memory, bandwidth, dense compute by precision, kernel paths.

Every published figure carries its source. Figures marked ``derived`` are computed from a
published one by a stated rule (e.g. a sparse TFLOP/s figure halved for dense); they are
leads to be replaced by a measurement (``servelab hardware probe``), never results.

User profiles come from TOML (see :func:`load_profiles_toml` for the schema).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from servelab.errors import HardwareProfileError

GB = 10**9
GIB = 1 << 30
TERA = 10**12
PRECISIONS = ("fp32", "bf16", "fp8", "fp4")


@dataclass(frozen=True)
class KernelPath:
    """How an engine runs one weight scheme on this hardware."""

    name: str
    compute: str
    note: str = ""


@dataclass(frozen=True)
class HardwareProfile:
    """One machine (per device): memory, bandwidth, compute and kernel paths.

    ``bandwidth`` is bytes/s, ``compute`` FLOP/s by precision (dense). ``measured_*``
    hold probe results when a probe was applied; predictions prefer them.
    """

    name: str
    description: str
    memory_bytes: int
    unified: bool
    bandwidth: float
    compute: Mapping[str, float]
    arch: str
    platform: str
    kernel_paths: Mapping[str, KernelPath] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    measured_bandwidth: float | None = None
    measured_compute: Mapping[str, float] = field(default_factory=dict)
    origin: str = "built-in"

    def compute_rate(self, precision: str) -> float | None:
        """Dense FLOP/s at ``precision``, measured when probed, else published/derived."""
        if precision in self.measured_compute:
            return self.measured_compute[precision]
        return self.compute.get(precision)

    def effective_bandwidth_ceiling(self) -> tuple[float, str]:
        """The bandwidth a roofline should use and where it came from."""
        if self.measured_bandwidth:
            return self.measured_bandwidth, "measured (probe)"
        return self.bandwidth, self.sources.get("bandwidth", "published")

    def kernel_path(self, scheme: str, *, moe: bool) -> KernelPath:
        """The kernel path an engine takes for weight ``scheme`` (``bf16``, ``fp8``, …)."""
        for key in ((f"{scheme}_moe",) if moe else ()) + (scheme,):
            if key in self.kernel_paths:
                return self.kernel_paths[key]
        base = "fp8" if scheme.startswith("fp8") else "bf16"
        if scheme.startswith(("nvfp4", "mxfp4")) and "fp4" in self.compute:
            base = "fp4"
        kind = "MoE" if moe else "dense"
        return KernelPath(f"{scheme} {kind} (default)", base, "no specific path recorded")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "description": self.description,
            "memory_bytes": self.memory_bytes,
            "memory_gib": round(self.memory_bytes / GIB, 2),
            "unified": self.unified,
            "bandwidth_bytes_per_s": self.bandwidth,
            "compute_flops_per_s": dict(self.compute),
            "arch": self.arch,
            "platform": self.platform,
            "kernel_paths": {
                k: {"name": v.name, "compute": v.compute, "note": v.note}
                for k, v in self.kernel_paths.items()
            },
            "sources": dict(self.sources),
            "measured_bandwidth_bytes_per_s": self.measured_bandwidth,
            "measured_compute_flops_per_s": dict(self.measured_compute),
            "origin": self.origin,
        }


_SM12X_FP4_MOE = KernelPath(
    "MARLIN W4A16",
    "bf16",
    "vLLM on SM12x runs NVFP4 MoE through Marlin (dequantize to BF16): no FP4 compute",
)
_MARLIN_W4 = KernelPath("MARLIN W4A16", "bf16", "weight-only 4-bit: dequantize to BF16")
_FP8_W8A8 = KernelPath("TRITON Fp8 W8A8", "fp8", "FP8 weights and dynamic FP8 activations")
_FP8_MARLIN = KernelPath(
    "MARLIN W8A16", "bf16", "weight-only FP8 on a part without FP8 tensor cores"
)
_NVFP4_NATIVE = KernelPath("CUTLASS NVFP4", "fp4", "native FP4 tensor cores")

_SPEC = "NVIDIA spec sheet"


# Kernel paths vLLM takes on SM12x (Spark, RTX PRO 6000, RTX 5090): FP4 MoE falls back to
# Marlin W4A16, FP8 gets a W8A8 path.
_SM12X_KERNEL_PATHS: dict[str, KernelPath] = {
    "nvfp4_moe": _SM12X_FP4_MOE,
    "nvfp4a16": _MARLIN_W4,
    "int4": _MARLIN_W4,
    "fp8": _FP8_W8A8,
}


def _builtin() -> dict[str, HardwareProfile]:
    p: list[HardwareProfile] = [
        HardwareProfile(
            name="dgx-spark",
            description="NVIDIA DGX Spark (GB10 Grace Blackwell, sm_121)",
            memory_bytes=128 * GIB,
            unified=True,
            bandwidth=273 * GB,
            compute={"bf16": 125 * TERA, "fp8": 250 * TERA, "fp4": 500 * TERA},
            arch="sm_121",
            platform="cuda",
            kernel_paths={**_SM12X_KERNEL_PATHS, "fp8a16": _FP8_MARLIN},
            sources={
                "memory": "NVIDIA DGX Spark: 128 GB unified LPDDR5X; as listed in facts.md",
                "bandwidth": "NVIDIA DGX Spark: 273 GB/s; as listed in facts.md",
                "compute": "derived: 1 PFLOP FP4 with sparsity (NVIDIA) / 2 for dense, "
                "/ 2 per precision step",
                "kernel_paths": "facts.md: SM12x NVFP4 MoE -> Marlin W4A16; seed recipe: "
                "FP8 build selects TRITON Fp8 MoE",
            },
        ),
        HardwareProfile(
            name="h100",
            description="NVIDIA H100 SXM 80 GB (Hopper, sm_90)",
            memory_bytes=80 * GIB,
            unified=False,
            bandwidth=3.35 * TERA,
            compute={"bf16": 989 * TERA, "fp8": 1979 * TERA},
            arch="sm_90",
            platform="cuda",
            kernel_paths={
                "nvfp4": _MARLIN_W4,
                "nvfp4a16": _MARLIN_W4,
                "int4": _MARLIN_W4,
                "fp8": _FP8_W8A8,
            },
            sources={
                "memory": _SPEC + ": 80 GB HBM3",
                "bandwidth": _SPEC + ": 3.35 TB/s",
                "compute": _SPEC + ": BF16 989 / FP8 1,979 TFLOP/s dense",
                "kernel_paths": "Hopper has no FP4 tensor cores: FP4 weights run W4A16",
            },
        ),
        HardwareProfile(
            name="h200",
            description="NVIDIA H200 141 GB (Hopper, sm_90)",
            memory_bytes=143771 << 20,
            unified=False,
            bandwidth=4.8 * TERA,
            compute={"bf16": 989 * TERA, "fp8": 1979 * TERA},
            arch="sm_90",
            platform="cuda",
            kernel_paths={
                "nvfp4": _MARLIN_W4,
                "nvfp4a16": _MARLIN_W4,
                "int4": _MARLIN_W4,
                "fp8": _FP8_W8A8,
            },
            sources={
                "memory": _SPEC + ": 141 GB HBM3e; nvidia-smi on a real H200 reports "
                "143,771 MiB (used here)",
                "bandwidth": _SPEC + ": 4.8 TB/s (servelab's GPU probe on a real H200: 4.27 TB/s "
                "copy, tests/hardware/data/h200_probe.json)",
                "compute": _SPEC + ": same tensor cores as H100 SXM (BF16 989, FP8 1,979 "
                "TFLOP/s dense)",
                "kernel_paths": "Hopper has no FP4 tensor cores: FP4 weights run W4A16",
            },
        ),
        HardwareProfile(
            name="b200",
            description="NVIDIA B200 (Blackwell, sm_100)",
            memory_bytes=180 * GIB,
            unified=False,
            bandwidth=8 * TERA,
            compute={"bf16": 2250 * TERA, "fp8": 4500 * TERA, "fp4": 9000 * TERA},
            arch="sm_100",
            platform="cuda",
            kernel_paths={
                "nvfp4": _NVFP4_NATIVE,
                "nvfp4a16": _MARLIN_W4,
                "int4": _MARLIN_W4,
                "fp8": _FP8_W8A8,
            },
            sources={
                "memory": _SPEC + ": 180-192 GB HBM3e (180 used here)",
                "bandwidth": _SPEC + ": 8 TB/s",
                "compute": _SPEC + " (HGX B200): BF16 2.25 / FP8 4.5 / FP4 9 PFLOP/s dense",
            },
        ),
        HardwareProfile(
            name="rtx-pro-6000",
            description="NVIDIA RTX PRO 6000 Blackwell 96 GB (sm_120)",
            memory_bytes=96 * GIB,
            unified=False,
            bandwidth=1.792 * TERA,
            compute={"bf16": 500 * TERA, "fp8": 1000 * TERA, "fp4": 2000 * TERA},
            arch="sm_120",
            platform="cuda",
            kernel_paths=dict(_SM12X_KERNEL_PATHS),
            sources={
                "memory": _SPEC + ": 96 GB GDDR7",
                "bandwidth": _SPEC + ": 1.79 TB/s; as listed in facts.md",
                "compute": "derived: 4,000 AI TOPS FP4 with sparsity / 2 for dense, / 2 per "
                "precision step",
                "kernel_paths": "SM12x like the Spark: NVFP4 MoE -> Marlin W4A16",
            },
        ),
        HardwareProfile(
            name="rtx-5090",
            description="NVIDIA GeForce RTX 5090 32 GB (sm_120)",
            memory_bytes=32 * GIB,
            unified=False,
            bandwidth=1.792 * TERA,
            compute={"bf16": 209.5 * TERA, "fp8": 419 * TERA, "fp4": 838 * TERA},
            arch="sm_120",
            platform="cuda",
            kernel_paths=dict(_SM12X_KERNEL_PATHS),
            sources={
                "memory": "NVIDIA: 32 GB GDDR7",
                "bandwidth": "NVIDIA: 1.79 TB/s; as listed in facts.md",
                "compute": "derived: 3,352 AI TOPS FP4 with sparsity / 2 dense, / 2 per "
                "precision step, BF16 at GeForce's FP32-accumulate half rate",
                "kernel_paths": "SM12x like the Spark: NVFP4 MoE -> Marlin W4A16",
            },
        ),
        HardwareProfile(
            name="m4-max",
            description="Apple M4 Max (40-core GPU, up to 128 GB unified)",
            memory_bytes=128 * GIB,
            unified=True,
            bandwidth=546 * GB,
            compute={"fp32": 18.4 * TERA, "bf16": 18.4 * TERA},
            arch="apple-gpu",
            platform="mps",
            kernel_paths={},
            sources={
                "memory": "Apple: up to 128 GB unified memory",
                "bandwidth": "Apple: 546 GB/s; as listed in facts.md",
                "compute": "derived: 40 GPU cores x 128 ALUs x 2 FLOP x ~1.8 GHz; no FP8/FP4 "
                "units (quantized weights dequantize to 16-bit)",
            },
        ),
    ]
    return {x.name: x for x in p}


BUILTIN: Mapping[str, HardwareProfile] = MappingProxyType(_builtin())
HOST = "host"


def profile_names() -> tuple[str, ...]:
    """Names of the built-in profiles, plus ``host``."""
    return (*BUILTIN, HOST)


def _num(table: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> float:
    v = table.get(key)
    if v is None and not required:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise HardwareProfileError(f"{where}.{key} must be a positive number, got {v!r}")
    return float(v)


def parse_profile(name: str, table: Mapping[str, Any], *, origin: str) -> HardwareProfile:
    """One ``[profile.NAME]`` table -> :class:`HardwareProfile` (see module docs)."""
    where = f"profile.{name}"
    base_name = table.get("base")
    base = BUILTIN.get(str(base_name)) if base_name is not None else None
    if base_name is not None and base is None:
        raise HardwareProfileError(f"{where}.base = {base_name!r} is not a built-in profile")
    compute_t = table.get("compute_tflops", {})
    if not isinstance(compute_t, Mapping):
        raise HardwareProfileError(f"{where}.compute_tflops must be a table")
    compute = {
        str(k): _num(compute_t, k, f"{where}.compute_tflops") * TERA for k in compute_t
    }
    for k in compute:
        if k not in PRECISIONS:
            raise HardwareProfileError(
                f"{where}.compute_tflops.{k}: precision must be one of {', '.join(PRECISIONS)}"
            )
    paths_t = table.get("kernel_paths", {})
    if not isinstance(paths_t, Mapping):
        raise HardwareProfileError(f"{where}.kernel_paths must be a table")
    paths: dict[str, KernelPath] = dict(base.kernel_paths) if base else {}
    for k, v in paths_t.items():
        if not isinstance(v, Mapping) or not isinstance(v.get("path"), str):
            raise HardwareProfileError(f"{where}.kernel_paths.{k} needs path = \"...\"")
        comp = str(v.get("compute", "bf16"))
        if comp not in PRECISIONS:
            raise HardwareProfileError(f"{where}.kernel_paths.{k}.compute = {comp!r} is unknown")
        paths[str(k)] = KernelPath(str(v["path"]), comp, str(v.get("note", "")))
    sources_t = table.get("sources", {})
    if not isinstance(sources_t, Mapping):
        raise HardwareProfileError(f"{where}.sources must be a table")
    unknown = set(table) - {
        "base", "description", "memory_gib", "unified", "bandwidth_gbs", "compute_tflops",
        "arch", "platform", "kernel_paths", "sources",
    }
    if unknown:
        raise HardwareProfileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if base is None:
        for req in ("memory_gib", "bandwidth_gbs"):
            if req not in table:
                raise HardwareProfileError(f"{where}.{req} is required (or set base = ...)")
    memory = (
        int(_num(table, "memory_gib", where) * GIB) if "memory_gib" in table else base.memory_bytes  # type: ignore[union-attr]
    )
    bandwidth = (
        _num(table, "bandwidth_gbs", where) * GB if "bandwidth_gbs" in table else base.bandwidth  # type: ignore[union-attr]
    )
    unified = table.get("unified", base.unified if base else False)
    if not isinstance(unified, bool):
        raise HardwareProfileError(f"{where}.unified must be true or false")
    sources = dict(base.sources) if base else {}
    sources.update({str(k): str(v) for k, v in sources_t.items()})
    merged_compute = dict(base.compute) if base else {}
    merged_compute.update(compute)
    return HardwareProfile(
        name=name,
        description=str(table.get("description", base.description if base else name)),
        memory_bytes=memory,
        unified=unified,
        bandwidth=bandwidth,
        compute=merged_compute,
        arch=str(table.get("arch", base.arch if base else "unknown")),
        platform=str(table.get("platform", base.platform if base else "cuda")),
        kernel_paths=paths,
        sources=sources,
        origin=origin,
    )


def load_profiles_toml(path: str | Path) -> dict[str, HardwareProfile]:
    """Read user profiles from a TOML file.

    Schema::

        [profile.my-gpu]
        description = "Workstation with one RTX 6000 Ada"
        base = "h100"            # optional: start from a built-in, override below
        memory_gib = 48
        unified = false
        bandwidth_gbs = 960
        arch = "sm_89"
        platform = "cuda"
        [profile.my-gpu.compute_tflops]
        bf16 = 182
        fp8 = 364
        [profile.my-gpu.kernel_paths]
        nvfp4 = { path = "MARLIN W4A16", compute = "bf16", note = "no FP4 units" }
        [profile.my-gpu.sources]
        bandwidth = "vendor spec sheet"
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise HardwareProfileError("hardware profile file not found", path=p) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise HardwareProfileError(f"not valid TOML: {exc}", path=p) from exc
    profiles = data.get("profile")
    if not isinstance(profiles, Mapping) or not profiles:
        raise HardwareProfileError("no [profile.NAME] tables", path=p)
    out: dict[str, HardwareProfile] = {}
    for name, table in profiles.items():
        if not isinstance(table, Mapping):
            raise HardwareProfileError(f"profile.{name} must be a table", path=p)
        try:
            out[str(name)] = parse_profile(str(name), table, origin=str(p))
        except HardwareProfileError as exc:
            raise HardwareProfileError(exc.message, path=p) from exc
    return out


def check_profile_name(name: str, *, files: Iterable[str | Path] = ()) -> str:
    """``name`` if it names a profile (built-in, ``host`` or in ``files``), without probing
    the host; HardwareProfileError listing the known names otherwise."""
    user: dict[str, HardwareProfile] = {}
    for f in files:
        user.update(load_profiles_toml(f))
    if name in user or name in BUILTIN or name == HOST:
        return name
    known = ", ".join([*user, *profile_names()])
    raise HardwareProfileError(f"unknown hardware profile {name!r}; known: {known}")


def with_probe(
    profile: HardwareProfile, *, bandwidth: float | None, compute: Mapping[str, float]
) -> HardwareProfile:
    """``profile`` with measured ceilings from a probe."""
    return replace(
        profile,
        measured_bandwidth=bandwidth,
        measured_compute={**profile.measured_compute, **compute},
    )


def profile_from_dict(d: Mapping[str, Any]) -> HardwareProfile:
    """The profile :meth:`HardwareProfile.to_dict` wrote (as stored with a run), e.g. the
    ``host`` a run measured; KeyError/TypeError/ValueError on a document that is not one."""
    paths = d.get("kernel_paths") or {}
    return HardwareProfile(
        name=str(d["name"]), description=str(d.get("description") or d["name"]),
        memory_bytes=int(d["memory_bytes"]), unified=bool(d.get("unified")),
        bandwidth=float(d["bandwidth_bytes_per_s"]),
        compute={str(k): float(v) for k, v in (d.get("compute_flops_per_s") or {}).items()},
        arch=str(d.get("arch") or ""), platform=str(d["platform"]),
        kernel_paths={str(k): KernelPath(str(v["name"]), str(v["compute"]), str(v.get("note", "")))
                      for k, v in paths.items()},
        sources={str(k): str(v) for k, v in (d.get("sources") or {}).items()},
        measured_bandwidth=(float(d["measured_bandwidth_bytes_per_s"])
                            if d.get("measured_bandwidth_bytes_per_s") else None),
        measured_compute={str(k): float(v) for k, v in
                          (d.get("measured_compute_flops_per_s") or {}).items()},
        origin=str(d.get("origin") or "stored with a run"),
    )
