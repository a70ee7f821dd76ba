"""AIConfigurator's per-operator tables as a second source (the optional extra
``servelab[aiconfigurator]``: ``aiconfigurator-core``, Apache-2.0, NVIDIA).

AIConfigurator (github.com/ai-dynamo/aiconfigurator) ships per-operator latencies measured
on each GPU with each engine version under ``aiconfigurator_core/systems/data/<system>/<op>/
<engine>/<version>/*.parquet``, one row per measured point with ``framework``, ``version``,
``device``, ``op_name``, ``kernel_source``, the operator's shape and ``latency`` in ms. Its
columns are the ones :mod:`servelab.ops.tables` uses, so its rows become a :class:`TableSet`
read by the same :class:`~servelab.ops.costs.Costs`:

==========================================  ==================================================
AIConfigurator file                         servelab table (adaptation)
==========================================  ==================================================
gemm/gemm_perf                              gemm (as is)
moe/moe_perf                                moe (``distribution == "balanced"`` only; its
                                            experts are tensor-/expert-parallel 1)
attention/generation_attention_perf         generation_attention (``step``: cached tokens)
attention/context_attention_perf            context_attention (batch 1; ``prefix`` = 0: its
                                            prefills have no cached prefix)
linear_attention/gdn_perf                   gdn: the kernels of one phase summed per shape
                                            (conv + core), ``state_dtype`` unknown
==========================================  ==================================================

Reading needs ``pyarrow`` (a dependency of the extra); without the extra installed,
:func:`available` is False and :func:`load` raises a clear :class:`UsageError`.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.errors import UsageError
from servelab.ops.roofline import Device
from servelab.ops.tables import Provenance, Table, TableSet

#: The extra's pinned version (pyproject.toml: [project.optional-dependencies] aiconfigurator).
PINNED = "0.12.0"
#: servelab hardware profile name -> AIConfigurator system name.
SYSTEMS: Mapping[str, str] = {
    "h200": "h200_sxm", "h100": "h100_sxm", "b200": "b200_sxm", "gb200": "gb200",
    "rtx-pro-6000": "rtx_pro_6000_server", "l40s": "l40s", "a100": "a100_sxm",
}


def available() -> bool:
    """Whether the optional extra is installed (``aiconfigurator_core`` and ``pyarrow``)."""
    return (importlib.util.find_spec("aiconfigurator_core") is not None and
            importlib.util.find_spec("pyarrow") is not None)


def data_root() -> Path:
    """``aiconfigurator_core/systems/data`` of the installed extra."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        raise UsageError("AIConfigurator's tables need the optional extra: "
                         "pip install 'servelab[aiconfigurator]'")
    return Path(spec.origin).parent / "systems" / "data"


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as e:
        raise UsageError("reading AIConfigurator's tables needs pyarrow "
                         "(pip install 'servelab[aiconfigurator]')") from e
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def _gdn(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (phase, shape, tokens): the phase's kernels summed."""
    acc: dict[tuple[Any, ...], dict[str, Any]] = {}
    sums: dict[tuple[Any, ...], float] = defaultdict(float)
    for r in rows:
        if r["phase"] == "context" and r["batch_size"] != 1:
            continue  # servelab's step reads one sequence's prefill per call
        key = (r["phase"], r["batch_size"], r["num_tokens"], r["num_k_heads"],
               r["head_k_dim"], r["num_v_heads"], r["head_v_dim"], r["d_conv"])
        sums[key] += float(r["latency"])
        acc.setdefault(key, {**r, "kernel_source": "aic_gdn_sum", "state_dtype": None})
    return [{**acc[k], "latency": v} for k, v in sums.items()]


def load(hardware: str, engine: str = "vllm", version: str | None = None,
         root: Path | None = None) -> TableSet:
    """AIConfigurator's tables for ``hardware`` (a servelab profile name or an
    AIConfigurator system name) and ``engine`` (newest version when ``version`` is None)."""
    base = root or data_root()
    system = SYSTEMS.get(hardware, hardware)
    sysdir = base / system
    if not sysdir.is_dir():
        raise UsageError(f"AIConfigurator has no tables for {hardware!r} ({sysdir.name}); "
                         f"it has: {', '.join(sorted(p.name for p in base.iterdir()))}")
    files = {
        "gemm": ("gemm", "gemm_perf.parquet"),
        "moe": ("moe", "moe_perf.parquet"),
        "generation_attention": ("attention", "generation_attention_perf.parquet"),
        "context_attention": ("attention", "context_attention_perf.parquet"),
        "gdn": ("linear_attention", "gdn_perf.parquet"),
    }
    versions = sorted({p.name for p in sysdir.glob(f"*/{engine}/*") if p.is_dir()},
                      key=_version_key)
    if not versions:
        raise UsageError(f"AIConfigurator has no {engine} tables for {system}")
    chosen = version or versions[-1]
    tables: dict[str, Table] = {}
    used: dict[str, str] = {}
    for name, (folder, fname) in files.items():
        cands = [v for v in versions if (sysdir / folder / engine / v / fname).is_file()]
        if not cands:
            continue
        v = chosen if chosen in cands else cands[-1]
        rows = _read_parquet(sysdir / folder / engine / v / fname)
        if name == "moe":
            rows = [r for r in rows if r.get("distribution") == "balanced" and
                    r.get("moe_tp_size", 1) == 1 and r.get("moe_ep_size", 1) == 1]
        elif name == "context_attention":
            # servelab's step reads one sequence's prefill per call
            rows = [{**r, "prefix": 0} for r in rows if r.get("batch_size") == 1]
        elif name == "gdn":
            rows = _gdn(rows)
        tables[name] = Table(name, tuple(rows))
        used[name] = v
    device = next((r.get("device") for t in tables.values() for r in t.rows[:1]), system)
    prov = Provenance(
        source="aiconfigurator",
        gpu=str(device),
        engine=engine,
        engine_version=chosen,
        date="shipped with aiconfigurator-core",
        details={"system": system, "versions": used,
                 "package": f"aiconfigurator-core {_installed_version()}",
                 "license": "Apache-2.0", "url": "https://github.com/ai-dynamo/aiconfigurator"},
    )
    return TableSet(f"aic-{system}-{engine}-{chosen}", prov, tables)


def system_device(hardware: str, root: Path | None = None) -> Device:
    """The GPU's bandwidth and dense tensor rates as AIConfigurator's system file states them
    (``systems/<system>.yaml``: ``gpu.mem_bw``, ``bfloat16_tc_flops``, ``fp8_tc_flops``,
    ``fp4_tc_flops``), the ceilings its own memory-bound formulas use."""
    base = root or data_root()
    system = SYSTEMS.get(hardware, hardware)
    f = base.parent / f"{system}.yaml"
    if not f.is_file():
        raise UsageError(f"AIConfigurator has no system file for {hardware!r} ({f.name})")
    try:
        import yaml  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as e:  # a dependency of aiconfigurator-core
        raise UsageError("reading AIConfigurator's system files needs pyyaml") from e
    gpu = (yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("gpu") or {}
    rates = {p: float(gpu[k]) for p, k in (("bf16", "bfloat16_tc_flops"),
                                            ("fp8", "fp8_tc_flops"), ("fp4", "fp4_tc_flops"))
             if gpu.get(k)}
    if not gpu.get("mem_bw") or "bf16" not in rates:
        raise UsageError(f"AIConfigurator's {f.name} lacks gpu.mem_bw or bfloat16_tc_flops")
    return Device(system, float(gpu["mem_bw"]), rates,
                  f"aiconfigurator-core {_installed_version()} systems/{f.name}")


def _version_key(v: str) -> tuple[int, ...]:
    out = []
    for part in v.replace("rc", ".").replace("dev", ".").split("."):
        out.append(int(part) if part.isdigit() else 0)
    return tuple(out)


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        return version("aiconfigurator-core")
    except Exception:
        return "unknown"
