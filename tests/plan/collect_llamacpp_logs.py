"""Regenerate the llama.cpp family log fixtures in ``tests/engine/logs/`` (not a test).

For each case of ``tests/engine/llamacpp/test_kv_families.py``: build the tiny model, convert
it to GGUF, start the real ``llama-server`` with the case's flags (servelab's own launch),
stop it once it serves, and keep its whole log.

    .venv/bin/python -m tests.plan.collect_llamacpp_logs [LOG_NAME ...]

One server at a time.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.engine.llamacpp.test_kv_families import CASES, LOGS, recipe

from servelab.serve.launch import launch


def collect(name: str, arch: str, flags: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        eng = launch(recipe(arch, flags), run_dir=Path(tmp), port="auto")
        try:
            text = eng.log_path.read_text(encoding="utf-8")
        finally:
            eng.stop()
    (LOGS / name).write_text(text, encoding="utf-8")
    print(f"{name}: {len(text.splitlines())} lines")


def main() -> None:
    wanted = set(sys.argv[1:])
    for name, arch, flags in CASES:
        if not wanted or name in wanted:
            collect(name, arch, flags)


if __name__ == "__main__":
    main()
