"""The speculative step model against the two MTP measurements of issue 30, fitted and left out.

    PYTHONPATH=src .venv/bin/python benchmarks/spec_check.py

1. servelab's own H200 run (benchmarks/gpu/qwen3.6-35b-a3b-bf16-mtp2-h200.toml: Qwen3.6-35B-A3B
   dimensions, BF16, MTP k=2, random weights so acceptance 1.00; calibration-2026-12-03-eve):
   each step predicted with the draft term fitted from that run's own steps (fitted), and with
   the run left out (the decode fit without the model, and no measured step left to fit the
   draft term from: the form alone).
2. The seed page (Unsloth NVFP4-Fast on a DGX Spark, vLLM 0.24.0): 67.9 tok/s without MTP,
   106.5 with its MTP head at k=3, no acceptance length published. Predicted from the shipped
   priors alone (nothing of the Fast build in them), for the layouts its name allows: the
   maximum at acceptance k + 1 = 4, and the acceptance the form needs for 106.5; once from the
   form's own plain step and once with the plain step set to the seed's measured 67.9 (the form
   then only adds what drafting costs). The draft term is the H200's (a labelled fallback).

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
from servelab.engines.vllm.kv import VLLM_KV
from servelab.forecast.build import Plan, build_plan
from servelab.hardware.lookup import get_profile
from servelab.plan.weights import Weights, weights_from_report
from servelab.predict.runs import calibration_for, draft_for
from servelab.synth.replica import (
    EXPERTS_AND_ATTENTION,
    QWEN3_6_35B_A3B,
    TEXT_LINEARS,
    QuantLayout,
    write_replica,
)

H200_RUN = "qwen3.6-35b-a3b-bf16-random"
#: calibration-2026-12-03-eve/runs-h200-calibration.json, qwen3.6-35b-a3b-bf16-mtp2-h200:
#: decode tok/s at 512 / 2,048 / 8,192 (acceptance 1.00: one token per step)
H200_MEASURED = {512: 134.91, 2048: 127.84, 8192: 135.75}
SEED_PLAIN, SEED_MTP, SEED_K = 67.9, 106.5, 3
SEED = "servelab seed recipe page (Qwen3.6-35B-A3B on DGX Spark-1, published 2026-07-28)"


def _weights(path: Path) -> tuple[dict[str, object], Weights]:
    source = load_checkpoint(path)
    assert source.config is not None
    return dict(source.config), weights_from_report(build_report(source), name=path.name)


def _plan(config: dict[str, object], weights: Weights, hw: str, k: int,
          acceptance: tuple[float, ...], prompt_lens: tuple[int, ...], kv: dict[str, Any], *,
          leave_out: str = "") -> Plan:
    hardware = get_profile(hw)
    cal = calibration_for([], hardware, weights, model=leave_out)
    draft = draft_for([], hardware, weights, "mtp", model=leave_out)
    return build_plan(config, weights, hardware, calibration=cal, draft=draft,
                      draft_tokens=k, acceptance_lengths=acceptance, prompt_lens=prompt_lens,
                      kv_arithmetic=VLLM_KV, spec_method="mtp", **kv)


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


def spark(root: Path) -> None:
    layouts = {
        "experts + full attention NVFP4 (GDN, lm_head BF16)": QuantLayout(
            "nvfp4", EXPERTS_AND_ATTENTION),
        "every text linear NVFP4 (GDN too; lm_head BF16)": QuantLayout("nvfp4", TEXT_LINEARS),
    }
    kv: dict[str, Any] = {"max_model_len": 262144, "kv_cache_memory_bytes": 6 * 2**30,
          "engine_version": "0.26.0"}
    print(f"\n## DGX Spark, NVFP4-Fast + MTP k={SEED_K}: the seed's {SEED_PLAIN} / {SEED_MTP} "
          "tok/s (no acceptance published)\n")
    print("| layout (the Fast build's is not published) | plain predicted | MTP at a = 4 "
          "(interval) | a for 106.5 | with plain = 67.9: MTP at a = 4 | a for 106.5 |")
    print("|---|---:|---:|---:|---:|---:|")
    cases: list[tuple[str, dict[str, object], Weights]] = []
    for label, layout in layouts.items():
        path = root / label.split()[0]
        write_replica(path, QWEN3_6_35B_A3B, layout, mtp="fused")
        config, weights = _weights(path)
        cases.append((label, config, weights))
    # the same with the lm_head at NVFP4's 4.5 bits (a hypothetical servelab cannot write
    # as a replica: the bytes are changed where every draft pass and the plain step read them)
    label, config, weights = cases[-1]
    nv = weights.lm_head_bytes * 9 // 32
    cases.append(("every text linear and the lm_head NVFP4 (hypothetical)", config,
                  dataclasses.replace(weights, lm_head_bytes=nv,
                                      decode_bytes_per_token=weights.decode_bytes_per_token
                                      - weights.lm_head_bytes + nv)))
    for label, config, weights in cases:
        plan = _plan(config, weights, "dgx-spark", SEED_K, (float(SEED_K + 1),), (2048,), kv)
        plain = plan.speed.decode[0].predicted_tok_s
        m = plan.speed.mtp[0]
        assert plain is not None and m.predicted_tok_s is not None
        t_step = (SEED_K + 1) / m.predicted_tok_s
        shifted = t_step - 1 / plain + 1 / SEED_PLAIN  # the plain part set to the seed's
        print(f"| {label} | {plain:.1f} | {m.predicted_tok_s:.1f} "
              f"({m.predicted_low:.1f}–{m.predicted_high:.1f}) | {SEED_MTP * t_step:.2f} | "
              f"{(SEED_K + 1) / shifted:.1f} | {SEED_MTP * shifted:.2f} |")
    print(f"\ndraft term: {m.draft_source}")
    print(f"source of the measured figures: {SEED}")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        h200(Path(tmp))
        spark(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
