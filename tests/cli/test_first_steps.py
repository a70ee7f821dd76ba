"""What a new user trips on first (issue 41): each small thing, through the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors
from tests.store.records import make_run

from servelab.cli.app import main
from servelab.store import open_store
from servelab.synth.gguf_replica import QWEN25_CODER_7B
from servelab.synth.gguf_replica import write_replica as write_gguf_replica
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_runs_list_before_any_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SERVELAB_DB", raising=False)
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    rc, out, err = _main(["runs", "list"], capsys)
    assert (rc, err) == (0, "")
    assert out.startswith("no runs stored yet: `servelab run RECIPE`")
    rc, out, _ = _main(["runs", "list", "--json"], capsys)
    assert rc == 0 and json.loads(out)["runs"] == []
    rc, out, _ = _main(["runs", "list", "--recipe", "x"], capsys)
    assert rc == 0 and "no runs stored yet" in out
    assert not (tmp_path / "home").exists()  # listing creates no database
    # a database named on purpose that is not there is a typo, not an empty store
    rc, _, err = _main(["runs", "list", "--db", str(tmp_path / "typo.db")], capsys)
    assert rc == 2 and "no results database here" in err


@pytest.mark.timeout(120)
def test_serve_says_in_a_sentence_when_the_log_gave_no_facts(tmp_path: Path) -> None:
    write_replica(tmp_path / "oss20", preset_config("gpt-oss-20b"),
                  preset_layout("gpt-oss-20b", None, None))
    recipe = tmp_path / "r.toml"
    recipe.write_text('name = "oss20-serve"\nhardware = "host"\n[model]\npath = "oss20"\n'
                      '[engine]\nname = "synthetic"\n', encoding="utf-8")
    env = {**os.environ, "SERVELAB_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
    lines = []
    with subprocess.Popen(
        [sys.executable, "-c", "from servelab.cli.app import main; main()", "serve",
         str(recipe), "--port", "auto"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("ready in"):
                    break
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
    out = "".join(lines)
    assert "holds none of the facts servelab reads from a log" in out, out
    assert "What the engine's log says" not in out  # an empty table's title, before


def test_compare_with_no_common_point_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "r.db")
    with open_store(db) as store:
        store.add_run(make_run(run_id="short", point="p512-c1", seed=1))
        store.add_run(make_run(run_id="long", point="p8192-c4", seed=2))
        store.add_run(make_run(run_id="long2", point="p8192-c4", seed=3))
    rc, out, err = _main(["compare", "short", "long", "--db", db], capsys)
    assert rc == 1 and out == ""  # not an empty table
    assert err.startswith("error: nothing to compare: the runs measured no point in common "
                          "(short: p512-c1; long: p8192-c4)")
    assert len(err.strip().splitlines()) == 1
    rc, out, _ = _main(["compare", "long", "long2", "--db", db], capsys)
    assert rc == 0 and "p8192-c4" in out


def test_llamacpp_flags_on_a_vllm_plan_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_replica(tmp_path / "oss20", preset_config("gpt-oss-20b"),
                  preset_layout("gpt-oss-20b", None, None))
    assert_one_line_errors([
        (["plan", str(tmp_path / "oss20"), "-H", "h100", "--ctx-size", "4096", "-np", "2"],
         "-c, -np: llama.cpp's flags, and this is a vLLM plan"),
        (["plan", str(tmp_path / "oss20"), "-H", "h100", "-ctv", "q8_0"], "-ctv: llama.cpp's"),
    ], capsys)


def test_a_folder_holding_one_gguf_is_planned_with_llamacpps_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "qwen-coder-q8"  # as a download of one quantization leaves it
    folder.mkdir()
    write_gguf_replica(QWEN25_CODER_7B, "Q8_0", folder / "qwen2.5-coder-7b-q8_0.gguf")
    rc, out, err = _main(["plan", str(folder), "-H", "h100", "-c", "8192", "-np", "2"], capsys)
    assert rc == 0, err
    assert "llama_kv_cache" in out and "GPU KV cache size" not in out
    rc, out, err = _main(["choose", str(folder), "-H", "h100", "--no-store", "--json"],
                         capsys)
    assert rc == 0, err
    assert json.loads(out)["builds"][0]["engine"] == "llamacpp"
