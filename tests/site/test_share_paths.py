"""A page shared with strangers names no path of this machine, known or not."""

from __future__ import annotations

from servelab.site.share import LOCAL_PATH, scrub_paths


def test_known_and_unknown_local_paths_are_scrubbed_and_prose_is_not() -> None:
    reason = ("engine vllm-cpu is not installed: /root/.local/share/servelab/engines/vllm-cpu/"
              "venv/bin/python is missing (model /data/ckpt/qwen3); see "
              "https://docs.vllm.ai/en/latest/getting_started and ~/models/x")
    out = scrub_paths(reason, ["/data/ckpt/qwen3"])
    assert "/root" not in out and "/data" not in out and "~/models" not in out
    assert out.count(LOCAL_PATH) == 3
    assert "https://docs.vllm.ai/en/latest/getting_started" in out  # a URL is not a path
    prose = "decode 12.3 tok/s at 1/2 the load; K/V cache; a/b relative"
    assert scrub_paths(prose, []) == prose
