"""Planning inputs read once per session (inspect of a full-size replica takes seconds)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.engines.vllm.kv import VLLM_KV
from servelab.engines.vllm.startup import VLLM_STARTUP
from servelab.hardware.profiles import HardwareProfile
from servelab.hardware.topology import topology_for
from servelab.plan.build import Plan, build_plan
from servelab.plan.checkpoint import Checkpoint
from servelab.plan.request import PlanRequest, Speculation
from servelab.predict.evidence import Evidence
from servelab.predict.levels import Calibration
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.specsource import given
from servelab.sizing.weights import Weights, weights_from_report


@functools.cache
def planning_inputs(path: Path) -> tuple[Mapping[str, Any], Weights]:
    """(config, Weights) of a checkpoint, read once per session (inspect takes seconds)."""
    source = load_checkpoint(path)
    assert source.config is not None
    return source.config, weights_from_report(build_report(source), name=path.name)


def plan_of(config: Mapping[str, Any], weights: Weights, hardware: HardwareProfile, *,
            engine_version: str = ENGINE_VERSION, prompt_lens: tuple[int, ...] = PROMPT_LENS,
            draft_tokens: int = 0, acceptance: tuple[float, ...] = (),
            calibration: Calibration | None = None, **knobs: Any) -> Plan:
    """vLLM's plan of ``config`` and ``weights`` on ``hardware`` at the engine flags
    ``knobs`` (:class:`EngineKnobs`' fields), no stored run: the roofline alone unless
    ``calibration`` gives the fits; speculative decode at ``acceptance`` when given."""
    request = PlanRequest(weights.name, hardware, topology_for(hardware.name), VLLM_KV,
                          VLLM_STARTUP, engine_version=engine_version,
                          knobs=EngineKnobs(**knobs), prompt_lens=tuple(prompt_lens),
                          speculation=Speculation(draft_tokens=draft_tokens))
    evidence = Evidence(
        calibration=calibration, calibrate=False,
        acceptance=given(acceptance, method="mtp", draft_tokens=draft_tokens)
        if acceptance else None)
    return build_plan(request, Checkpoint.of(config, weights), evidence)


def assert_rows_are_the_plans(rows: Any, doc: Mapping[str, Any]) -> None:
    """Priors ``rows`` (samples of one build) carry the kernel path, layers, expert slots,
    bytes and FLOPs of ``doc``, the ``servelab plan --json`` of that build at their lengths."""
    speed, dims = doc["speed"], doc["dims"]
    decode = {r["context_len"]: r for r in speed["decode"]}
    prefill = {r["prompt_len"]: r for r in speed["prefill"]}
    for s in rows:
        assert s.kernel_path == speed["kernel_path"]["name"]
        assert s.layers == dims["num_layers"]
        assert s.expert_slots == dims["num_layers"] * (dims["num_experts"] or 0)
        if s.kind == "decode":
            assert s.bytes_read == decode[s.length]["bytes_per_token"]
        else:
            p = prefill[s.length]
            assert (s.bytes_read, s.flops) == (p["bytes_read"], p["flops"])
