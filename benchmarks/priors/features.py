"""Print the cost features (bytes read, FLOPs and the routed experts' share of them, layers)
servelab computes for the builds behind the shipped priors (src/servelab/predict/priors.toml),
from full-dimension header replicas.

    .venv/bin/python benchmarks/priors/features.py          # prints TOML fragments

The priors table stores these numbers next to each published measurement;
tests/plan/test_calibrate_explain.py recomputes them, so the table cannot drift from servelab's own
arithmetic.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.hardware.lookup import get_profile
from servelab.hardware.topology import topology_for
from servelab.plan.build import build_plan
from servelab.plan.checkpoint import Checkpoint
from servelab.plan.request import PlanRequest, StoreChoice
from servelab.predict.evidence import Evidence
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.weights import weights_from_report
from servelab.synth.replica import EXPERTS_AND_ATTENTION, QuantLayout
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

#: name -> (layout, plan options): the seed's Spark builds of Qwen3.6-35B-A3B.
SPARK_BUILDS = {
    "Qwen/Qwen3.6-35B-A3B-FP8": QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION),
    "Qwen/Qwen3.6-35B-A3B": QuantLayout("bf16"),
    "nvidia/Qwen3.6-35B-A3B-NVFP4": QuantLayout(
        "nvfp4", EXPERTS_AND_ATTENTION, fp4_activations=False
    ),
}
LENGTHS = (512, 2048, 8192)


def spark_features(name: str, layout: QuantLayout, root: Path) -> dict[str, object]:
    """Features of one seed build on the DGX Spark (full context, 6 GiB KV pool, vLLM 0.26)."""
    out = root / name.replace("/", "--")
    from servelab.synth.replica import write_replica

    write_replica(out, QWEN3_6_35B_A3B, layout)
    source = load_checkpoint(out)
    assert source.config is not None
    weights = weights_from_report(build_report(source), name=name)
    spark = get_profile("dgx-spark")
    request = PlanRequest.from_flags(
        name, spark, topology_for(spark.name), engine_version="0.26.0",
        knobs=EngineKnobs(max_model_len=262144, kv_cache_memory_bytes=6 * 2**30),
        prompt_lens=LENGTHS, store=StoreChoice(use=False))
    plan = build_plan(request, Checkpoint.of(source.config, weights), Evidence(calibrate=False))
    sp = plan.speed
    return {
        "kernel_path": sp.kernel_path.name,
        "layers": plan.dims.num_layers,
        "decode_bytes": {d.context_len: d.bytes_per_token for d in sp.decode},
        "prefill": {p.prompt_len: (p.flops, p.expert_flops, p.bytes_read) for p in sp.prefill},
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, layout in SPARK_BUILDS.items():
            f = spark_features(name, layout, Path(tmp))
            print(f"# {name}: {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
