"""Run records as ``servelab run`` stores them: samples, engine facts, inspect report, prediction.

The values are chosen so the tests can recompute every number the site shows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from servelab.analysis.compare import Group
from servelab.analysis.experiment import run_experiment
from servelab.store import ExperimentRecord, RunRecord, Sample, Store, open_store

GIB = 1024**3
HOSTILE_MODEL = "<script>alert(1)</script>/tiny"
HOSTILE_LINE = "WARNING <img src=x onerror=alert(7)> skipped memory profiling `` |"
SECRET = "hf_zyxwvutsrqponmlkjihgfedcba98765"
T0 = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
PROMPTS = (512, 2048)
JITTER = (-0.3, -0.1, 0.0, 0.1, 0.3)


def samples(decode: dict[int, float], prefill: dict[int, float]) -> tuple[Sample, ...]:
    """Five requests per prompt length whose decode (1/TPOT) and prefill (tokens/TTFT) are
    ``decode[p] + jitter`` and ``prefill[p] * (1 + jitter/100)``."""
    out: list[Sample] = []
    for p in PROMPTS:
        for i, j in enumerate(JITTER):
            out.append(Sample(point=f"p{p}-c1", index=i, ttft_s=p / (prefill[p] * (1 + j / 100)),
                              tpot_s=1.0 / (decode[p] + j), e2e_s=1.0, prompt_tokens=p,
                              completion_tokens=64))
    return tuple(out)


def facts(version: str, *, marlin: bool) -> dict[str, object]:
    warnings = [{"kind": "kv-profiling-skipped", "text": HOSTILE_LINE}]
    if marlin:
        warnings.append({"kind": "marlin-weight-only",
                         "text": "Weight-only FP8 compression will be used leveraging the Marlin"
                                 " kernel"})
    return {"version": version, "model": "tiny-served", "max_model_len": 4096,
            "attention_backend": "CPU_ATTN", "moe_backend": "MARLIN" if marlin else None,
            "marlin_fallback": marlin, "weights_gib": None, "checkpoint_gib": 0.02,
            "kv_available_gib": 0.25, "kv_pool_tokens": 29120, "max_concurrency": 7.11,
            "warnings": warnings, "errors": []}


REPORT = {
    "schema": "servelab.inspect/1", "tensor_count": 123, "total_bytes": 3 * GIB // 100,
    "dtypes": [{"dtype": "BF16", "tensors": 120, "bytes": 2 * GIB // 100, "elements": 1},
               {"dtype": "F32", "tensors": 3, "bytes": GIB // 100, "elements": 1}],
    "roles": [{"role": "routed_expert", "tensors": 100, "bytes": 2 * GIB // 100},
              {"role": "embedding", "tensors": 23, "bytes": GIB // 100}],
    "mtp": {"declared_layers": 1, "tensors": 0, "bytes": 0},
    "quant": {"label": "BF16"},
}


PREDICTION_SOURCE = "fitted from stored runs (vllm / CPU / cpu); ±20% (leave-one-model-out)"


def prediction(bandwidth: float) -> dict[str, object]:
    roof = bandwidth / 40_000_000
    return {"hardware": "cpu", "bandwidth": bandwidth, "bandwidth_source": "probe",
            "decode": [{"context_len": 2048, "bytes_per_token": 40_000_000,
                        "roofline_tok_s": roof, "predicted_tok_s": roof * 0.9,
                        "predicted_low": roof * 0.75, "predicted_high": roof}],
            "decode_fit": {"label": PREDICTION_SOURCE, "level": "stored runs"},
            "prefill": [], "predicted": True}


def record(i: int, recipe: str, build: str, version: str, decode: float, *, ok: bool = True,
           marlin: bool = False) -> RunRecord:
    when = T0 + timedelta(days=i)
    args = ("vllm", "serve", "/models/tiny", "--max-model-len", "4096", "--served-model-name",
            "tiny-served", "--api-key", SECRET)
    if not ok:
        return RunRecord(started_at=when, status="failed", recipe_name=recipe,
                         model_id=HOSTILE_MODEL, host="box-1", hardware="cpu",
                         engine_name="vLLM", engine_version=version, engine_args=args,
                         status_reason=f"engine exited: {HOSTILE_LINE}",
                         log_tail=f"{HOSTILE_LINE}\nHF_TOKEN={SECRET}\nTraceback: boom",
                         extra={"build": build})
    return RunRecord(
        started_at=when, status="ok", recipe_name=recipe, model_id=HOSTILE_MODEL, host="box-1",
        hardware="cpu", torch="2.13.0+cpu", driver=None, engine_name="vLLM",
        engine_version=version, engine_args=args, checkpoint_path="/models/tiny",
        engine_facts=facts(version, marlin=marlin), checkpoint_report=REPORT,
        prediction=prediction(4e9), extra={"build": build},
        samples=samples({512: decode + 1, 2048: decode}, {512: 900.0, 2048: 1500.0}),
        log_tail=f"INFO ok\n{HOSTILE_LINE}",
    )


def populate(db: Path) -> tuple[str, list[str], list[str]]:
    """A store with two builds of one model; returns (url, bf16 run ids, kv run ids)."""
    url = f"sqlite:///{db}"
    with open_store(url) as store:
        bf16_ids, kv_ids = populate_store(store)
    return url, bf16_ids, kv_ids


def populate_store(store: Store) -> tuple[list[str], list[str]]:
    """Add the two builds' runs and one experiment; returns (bf16 run ids, kv run ids)."""
    bf16 = [record(0, "tiny-bf16", "BF16", "0.31.0", 50.0, marlin=True),
            record(1, "tiny-bf16", "BF16", "0.31.0", 50.2, marlin=True),
            record(2, "tiny-bf16", "BF16", "0.31.0", 49.9, marlin=True),
            # a step: from here on ~20 % slower
            record(3, "tiny-bf16", "BF16", "0.32.0", 40.1),
            record(4, "tiny-bf16", "BF16", "0.32.0", 39.8),
            record(5, "tiny-bf16", "BF16", "0.32.0", 40.0),
            record(6, "tiny-bf16", "BF16", "0.32.0", 0.0, ok=False)]
    kv = [record(7, "tiny-kv", "KV 512 MiB", "0.32.0", 44.0),
          record(8, "tiny-kv", "KV 512 MiB", "0.32.0", 44.2)]
    bf16_ids = [store.add_run(r) for r in bf16]
    kv_ids = [store.add_run(r) for r in kv]
    add_experiment(store, bf16_ids[3:6], kv_ids)
    return bf16_ids, kv_ids


def add_experiment(store: Store, base_ids: list[str], var_ids: list[str]) -> str:
    base = Group("BF16", tuple(store.get_run(i) for i in base_ids))
    var = Group("KV 512 MiB", tuple(store.get_run(i) for i in var_ids))
    result = run_experiment(base, var, "decode >= +5%")
    return store.add_experiment(ExperimentRecord(
        target_recipe="tiny-bf16", baseline_run_ids=tuple(base_ids),
        variant_run_ids=tuple(var_ids), criteria=result.criteria, verdict=result.verdict,
        report=result.to_json_dict(), title="Does a bigger KV budget <b>help</b>?"))
