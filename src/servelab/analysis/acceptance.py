"""Measured speculative-decoding acceptance from stored runs. Pure: records in, value out.

A run that served with speculative decoding (vLLM's ``--speculative-config``) and whose
benchmark scraped the engine's ``/metrics`` carries the ``vllm:spec_decode_*`` counter
differences of its workload (``extra.bench.server_counters``). From those:

    acceptance length  = 1 + accepted ÷ drafts          (tokens per verification step)
    position i rate    = accepted at position i ÷ drafts (when the per-position counters
                                                          were scraped)

:func:`measured_acceptance` pools the runs of one checkpoint (its header fingerprint) with
one method and one number of speculative tokens ``k``: the value is the pooled
1 + Σaccepted ÷ Σdrafts, the spread the lowest and highest per-run value, and the run ids
say where it came from. A run counts only when its speculative config is recorded (the
engine arguments, else the recipe) and its workload drafted at least once.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from servelab.bench.specdecode import CounterDelta
from servelab.engines.base import flag_value
from servelab.sizing.specsource import SpecConfig, normalize_method, spec_config_from_mapping
from servelab.store.model import STATUS_OK, RunRecord

__all__ = [
    "MeasuredAcceptance",
    "RunAcceptance",
    "SpecConfig",
    "measured_acceptance",
    "measured_configs",
    "run_acceptance",
    "spec_config_of",
]

SPEC_FLAG = "--speculative-config"


def _config_from_args(args: tuple[str, ...]) -> SpecConfig | None:
    text = flag_value(args, (SPEC_FLAG,))
    if not text:
        return None
    try:
        return spec_config_from_mapping(json.loads(text))
    except json.JSONDecodeError:
        return None


def _config_from_recipe(text: str | None) -> SpecConfig | None:
    if not text:
        return None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    engine = doc.get("engine")
    flags = engine.get("flags") if isinstance(engine, Mapping) else None
    return spec_config_from_mapping(flags.get("speculative_config")) if isinstance(
        flags, Mapping) else None


def spec_config_of(run: RunRecord) -> SpecConfig | None:
    """The run's speculative config: from the engine's arguments as launched, else from the
    recipe text; None when the run did not record one."""
    return _config_from_args(run.engine_args) or _config_from_recipe(run.recipe_text)


def _counters(run: RunRecord) -> tuple[CounterDelta | None, tuple[float, ...]]:
    bench = (run.extra or {}).get("bench")
    raw = bench.get("server_counters") if isinstance(bench, Mapping) else None
    if not isinstance(raw, Mapping):
        return None, ()
    per_pos = raw.get("spec_decode_num_accepted_tokens_per_pos")
    pos: tuple[float, ...] = ()
    if isinstance(per_pos, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in per_pos
    ):
        pos = tuple(float(x) for x in per_pos)
    return CounterDelta.from_json(dict(raw)), pos


@dataclass(frozen=True, slots=True)
class RunAcceptance:
    """One run's measured acceptance (the engine's counters over its workload)."""

    run_id: str
    config: SpecConfig
    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...]

    @property
    def acceptance_length(self) -> float:
        """1 + accepted ÷ drafts."""
        return 1.0 + self.accepted / self.drafts

    @property
    def position_rates(self) -> tuple[float, ...]:
        """Accepted at each draft position ÷ drafts (empty when not scraped)."""
        return tuple(a / self.drafts for a in self.accepted_per_position)


def run_acceptance(run: RunRecord) -> RunAcceptance | None:
    """The acceptance a stored run measured; None unless it is an ok run with a recorded
    speculative config whose workload drafted at least once."""
    if run.status != STATUS_OK or run.run_id is None:
        return None
    cfg = spec_config_of(run)
    if cfg is None:
        return None
    counters, per_pos = _counters(run)
    if counters is None or not counters.spec_drafts or counters.spec_accepted is None:
        return None
    if not 0 <= counters.spec_accepted <= counters.spec_drafts * cfg.draft_tokens:
        return None  # counters that contradict k are no measurement
    if per_pos and len(per_pos) != cfg.draft_tokens:
        per_pos = ()
    return RunAcceptance(
        run_id=run.run_id,
        config=cfg,
        drafts=counters.spec_drafts,
        draft_tokens=counters.spec_draft_tokens or 0.0,
        accepted=counters.spec_accepted,
        accepted_per_position=per_pos,
    )


@dataclass(frozen=True, slots=True)
class MeasuredAcceptance:
    """Mean acceptance length of one checkpoint + method + k, pooled over stored runs."""

    header_hash: str
    config: SpecConfig
    value: float
    low: float
    high: float
    stdev: float | None
    position_rates: tuple[float, ...]
    run_ids: tuple[str, ...]
    runs: tuple[RunAcceptance, ...]

    @property
    def source(self) -> str:
        """``measured in run(s) a, b`` — where the value came from."""
        return f"measured in run(s) {', '.join(self.run_ids)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form: measured, not predicted."""
        return {
            "source": "measured",
            "method": self.config.method,
            "draft_tokens": self.config.draft_tokens,
            "checkpoint_header_hash": self.header_hash,
            "acceptance_length": self.value,
            "spread": [self.low, self.high],
            "stdev": self.stdev,
            "position_rates": list(self.position_rates),
            "run_ids": list(self.run_ids),
            "runs": [
                {"run_id": r.run_id, "acceptance_length": r.acceptance_length,
                 "drafts": r.drafts, "draft_tokens": r.draft_tokens, "accepted": r.accepted,
                 "position_rates": list(r.position_rates)}
                for r in self.runs
            ],
        }


def _matching(runs: Iterable[RunRecord], header_hash: str) -> list[RunAcceptance]:
    out = []
    for run in runs:
        if run.checkpoint_header_hash != header_hash:
            continue
        acc = run_acceptance(run)
        if acc is not None:
            out.append(acc)
    return out


def measured_acceptance(
    runs: Iterable[RunRecord], *, header_hash: str, method: str, draft_tokens: int
) -> MeasuredAcceptance | None:
    """Pool the acceptance of ``runs`` of the checkpoint ``header_hash`` that drafted with
    ``method`` and ``draft_tokens`` speculative tokens; None when none did."""
    want = SpecConfig(normalize_method(method), draft_tokens)
    found = sorted(
        (a for a in _matching(runs, header_hash) if a.config == want), key=lambda a: a.run_id
    )
    if not found:
        return None
    drafts = sum(a.drafts for a in found)
    values = [a.acceptance_length for a in found]
    with_pos = [a for a in found if a.accepted_per_position]
    pos: tuple[float, ...] = ()
    if with_pos:
        pos_drafts = sum(a.drafts for a in with_pos)
        pos = tuple(
            sum(a.accepted_per_position[i] for a in with_pos) / pos_drafts
            for i in range(want.draft_tokens)
        )
    return MeasuredAcceptance(
        header_hash=header_hash,
        config=want,
        value=1.0 + sum(a.accepted for a in found) / drafts,
        low=min(values),
        high=max(values),
        stdev=statistics.stdev(values) if len(values) > 1 else None,
        position_rates=pos,
        run_ids=tuple(a.run_id for a in found),
        runs=tuple(found),
    )


def measured_configs(runs: Iterable[RunRecord], *, header_hash: str) -> tuple[SpecConfig, ...]:
    """The speculative configs stored runs of ``header_hash`` measured an acceptance for."""
    seen = {a.config: None for a in _matching(runs, header_hash)}
    return tuple(sorted(seen, key=lambda c: (c.method, c.draft_tokens)))
