"""llama.cpp behind the engine seam: its own ``llama-server``, serving GGUF files.

Which server, and why: ``llama-server``, llama.cpp's native OpenAI-compatible server,
compiled from the llama.cpp source that the pinned PyPI package ``llama-cpp-python``
(0.3.36) vendors (:mod:`servelab.engines.llamacpp.build`). llama-cpp-python's own
Python server was the other candidate, but its streamed completions carry no ``usage``
(servelab counts tokens from ``usage`` only, never from chunks), it has no
``ignore_eos`` (exact output lengths) and no ``/metrics``; the native server has all
three, a ``/health`` that says when the model is loaded, and ``/tokenize``, so ``bench``
talks to it unchanged. No registry ships a maintained ``llama-server`` binary for this
platform (Debian bookworm has no llama.cpp package; the PyPI binary wheels bundle the
library, not the server), and building from the registry's source keeps the engine
pinned and reproducible: ``servelab engine install llamacpp`` needs only cmake and a C++
compiler (on 2 idle cores the build takes minutes; see README).

The recipe's ``[engine] name = "llamacpp"`` table is
:class:`~servelab.engines.llamacpp.recipe.LlamaCppSection`. A ``model.synth`` model is
converted to GGUF (``gguf_type``) by :mod:`servelab.synth.gguf`; a ``model.path`` names
a ``.gguf`` file or a directory holding one.

KV/memory: servelab computes llama.cpp's own KV cache (:mod:`servelab.engines.llamacpp.kv`:
cells per slot and in all, K and V bytes per layer for each cache type) from the model
and the flags servelab passes; :meth:`kv_arithmetic` hands the planner that arithmetic
for the recipe's flags. Tests hold the plan equal to the log's ``llama_kv_cache`` line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from servelab.engines.base import EngineSectionBase, LogParsingEngine, ServeTarget
from servelab.engines.builds import EngineBuild
from servelab.engines.llamacpp.build import BUILD_VERSION, LlamaServerBuilder
from servelab.engines.llamacpp.kv import LlamaCppKv
from servelab.engines.llamacpp.logfacts import LogParser
from servelab.engines.llamacpp.recipe import LlamaCppFlags, LlamaCppSection
from servelab.errors import CheckpointNotFoundError
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.kvseam import KvArithmetic
from servelab.sizing.startup import StartupRules
from servelab.synth.gguf import ensure_gguf, gguf_path

__all__ = ["LLAMACPP", "LlamaCppEngine", "flag_args"]

BUILDS = (
    EngineBuild(
        name="llamacpp",
        engine="llamacpp",
        packages=(),
        remove=(),
        versions=(("llama.cpp", ()),),
        import_name="",
        python_env="SERVELAB_LLAMACPP_SERVER",
        builder=LlamaServerBuilder(),
    ),
)

# (flag field, llama-server option), in the order they are emitted.
_VALUED = (
    ("ctx_size", "--ctx-size"),
    ("parallel", "--parallel"),
    ("threads", "--threads"),
    ("threads_batch", "--threads-batch"),
    ("n_gpu_layers", "--n-gpu-layers"),
    ("batch_size", "--batch-size"),
    ("ubatch_size", "--ubatch-size"),
    ("cache_type_k", "--cache-type-k"),
    ("cache_type_v", "--cache-type-v"),
    ("flash_attn", "--flash-attn"),
)


def flag_args(flags: LlamaCppFlags) -> list[str]:
    """llama-server flags as arguments, in a stable order; ``None`` flags are left out."""
    out: list[str] = []
    for name, option in _VALUED:
        value = getattr(flags, name)
        if value is not None:
            out += [option, str(value)]
    if flags.cont_batching is not None:
        out.append("--cont-batching" if flags.cont_batching else "--no-cont-batching")
    if flags.kv_unified is not None:
        out.append("--kv-unified" if flags.kv_unified else "--no-kv-unified")
    if flags.swa_full:
        out.append("--swa-full")
    out += list(flags.extra)
    return out


def _section(section: EngineSectionBase) -> LlamaCppSection:
    if not isinstance(section, LlamaCppSection):
        raise TypeError(f"not a llama.cpp engine table: {section.name!r}")
    return section


class LlamaCppEngine(LogParsingEngine):
    """llama.cpp's ``llama-server``; ready when ``/health`` is 200 (it is 503 while the
    model loads) and ``/v1/models`` lists the alias."""

    name = "llamacpp"
    parser = LogParser
    section: type[EngineSectionBase] = LlamaCppSection
    builds: Sequence[EngineBuild] = BUILDS
    default_version = BUILD_VERSION
    metrics_path: str | None = "/metrics"
    #: A Q8_0 GGUF exercises the quantized matrix kernels a CPU build picks (the AMX path
    #: crashed there at the first decode; :mod:`servelab.engines.llamacpp.build`).
    use_check = MappingProxyType({
        "gguf_type": "Q8_0", "startup_timeout_s": 120, "stop_grace_s": 5,
        "flags": {"ctx_size": 512, "parallel": 1},
    })
    headline_metrics: tuple[str, ...] = (
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:kv_cache_usage_ratio",
    )

    def argv(self, section: EngineSectionBase, target: ServeTarget) -> list[str]:
        """``llama-server --model M.gguf --alias NAME --host H --port P --metrics ...``."""
        eng = _section(section)
        argv = [*target.launcher, "--model", target.model, "--alias", target.served_name]
        # Verbosity 4: the model, context and KV-cache lines the log facts are read from.
        argv += ["--host", eng.host, "--port", str(target.port), "--metrics"]
        argv += ["--log-verbosity", "4"]
        argv += flag_args(eng.flags)
        return argv

    def local_model(
        self, section: EngineSectionBase, path: Path, *, synth: bool, build: bool
    ) -> Path:
        """A GGUF file: the synth model converted to ``gguf_type`` (cached beside it), the
        ``model.path`` file itself, or the one ``.gguf`` file in that directory."""
        if synth:
            qtype = _section(section).gguf_type
            return ensure_gguf(path, qtype) if build else gguf_path(path, qtype)
        if path.is_dir():
            found = sorted(path.glob("*.gguf"))
            if len(found) != 1:
                raise CheckpointNotFoundError(
                    f"model.path holds {len(found)} .gguf files; name one file", path=path
                )
            return found[0]
        if build and not path.is_file():
            raise CheckpointNotFoundError("model.path does not exist", path=path)
        return path

    def kv_arithmetic(self, section: EngineSectionBase | None = None) -> KvArithmetic | None:
        """llama.cpp's cache arithmetic for the flags of ``section`` (its defaults where
        unset: F16 K and V, flash attention auto, 4 unified slots); the recipe keeps such
        flags out of ``extra``, so the plan sees them all."""
        return LlamaCppKv(LlamaCppFlags() if section is None else _section(section).flags)

    def plan_knobs(self, section: EngineSectionBase) -> EngineKnobs:
        """llama.cpp's flags reach the planner through :meth:`kv_arithmetic`; of the
        shared knobs only prefix caching (always on) applies."""
        _section(section)
        return EngineKnobs(enable_prefix_caching=True)

    @property
    def startup_rules(self) -> StartupRules | None:
        """None: servelab checks no start-up rule of llama-server (no CUDA graph capture or
        admission limit in its plans)."""
        return None

    def section_for(self, flags: Mapping[str, Any]) -> EngineSectionBase:
        """A llama.cpp table holding ``flags`` as ``plan`` takes them (``-c 0``, any cache
        type): the KV arithmetic checks them when it runs, with llama.cpp's own refusals."""
        return LlamaCppSection.model_construct(name="llamacpp",
                                               flags=LlamaCppFlags.model_construct(**flags))


LLAMACPP = LlamaCppEngine()
