"""Assemble a :class:`Plan`: KV pool, memory budget, fit, and predicted speed.

Pure: config mapping + :class:`~servelab.plan.weights.Weights` + hardware profile +
options in, frozen Plan out. JSON schema ``servelab.plan/1`` (:meth:`Plan.to_dict`)::

    {"schema": "servelab.plan/1", "predicted": true, "checkpoint": str,
     "hardware": {...profile...}, "engine": {"name": "vllm", "version", "platform"},
     "weights": {"resident_bytes", "decode_bytes_per_token", "routed_expert_bytes",
                 "active_params", "scheme", "quant_label", "source"},
     "kv_pool": {...KvPoolPlan: tokens, max_concurrency, block_size, groups, rule,
                 evidence, log_lines, ...},
     "memory": {...MemoryPlan...},
     "fits": {"fits", "headroom_bytes", "largest_context_at_concurrency_1"},
     "speed": {...SpeedPrediction: decode/prefill/mtp points, each "predicted": true},
     "notes": [str]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.hardware.profiles import HardwareProfile
from servelab.plan.kv import KvOptions, KvPoolPlan, largest_context, plan_kv_pool_dims
from servelab.plan.memory import MemoryPlan, plan_memory
from servelab.plan.modelcfg import ModelDims, model_dims
from servelab.plan.predict import DEFAULT_PROMPT_LENS, Efficiency, SpeedPrediction, predict_speed
from servelab.plan.weights import Weights

SCHEMA = "servelab.plan/1"


@dataclass(frozen=True)
class Plan:
    """Everything ``servelab plan`` prints."""

    checkpoint: str
    hardware: HardwareProfile
    engine_version: str
    platform: str
    dims: ModelDims
    weights: Weights
    kv: KvPoolPlan
    memory: MemoryPlan
    largest_context_c1: int
    speed: SpeedPrediction
    notes: tuple[str, ...]
    engine_name: str = "vllm"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (schema ``servelab.plan/1``, see module docs)."""
        w = self.weights
        return {
            "schema": SCHEMA,
            "predicted": True,
            "checkpoint": self.checkpoint,
            "hardware": self.hardware.to_dict(),
            "engine": {
                "name": self.engine_name,
                "version": self.engine_version,
                "platform": self.platform,
            },
            "weights": {
                "resident_bytes": w.resident_bytes,
                "decode_bytes_per_token": w.decode_bytes_per_token,
                "routed_expert_bytes": w.routed_expert_bytes,
                "routed_expert_bits": w.routed_expert_bits,
                "active_params": w.active_params,
                "scheme": w.scheme,
                "quant_label": w.quant_label,
                "mtp_tensors": w.mtp_tensors,
                "source": w.source,
            },
            "kv_pool": self.kv.to_dict(),
            "memory": self.memory.to_dict(),
            "fits": {
                "fits": self.memory.fits and self.kv.fits_one_request,
                "headroom_bytes": self.memory.headroom_bytes,
                "largest_context_at_concurrency_1": self.largest_context_c1,
            },
            "speed": self.speed.to_dict(),
            "notes": list(self.notes),
        }


def vllm_platform(hardware: HardwareProfile) -> tuple[str, str | None]:
    """The vLLM platform whose arithmetic applies, and a note when it is a stand-in."""
    if hardware.platform == "cpu":
        return "cpu", None
    if hardware.platform == "cuda":
        return "cuda", None
    return "cuda", f"vLLM has no {hardware.platform} platform rules; CUDA arithmetic used"


def build_plan(
    config: Mapping[str, Any],
    weights: Weights,
    hardware: HardwareProfile,
    *,
    max_model_len: int | None = None,
    kv_cache_memory_bytes: int | None = None,
    gpu_memory_utilization: float = 0.9,
    kv_cache_dtype: str = "auto",
    engine_version: str = "0.32.0",
    prompt_lens: Sequence[int] = DEFAULT_PROMPT_LENS,
    enable_prefix_caching: bool = True,
    block_size: int | None = None,
    overhead_bytes: int | None = None,
    decode_efficiency: Efficiency | None = None,
    prefill_efficiency: Efficiency | None = None,
    acceptance_lengths: Sequence[float] = (),
    draft_tokens: int = 0,
    engine_name: str = "vllm",
) -> Plan:
    """Plan serving ``weights`` (with ``config``) on ``hardware`` under vLLM's rules."""
    dims = model_dims(config)
    platform, pnote = vllm_platform(hardware)
    notes = [pnote] if pnote else []
    mml = max_model_len or dims.max_position_embeddings or 4096
    mem = plan_memory(
        hardware,
        weights_bytes=weights.resident_bytes,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        overhead_bytes=overhead_bytes,
    )
    opts = KvOptions(
        max_model_len=mml,
        engine_version=engine_version,
        platform=platform,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        enable_prefix_caching=enable_prefix_caching,
        num_speculative_tokens=draft_tokens,
        draft_attention_layers=dims.mtp_layers if draft_tokens and weights.mtp_tensors else 0,
    )
    kv = plan_kv_pool_dims(dims, mem.kv_pool_bytes, opts)
    if opts.draft_attention_layers:
        notes.append(
            f"{opts.draft_attention_layers} MTP draft attention layer(s) and "
            f"{draft_tokens} speculative state slot(s) counted in the KV groups (this part of "
            "the arithmetic is not yet checked against an engine log)"
        )
    longest = largest_context(dims, mem.kv_pool_bytes, opts, limit=dims.max_position_embeddings)
    if not kv.verified_rule:
        notes.append(
            f"KV arithmetic for vLLM {engine_version} on {platform} follows the nearest known "
            "rules; not yet checked against that version's own log"
        )
    if dims.mtp_layers and not weights.mtp_tensors:
        notes.append(
            f"config declares {dims.mtp_layers} MTP layer(s) but the checkpoint ships no mtp.* "
            "tensors: no speculative decode"
        )
    speed = predict_speed(
        weights,
        dims,
        hardware,
        prompt_lens=prompt_lens,
        kv_dtype_bytes=kv.kv_dtype_bytes,
        ssm_dtype=kv.mamba_ssm_dtype or "float32",
        decode_efficiency=decode_efficiency,
        prefill_efficiency=prefill_efficiency,
        acceptance_lengths=acceptance_lengths,
        draft_tokens=draft_tokens,
    )
    return Plan(
        checkpoint=weights.name,
        hardware=hardware,
        engine_version=engine_version,
        platform=platform,
        dims=dims,
        weights=weights,
        kv=kv,
        memory=mem,
        largest_context_c1=longest,
        speed=speed,
        notes=tuple(notes),
        engine_name=engine_name,
    )
