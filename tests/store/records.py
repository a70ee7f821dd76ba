"""Building realistic RunRecords for tests (real numbers drawn from a seeded generator)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from servelab.store import Metric, RunRecord, Sample


def make_samples(
    rng: np.random.Generator,
    *,
    decode_tok_s: float,
    n: int = 20,
    point: str = "p2048-c1",
    prompt_tokens: int = 2048,
    completion_tokens: int = 128,
    rel_noise: float = 0.02,
    ttft_s: float = 0.4,
) -> tuple[Sample, ...]:
    """``n`` requests whose per-request decode speed is ~N(decode_tok_s, rel_noise)."""
    out = []
    for i in range(n):
        rate = decode_tok_s * (1.0 + rel_noise * rng.standard_normal())
        tpot = 1.0 / rate
        ttft = ttft_s * (1.0 + rel_noise * rng.standard_normal())
        e2e = ttft + tpot * (completion_tokens - 1)
        out.append(
            Sample(
                point=point,
                index=i,
                ttft_s=ttft,
                tpot_s=tpot,
                e2e_s=e2e,
                itl_mean_s=tpot,
                itl_p50_s=tpot,
                itl_p99_s=tpot * 1.2,
                itl_max_s=tpot * 1.5,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        )
    return tuple(out)


def make_run(
    *,
    day: str = "2026-07-06",
    decode: float = 76.8,
    seed: int = 0,
    n: int = 20,
    rel_noise: float = 0.02,
    point: str = "p2048-c1",
    **fields: Any,
) -> RunRecord:
    """A complete run record; ``fields`` override any RunRecord field."""
    rng = np.random.default_rng(seed)
    samples = make_samples(rng, decode_tok_s=decode, n=n, point=point, rel_noise=rel_noise)
    rates = [s.decode_tok_s for s in samples if s.decode_tok_s is not None]
    mean = float(np.mean(rates))
    base: dict[str, Any] = {
        "started_at": datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC),
        "recipe_name": "qwen3.6-35b-a3b-nvfp4",
        "recipe_text": '[model]\nid = "nvidia/Qwen3.6-35B-A3B-NVFP4"\n',
        "model_id": "nvidia/Qwen3.6-35B-A3B-NVFP4",
        "checkpoint_revision": "abc123",
        "hardware": "dgx-spark",
        "host": "spark-1",
        "driver": "580.95",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "engine_name": "vllm",
        "engine_version": "0.24.0",
        "engine_args": ("--max-model-len", "262144", "--kv-cache-memory-bytes", "6G"),
        "decode_tok_s": mean,
        "prefill_tok_s": 5000.0,
        "weights_gib": 21.5,
        "kv_pool_tokens": 308955,
        "engine_facts": {"weights_gib": 21.5, "kv_cache_tokens": 308955},
        "workload": {"points": [point]},
        "metrics": (Metric("decode_tok_s", mean, point=point, n=len(rates), unit="tok/s"),),
        "samples": samples,
    }
    base.update(fields)
    return RunRecord(**base)
