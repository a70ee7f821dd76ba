"""The operator model on GPUs servelab has no tables for but AIConfigurator has (issue 39):
AIConfigurator's per-operator tables for the GPU (vLLM 0.24.0), composed by servelab's own
step (:func:`servelab.ops.aicgpu.costs_for`), with the engine overhead, host floor and
interval that the same composition fitted on the H200 (:func:`servelab.ops.aicgpu.transfer`:
every H200 vLLM run, each family left out) carried to the GPU as they are.

:func:`table_sources` says, for a plan's hardware, which tables its vLLM steps are read from
(servelab's own where shipped, :func:`servelab.predict.ops_source.shipped_tables`, then
AIConfigurator's for the same GPU) and how to load them: loading AIConfigurator's needs the
optional extra ``servelab[aiconfigurator]``, and without it raises the :class:`UsageError`
a plan turns into one note (keeping the fitted prediction).

Pure but for reading the installed extra's tables and the shipped transfer file (cached).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from servelab.ops import aicgpu
from servelab.ops.calibrate import Choice, Corrections
from servelab.predict.ops_source import TABLES, OpsTables, shipped_tables

KINDS = ("decode", "prefill")


def table_sources(hardware: str) -> list[tuple[str, Callable[[], OpsTables]]]:
    """For ``hardware``: the tables its vLLM steps may be read from, in the order a plan
    tries them, each in words with a loader (which may raise a
    :class:`~servelab.errors.ServelabError` saying why they cannot be read): servelab's own,
    then AIConfigurator's for the same GPU (on the H200: for a kernel servelab's tables did
    not measure, e.g. gpt-oss's MXFP4 experts); empty where there are none."""
    out: list[tuple[str, Callable[[], OpsTables]]] = []
    if hardware in TABLES:
        out.append((f"{hardware.upper()} kernel tables", lambda: _own(hardware)))
    if hardware in aicgpu.GPUS:
        out.append((f"AIConfigurator's {hardware.upper()} tables",
                    lambda: aic_tables(hardware)))
    return out


def _own(hardware: str) -> OpsTables:
    tables = shipped_tables(hardware)
    assert tables is not None  # table_sources checked TABLES
    return tables


@functools.lru_cache(maxsize=8)
def aic_tables(hardware: str) -> OpsTables:
    """servelab's composition over AIConfigurator's tables for ``hardware`` with the
    H200-fitted transfer: the engine overhead per kind (a prompt's once, as the step that
    starts a prompt pays it under load), the decode host floor and the held-out interval."""
    costs = aicgpu.costs_for(hardware)
    tr = aicgpu.transfer()
    fams = tuple(str(f) for f in tr.details.get("families", ()))
    points = int(tr.details.get("points", 0))
    kept = dict(tr.details.get("kept", {}))
    corr = Corrections("", tr.isolation_frac, tr.isolation_cap_ms, tr.overhead_ms["decode"],
                       tr.overhead_ms["prefill"], tr.host_floor_ms, fams)
    choice = {k: Choice(k, "corrected", (), tr.half_width_log[k], points, len(fams))
              for k in KINDS}
    prov = costs.sets[0].provenance
    package = str(prov.details.get("package", "aiconfigurator-core"))
    hw = hardware.upper()
    tables = (f"servelab's composition over {package}'s {hw} kernel tables "
              f"({prov.gpu}, measured under vLLM {prov.engine_version})")
    h200 = f"{points} H200 vLLM 0.26.0 points of {len(fams)} families ({', '.join(fams)})"

    def source(kind: str) -> str:
        over = (f"engine overhead {tr.overhead_ms[kind]:+.1f} ms per "
                f"{'prompt' if kind == 'prefill' else 'step'} fitted on {h200}"
                if kept.get(kind, True) else
                "no engine overhead (on the H200 it did not lower the held-out error)")
        return f"operator model: {tables}; {over}"

    def basis(kind: str) -> str:
        where = "on the H200" if hardware == "h200" else \
            f"the H200's held-out interval, carried to the {hw} as is"
        return (f"{where}: 90th percentile of the |log error| of the same composition's "
                f"{kind} on {h200}, each family left out")

    return OpsTables(
        hardware, f"AIConfigurator's {hw} tables", costs, corr, choice["decode"],
        choice["prefill"], {k: source(k) for k in KINDS}, {k: basis(k) for k in KINDS},
        f"AIConfigurator's {hardware} kernel timings composed by servelab; interval from "
        f"{len(fams)} families' H200 runs (each left out)"
        + ("" if hardware == "h200" else ", carried as is"),
        prefill_per_step=False, carried=True)
