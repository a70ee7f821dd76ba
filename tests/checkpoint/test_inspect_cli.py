"""``servelab inspect``: real command runs on real checkpoints (in-process and as the
installed console script)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servelab.checkpoint.report import inspect_checkpoint
from servelab.cli.app import main

Variant = Callable[[str], Path]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_json_output_is_the_report(
    variant_checkpoint: Variant, capsys: pytest.CaptureFixture[str]
) -> None:
    d = variant_checkpoint("fp8-channel")
    rc, out, _ = _run(["inspect", str(d), "--json"], capsys)
    assert rc == 0
    assert json.loads(out) == inspect_checkpoint(d).to_json_dict()


def test_default_tables(variant_checkpoint: Variant, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["inspect", str(variant_checkpoint("mtp-declared"))], capsys)
    assert rc == 0
    for text in (
        "By dtype",
        "By role",
        "routed_expert",
        "linear_attention",
        "Findings",
        "mtp-declared-missing",
        "top-2 active",
        "decode reads",
    ):
        assert text in out, text


def test_markdown_output(variant_checkpoint: Variant, capsys: pytest.CaptureFixture[str]) -> None:
    d = variant_checkpoint("nvfp4")
    rc, out, _ = _run(["inspect", str(d), "--markdown"], capsys)
    assert rc == 0 and out == inspect_checkpoint(d).to_markdown()


def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], write_safetensors: Callable[..., Any]
) -> None:
    rc, _, err = _run(["inspect", str(tmp_path / "missing")], capsys)
    assert rc == 2 and err.startswith("error:") and err.count("\n") == 1
    bad = write_safetensors(
        tmp_path / "model.safetensors",
        {
            "a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
            "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},
        },
    )
    rc, out, err = _run(["inspect", str(bad)], capsys)
    assert rc == 2 and out == ""
    assert str(bad) in err and "[rule: offsets-gap]" in err
    rc, _, err = _run(["inspect", str(bad), "--json", "--markdown"], capsys)
    assert rc == 2 and "cannot be used together" in err


def test_remote_repo_through_endpoint(
    hub_server: Callable[..., Any],
    tiny_checkpoint: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    d = tiny_checkpoint("qwen3_next")
    hub = hub_server()
    repo = hub.add("tiny/qwen3-next", d)
    rc, out, _ = _run(
        ["inspect", repo, "--endpoint", hub.url, "--revision", "main", "--json"], capsys
    )
    assert rc == 0
    doc = json.loads(out)
    local = inspect_checkpoint(d).to_json_dict()
    assert doc["source"]["kind"] == "hub" and doc["source"]["location"] == repo
    assert doc["source"]["bytes_fetched"] == hub.body_bytes
    weights = (d / "model.safetensors").stat().st_size
    assert doc["source"]["bytes_fetched"] < weights // 4  # headers and configs only
    for key in ("tensor_count", "total_bytes", "roles", "decode", "layers", "findings"):
        assert doc[key] == local[key], key
    rc, out, _ = _run(["inspect", repo, "--endpoint", hub.url], capsys)
    assert rc == 0 and "headers and configs only" in out


def test_console_script_and_help() -> None:
    exe = Path(sys.executable).with_name("servelab")
    res = subprocess.run(
        [str(exe), "inspect", "--help"], capture_output=True, text=True, check=False, timeout=120
    )
    assert res.returncode == 0
    for opt in ("--revision", "--token", "--endpoint", "--json", "--markdown", "PATH_OR_REPO_ID"):
        assert opt in res.stdout, opt


def test_synth_commands_write_what_inspect_reads(
    tmp_path: Path, tiny_checkpoint: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    src = tiny_checkpoint("qwen3_5_moe_text")
    rc, _, _ = _run(
        ["synth", "mtp", str(src), str(tmp_path / "m"), "--ship", "--fused", "--undeclared"], capsys
    )
    assert rc == 0
    assert inspect_checkpoint(tmp_path / "m").mtp_tensors == 19
    rc, _, err = _run(["synth", "mtp", str(src), str(tmp_path / "x"), "--fused"], capsys)
    assert rc == 2 and "--ship" in err
    rc, _, _ = _run(
        [
            "synth",
            "replica",
            str(tmp_path / "r"),
            "--layout",
            "modelopt-nvfp4",
            "--targets",
            "experts",
        ],
        capsys,
    )
    assert rc == 0
    r = inspect_checkpoint(tmp_path / "r")
    assert (r.quant.method, r.quant.format) == ("modelopt", "NVFP4")
    assert r.role("attention").dtypes.keys() == {"BF16"}  # only experts quantized
    rc, _, _ = _run(
        ["synth", "replica", str(tmp_path / "f"), "--targets", "nvfp4-fast", "--mtp", "fused"],
        capsys,
    )
    assert rc == 0
    r = inspect_checkpoint(tmp_path / "f")
    assert r.quant.format == "mixed-precision" and r.mtp_tensors == 19
    assert r.role("lm_head").dtypes.keys() == {"F8_E4M3"}  # the weight (scales apart)
    rc, _, err = _run(
        ["synth", "replica", str(tmp_path / "g"), "--targets", "nvfp4-fast", "--layout", "bf16"],
        capsys,
    )
    assert rc == 2 and "nvfp4" in err
    rc, _, err = _run(
        ["synth", "quantize", str(src), str(tmp_path / "q"), "--variant", "int3"], capsys
    )
    assert rc == 2 and "unknown variant" in err


def test_every_inspect_and_synth_command_and_option_has_help() -> None:
    import typer

    from servelab.cli.app import app

    # Typer builds click-compatible groups (its own vendored click classes).
    root: Any = typer.main.get_command(app)
    ctx = root.context_class(root)
    synth = root.get_command(ctx, "synth")
    assert synth is not None and synth.help
    commands = [root.get_command(ctx, "inspect")] + [
        synth.get_command(ctx, n) for n in synth.list_commands(ctx)
    ]
    assert len(commands) == 5
    for cmd in commands:
        assert cmd is not None and cmd.help, cmd
        for p in cmd.params:
            assert getattr(p, "help", None), f"{cmd.name} {p.name}"
