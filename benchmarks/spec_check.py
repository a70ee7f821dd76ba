"""The speculative step model against the two MTP measurements of issue 30, fitted and left out.

    PYTHONPATH=src .venv/bin/python benchmarks/spec_check.py

1. servelab's own H200 run (benchmarks/gpu/qwen3.6-35b-a3b-bf16-mtp2-h200.toml: Qwen3.6-35B-A3B
   dimensions, BF16, MTP k=2, random weights so acceptance 1.00; calibration-2026-12-03-eve):
   each step predicted with the draft term fitted from that run's own steps (fitted), and with
   the run left out (the decode fit without the model, and no measured step left to fit the
   draft term from: the form alone).
2. The seed page (Unsloth NVFP4-Fast on a DGX Spark, vLLM 0.24.0): 67.9 tok/s without MTP,
   106.5 with its MTP head at k=3, no acceptance length published. Predicted from the shipped
   priors alone (nothing of the Fast build in them): first for the build's published layout
   (NVFP4 experts; FP8 attention, Gated DeltaNet projections and lm_head; BF16 MTP head, whose
   replica weighs what the build publishes), then for the layouts assumed before it was found:
   the maximum at acceptance k + 1 = 4, and the acceptance the form needs for 106.5; once from
   the form's own plain step and once with the plain step set to the seed's measured 67.9 (the
   form then only adds what drafting costs). The draft term is the H200's (a labelled fallback).
3. RedHatAI/Qwen3.6-35B-A3B-NVFP4 on a DGX Spark with MTP k=3 (vLLM 0.25.1, a public test
   report): 62.2 / 66.0 tok/s single-stream (prose / code), no acceptance published; its
   layout and file sizes are published, so the form gives the acceptance each figure needs.

Pure arithmetic over header replicas written to a temporary directory; no engine, no device.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.defaults import ENGINE_VERSION
from servelab.hardware.lookup import get_profile
from servelab.hardware.topology import topology_for
from servelab.plan.build import Plan, build_plan
from servelab.plan.checkpoint import Checkpoint
from servelab.plan.request import PlanRequest, Speculation, StoreChoice
from servelab.predict.evidence import Evidence
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.specsource import given
from servelab.sizing.weights import Weights, weights_from_report
from servelab.synth.replica import (
    EXPERTS_AND_ATTENTION,
    NVFP4_FAST_FP4,
    NVFP4_FAST_FP8,
    TEXT_LINEARS,
    QuantLayout,
    write_replica,
)
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

H200_RUN = "qwen3.6-35b-a3b-bf16-random"
#: calibration-2026-12-03-eve/runs-h200-calibration.json, qwen3.6-35b-a3b-bf16-mtp2-h200:
#: decode tok/s at 512 / 2,048 / 8,192 (acceptance 1.00: one token per step)
H200_MEASURED = {512: 134.91, 2048: 127.84, 8192: 135.75}
SEED_PLAIN, SEED_MTP, SEED_K = 67.9, 106.5, 3
SEED = "servelab seed recipe page (Qwen3.6-35B-A3B on DGX Spark-1, published 2026-07-28)"
#: unsloth/Qwen3.6-35B-A3B-NVFP4-Fast, revision 11fb65d6: 23.63 GB of safetensors (a public
#: validation report; the Hugging Face API rounds it to 23.7 GB)
FAST_PUBLISHED_GB = 23.63
#: RedHatAI/Qwen3.6-35B-A3B-NVFP4 on one GB10, vLLM 0.25.1, MTP k=3, c=1, median of 3
#: (prose, code); files model / model_mtp / model_visual.safetensors 22.46 / 1.69 / 0.89 GB
REDHAT_MTP = {"prose": 62.21, "code": 65.99}
REDHAT_FILES_GB = (22.46, 1.69, 0.89)
SPARK_KV: dict[str, Any] = {"max_model_len": 262144, "kv_cache_memory_bytes": 6 * 2**30,
                            "engine_version": "0.26.0"}


def _weights(path: Path) -> tuple[dict[str, object], Weights]:
    source = load_checkpoint(path)
    assert source.config is not None
    return dict(source.config), weights_from_report(build_report(source), name=path.name)


def _plan(config: dict[str, object], weights: Weights, hw: str, k: int,
          acceptance: tuple[float, ...], prompt_lens: tuple[int, ...], kv: dict[str, Any], *,
          leave_out: str = "") -> Plan:
    hardware = get_profile(hw)
    knobs = {key: v for key, v in kv.items() if key != "engine_version"}
    request = PlanRequest.from_flags(
        "replica", hardware, topology_for(hardware.name),
        engine_version=kv.get("engine_version", ENGINE_VERSION), knobs=EngineKnobs(**knobs),
        prompt_lens=prompt_lens, speculation=Speculation(draft_tokens=k),
        store=StoreChoice(use=False))
    # the model family left unnamed, as the held-out check was made
    checkpoint = dataclasses.replace(Checkpoint.of(config, weights), family="")
    evidence = Evidence(leave_out=leave_out,
                        acceptance=given(acceptance, method="mtp", draft_tokens=k))
    return build_plan(request, checkpoint, evidence)


def h200(root: Path) -> None:
    path = root / "qwen36-bf16-mtp"
    write_replica(path, QWEN3_6_35B_A3B, QuantLayout("bf16"), mtp="per-expert")
    config, weights = _weights(path)
    kv: dict[str, Any] = {"max_model_len": 40960, "kv_cache_memory_bytes": 16 * 2**30,
          "engine_version": "0.26.0"}
    print("## H200, Qwen3.6-35B-A3B BF16 + MTP head, k=2, acceptance 1.00 (steps/s)\n")
    print("| context | measured | fitted: predicted (interval) | error | left out: predicted "
          "(interval) | error |")
    print("|---:|---:|---:|---:|---:|---:|")
    rows, fitted, out = [], None, None
    for n, measured in H200_MEASURED.items():
        cells = [f"{n:,}", f"{measured:.1f}"]
        fitted = _plan(config, weights, "h200", 2, (1.0,), (n,), kv)
        out = _plan(config, weights, "h200", 2, (1.0,), (n,), kv, leave_out=H200_RUN)
        for plan in (fitted, out):
            m = plan.speed.mtp[0]
            assert m.predicted_tok_s is not None
            band = (f" ({m.predicted_low:.1f}–{m.predicted_high:.1f})"
                    if m.predicted_low is not None and m.predicted_high is not None else "")
            cells += [f"{m.predicted_tok_s:.1f}{band}",
                      f"{measured / m.predicted_tok_s - 1:+.1%}"]
        rows.append(cells)
    for r in rows:
        print("| " + " | ".join(r) + " |")
    assert fitted is not None and out is not None
    print(f"\nfitted: {fitted.speed.mtp[0].draft_source or 'no draft term'}")
    print("left out: " + (out.speed.mtp[0].draft_source
                          or "no draft term (no other measured step)"))
    fit = out.speed.decode_fit
    print(f"decode fit, the model left out: {fit.label() if fit else '-'}")


def _files_gb(path: Path) -> tuple[float, float, float]:
    """(language model, MTP head, vision tower) GB of a replica, as the exports split them."""
    split = [0, 0, 0]
    for t in load_checkpoint(path).tensors:
        i = 1 if t.name.startswith("mtp.") else 2 if ".visual." in t.name else 0
        split[i] += t.nbytes
    return split[0] / 1e9, split[1] / 1e9, split[2] / 1e9


def spark(root: Path) -> None:
    fast = QuantLayout("nvfp4", NVFP4_FAST_FP4, fp8=NVFP4_FAST_FP8)
    layouts = {
        "as published: NVFP4 experts; FP8 attention, GDN, lm_head": fast,
        "experts + full attention NVFP4 (GDN, lm_head BF16)": QuantLayout(
            "nvfp4", EXPERTS_AND_ATTENTION),
        "every text linear NVFP4 (GDN too; lm_head BF16)": QuantLayout("nvfp4", TEXT_LINEARS),
    }
    print(f"\n## DGX Spark, NVFP4-Fast + MTP k={SEED_K}: the seed's {SEED_PLAIN} / {SEED_MTP} "
          "tok/s (no acceptance published)\n")
    print("| layout | plain predicted (interval) | MTP at a = 4 (interval) | a for 106.5 "
          "(per position) | with plain = 67.9: MTP at a = 4 | a for 106.5 (per position) |")
    print("|---|---:|---:|---:|---:|---:|")
    cases: list[tuple[str, dict[str, object], Weights]] = []
    for label, layout in layouts.items():
        path = root / label.split()[0].strip(":")
        write_replica(path, QWEN3_6_35B_A3B, layout, mtp="fused")
        config, weights = _weights(path)
        cases.append((label, config, weights))
    fast_bytes = cases[0][2].resident_bytes
    # the same with the lm_head at NVFP4's 4.5 bits (a hypothetical servelab cannot write
    # as a replica: the bytes are changed where every draft pass and the plain step read them)
    label, config, weights = cases[-1]
    nv = weights.lm_head_bytes * 9 // 32
    cases.append(("every text linear and the lm_head NVFP4 (hypothetical)", config,
                  dataclasses.replace(weights, lm_head_bytes=nv,
                                      decode_bytes_per_token=weights.decode_bytes_per_token
                                      - weights.lm_head_bytes + nv)))
    for label, config, weights in cases:
        plan = _plan(config, weights, "dgx-spark", SEED_K, (float(SEED_K + 1),), (2048,),
                     SPARK_KV)
        d = plan.speed.decode[0]
        plain = d.predicted_tok_s
        m = plan.speed.mtp[0]
        assert plain is not None and m.predicted_tok_s is not None
        t_step = (SEED_K + 1) / m.predicted_tok_s
        shifted = t_step - 1 / plain + 1 / SEED_PLAIN  # the plain part set to the seed's
        print(f"| {label} | {plain:.1f} ({d.predicted_low:.1f}–{d.predicted_high:.1f}) | "
              f"{m.predicted_tok_s:.1f} ({m.predicted_low:.1f}–{m.predicted_high:.1f}) | "
              f"{_a_cell(SEED_MTP * t_step)} | {(SEED_K + 1) / shifted:.1f} | "
              f"{_a_cell(SEED_MTP * shifted)} |")
    print(f"\nthe published layout's replica: {fast_bytes / 1e9:.2f} GB of safetensors against "
          f"the build's published {FAST_PUBLISHED_GB} GB")
    print(f"draft term: {m.draft_source}")
    print(f"source of the measured figures: {SEED}")


def redhat(root: Path) -> None:
    path = root / "redhat"
    write_replica(path, QWEN3_6_35B_A3B, QuantLayout("nvfp4", EXPERTS_AND_ATTENTION), mtp="fused")
    files = _files_gb(path)
    config, weights = _weights(path)
    plan = _plan(config, weights, "dgx-spark", SEED_K, (float(SEED_K + 1),), (2048,), SPARK_KV)
    m = plan.speed.mtp[0]
    assert m.predicted_tok_s is not None
    t_step = (SEED_K + 1) / m.predicted_tok_s
    print(f"\n## DGX Spark, RedHatAI NVFP4 + MTP k={SEED_K} (vLLM 0.25.1, c=1; "
          "no acceptance published)\n")
    print("replica files (model / mtp / visual): "
          + " / ".join(f"{g:.2f}" for g in files) + " GB against the published "
          + " / ".join(f"{g:.2f}" for g in REDHAT_FILES_GB) + " GB")
    print(f"MTP at a = 4: {m.predicted_tok_s:.1f} ({m.predicted_low:.1f}–{m.predicted_high:.1f})")
    for scenario, tok_s in REDHAT_MTP.items():
        a = tok_s * t_step
        p = _per_position(a, SEED_K)
        print(f"{scenario}: measured {tok_s:.1f} tok/s needs a = {a:.2f} "
              f"(per-position {p:.2f} if every position accepts alike)")


def _a_cell(a: float) -> str:
    """An acceptance length and, where one is possible, its per-position rate."""
    return f"{a:.2f} (p {_per_position(a, SEED_K):.2f})" if a <= SEED_K + 1 else f"{a:.2f}"


def _per_position(a: float, k: int) -> float:
    """p with 1 + p + ... + p^k = a (bisection; a in [1, k + 1])."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(k + 1)) < a:
            lo = mid
        else:
            hi = mid
    return lo


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        h200(Path(tmp))
        spark(Path(tmp))
        redhat(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
