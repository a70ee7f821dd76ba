"""``servelab run`` on a llama.cpp recipe: the summary's KV table puts llama.cpp's own
predicted cache (cells and MiB) next to the one its log reports, and the stored run's
plan-vs-log checks cover it. Real ``llama-server``; a start and a tiny bench take seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.site.collect import plan_checks
from servelab.store import open_store

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# The tiny llama (KV heads of 16): a q8_0 K cache needs whole 32-value blocks per row
# (2 heads x 16), not per head, when flash attention is off.
RECIPE = """\
name = "tiny-llama-q8kv"
hardware = "host"
[model]
synth = "llama"
served_name = "tiny-llama-q8kv"
[engine]
name = "llamacpp"
gguf_type = "F16"
startup_timeout_s = 300
stop_grace_s = 10
[engine.flags]
ctx_size = 2000
parallel = 2
threads = 2
cache_type_k = "q8_0"
flash_attn = "off"
[bench]
prompt_tokens = [32]
output_tokens = 4
concurrency = [1]
repetitions = 1
max_repetitions = 1
warmup = 0
"""


def test_run_summary_prints_llama_cpp_kv_predicted_and_logged(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    db = str(tmp_path / "results.db")
    res = CliRunner().invoke(
        app, ["run", str(recipe), "--db", db, "--runs-dir", str(tmp_path / "runs")],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, res.output
    # 2 slots x pad256(1000) = 2 x 1024 cells; K: 32 values -> one 34-byte q8_0 block
    cells, k_bytes, v_bytes = 2 * 1024, 2 * 2048 * 34, 2 * 2048 * 32 * 2
    mib = f"{(k_bytes + v_bytes) / 2**20:.2f}"
    rows = [line for line in res.stdout.splitlines() if f"{cells:,}" in line]
    assert any("predicted (servelab plan, llama.cpp arithmetic)" in r and mib in r for r in rows)
    assert any("engine log" in r and mib in r for r in rows), res.stdout
    assert "vLLM" not in res.stdout
    with open_store(db) as store:
        [run] = store.list_runs()
    assert run.prediction and run.prediction["kv_pool"]["engine"] == "llamacpp"
    checks = {c.label: c for c in plan_checks(run)}
    for label in ("KV cache tokens", "KV cache size"):
        assert checks[label].predicted.value == checks[label].measured.value, label
    assert checks["KV cache tokens"].measured.value == cells
