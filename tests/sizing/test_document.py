"""The typed reader of stored plans: the numbers a real plan wrote come back, typed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plan.inputs import plan_of, planning_inputs

from servelab.hardware.profiles import BUILTIN
from servelab.sizing.document import read_plan

GIB = 1 << 30


def test_a_real_plan_reads_back_after_a_json_round_trip(qwen36_fp8: Path) -> None:
    config, weights = planning_inputs(qwen36_fp8)
    plan = plan_of(config, weights, BUILTIN["dgx-spark"], max_model_len=262_144,
                      kv_cache_memory_bytes=6 * GIB, prompt_lens=(512, 2048, 8192))
    doc = read_plan(json.loads(json.dumps(plan.to_dict())))  # as stored with a run
    assert [p.tokens for p in doc.decode] == [d.context_len for d in plan.speed.decode]
    assert [p.tokens for p in doc.prefill] == [p.prompt_len for p in plan.speed.prefill]
    for got, want in zip(doc.decode, plan.speed.decode, strict=True):
        assert got.roofline_tok_s == want.roofline_tok_s
        assert got.bytes_per_token == want.bytes_per_token
        assert (got.predicted_tok_s, got.predicted_low, got.predicted_high) == (
            want.predicted_tok_s, want.predicted_low, want.predicted_high)
        assert got.raw["context_len"] == want.context_len  # fields added later stay readable
    assert doc.bandwidth == plan.speed.bandwidth
    assert doc.kv_tokens == plan.kv.tokens
    assert doc.kv_max_concurrency == plan.kv.max_concurrency
    assert doc.weights_resident_bytes == plan.weights.resident_bytes
    assert doc.speed_at("decode", 2048) is doc.decode[1]
    assert doc.speed_at("prefill", 1) is None
    # A bare speed prediction (older documents) reads the same way.
    bare = read_plan(json.loads(json.dumps(plan.speed.to_dict())))
    assert bare.decode == doc.decode and bare.kv_tokens is None


def test_missing_or_malformed_parts_read_as_absent() -> None:
    assert read_plan(None).decode == () and read_plan(None).bandwidth is None
    doc = read_plan({"speed": {"decode": [{"context_len": "x"}, 3, {"context_len": 512,
                                                                     "roofline_tok_s": True,
                                                                     "calibrated_tok_s": 40.0}],
                               "prefill": [{"prompt_len": 512, "predicted_tok_s": 900.0,
                                            "predicted_low": 700.0, "predicted_high": 1e3}],
                               "bandwidth": float("nan")},
                     "kv_pool": {"tokens": 1.5}, "weights": []})
    [p] = doc.decode  # an older document: calibrated_tok_s, no interval
    assert (p.tokens, p.roofline_tok_s, p.predicted_tok_s, p.interval) == (512, None, 40.0, None)
    assert doc.prefill[0].interval == (900.0, 700.0, 1000.0)
    assert doc.bandwidth is None and doc.kv_tokens is None and doc.weights_resident_bytes is None
