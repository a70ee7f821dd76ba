"""One secret masker (servelab.redact): the same secrets are masked the same way wherever
servelab shows or keeps them — stored records, pages, displayed commands, engine logs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from servelab.redact import REDACTED, redact, redact_args, redact_env, redact_text, secret_values
from servelab.serve.command import display_command
from servelab.site.collect import site_from_records
from servelab.site.render import render_site

SRC = Path(__file__).resolve().parents[2] / "src" / "servelab"
SECRET = "s3cr3t-value-42"
FLAGS = ("--api-key", "--hf-token", "--ssl-keyfile-password", "--token", "--password")
ENV = ("HF_TOKEN", "OPENAI_API_KEY", "OPENAI_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD")


@pytest.mark.parametrize("flag", FLAGS)
def test_every_consumer_masks_the_same_flags(flag: str) -> None:
    for argv in (["vllm", flag, SECRET, "--port", "1"], ["vllm", f"{flag}={SECRET}"]):
        assert SECRET not in " ".join(redact_args(argv))
        assert SECRET not in display_command(argv)
        assert SECRET not in str(redact({"engine_args": argv}))
        assert SECRET not in redact_text(" ".join(argv))
        assert secret_values(argv) == (SECRET,)
        assert REDACTED in " ".join(redact_args(argv))


@pytest.mark.parametrize("name", ENV)
def test_every_consumer_masks_the_same_environment(name: str) -> None:
    env = {name: SECRET, "OMP_NUM_THREADS": "2", "VLLM_MAX_TOKENS": "4096"}
    assert redact_env(env) == {name: REDACTED, "OMP_NUM_THREADS": "2", "VLLM_MAX_TOKENS": "4096"}
    assert SECRET not in display_command(["vllm"], env)
    assert redact({"env": env})["env"] == redact_env(env)
    assert secret_values([], env) == (SECRET,)


def test_a_page_masks_what_the_store_masks() -> None:
    from datetime import UTC, datetime

    from servelab.store import RunRecord

    run = RunRecord(started_at=datetime(2026, 7, 1, tzinfo=UTC), status="failed",
                    recipe_name="r", model_id="m", run_id="x1",
                    engine_args=("vllm", "serve", "m", "--api-key", SECRET),
                    status_reason=f"engine exited: HF_TOKEN={SECRET}",
                    log_tail=f"Authorization: Bearer {SECRET}")
    files = render_site(site_from_records([run]))
    assert all(SECRET not in content for content in files.values())
    assert REDACTED in files["runs/x1.html"]


def test_no_other_module_defines_a_marker_or_a_masker() -> None:
    """Only servelab/redact.py may define REDACTED or functions named redact*/secret*."""
    for path in SRC.rglob("*.py"):
        if path == SRC / "redact.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                assert "REDACTED" not in names, path
            if isinstance(node, ast.FunctionDef):
                assert not node.name.startswith("redact"), (path, node.name)
            if isinstance(node, ast.Constant) and node.value in ("***", "[redacted]"):
                pytest.fail(f"{path}: a second marker {node.value!r}")
