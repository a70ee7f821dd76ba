"""The synthetic server behind the engine seam: a real OpenAI-compatible server with no model.

:mod:`servelab.testing.synthetic_server` streams filler tokens on a schedule it is given
(time to first token, inter-token latency, prefill per prompt token, load-dependent
decode) and serves ``/health``, ``/v1/models``, ``/tokenize`` and a vLLM-style
``/metrics``. Registered as an engine, a recipe can start it with ``servelab serve`` and
``servelab run`` like any other: a known server to run the whole pipeline against in
seconds. It loads no weights: the recipe's checkpoint is still inspected and planned by
servelab (with vLLM's KV arithmetic, which the plan says), and the engine ignores it.

It ships with servelab, so its build is ``shared_env``: it runs in servelab's own
interpreter and needs no install.

This folder is also the demonstration that adding an engine is one folder plus one
registry line (README, "Engines").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servelab import __version__
from servelab.engines.base import EngineSectionBase, LogParsingEngine, ServeTarget
from servelab.engines.builds import EngineBuild
from servelab.engines.facts import EngineFacts, Phase
from servelab.errors import CheckpointNotFoundError
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.kvseam import KvArithmetic
from servelab.sizing.startup import StartupRules

__all__ = ["SYNTHETIC", "SyntheticEngine", "SyntheticFlags", "SyntheticSection"]

SERVER_MODULE = "servelab.testing.synthetic_server"

BUILDS = (
    EngineBuild(
        name="synthetic",
        engine="synthetic",
        packages=(),
        remove=(),
        versions=(("servelab", ("servelab",)),),
        import_name=SERVER_MODULE,
        python_env="SERVELAB_SYNTHETIC_PYTHON",
        shared_env=True,
    ),
)


class SyntheticFlags(BaseModel):
    """The server's schedule; ``None`` leaves the server's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float | None = Field(default=None, ge=0, description="Time to first token.")
    itl_ms: float | None = Field(default=None, ge=0, description="Time between chunks.")
    prefill_us_per_token: float | None = Field(
        default=None, ge=0, description="Added to the first token per prompt token."
    )
    itl_per_running_ms: float | None = Field(
        default=None, ge=0, description="Added to each gap per other stream in flight."
    )
    tokens_per_chunk: int | None = Field(
        default=None, ge=1, description="Tokens per chunk after the first."
    )


class SyntheticSection(EngineSectionBase):
    """How to start the synthetic server."""

    name: Literal["synthetic"]
    build: Literal["synthetic"] = "synthetic"
    startup_timeout_s: float = Field(default=60.0, gt=0)
    flags: SyntheticFlags = Field(default_factory=lambda: SyntheticFlags())

    @field_validator("executable")
    @classmethod
    def _no_executable(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError("the synthetic server is a Python module; give python instead")
        return v


_OPTIONS = (
    ("ttft_ms", "--ttft-ms"),
    ("itl_ms", "--itl-ms"),
    ("prefill_us_per_token", "--prefill-us-per-token"),
    ("itl_per_running_ms", "--itl-per-running-ms"),
    ("tokens_per_chunk", "--tokens-per-chunk"),
)
_LISTENING = re.compile(r"synthetic server listening on (http://\S+)")


class _LogParser:
    """Its one startup line: ``synthetic server listening on http://HOST:PORT``."""

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self._facts = EngineFacts()

    def feed(self, raw_line: str) -> Phase | None:
        m = _LISTENING.search(raw_line)
        if m is None or self.phase >= Phase.SERVER_STARTING:
            return None
        self._facts = replace(self._facts, server_url=m.group(1))
        self.phase = Phase.SERVER_STARTING
        return self.phase

    def facts(self) -> EngineFacts:
        return self._facts


def _section(section: EngineSectionBase) -> SyntheticSection:
    if not isinstance(section, SyntheticSection):
        raise TypeError(f"not a synthetic engine table: {section.name!r}")
    return section


class SyntheticEngine(LogParsingEngine):
    """``python -m servelab.testing.synthetic_server``; ready when ``/health`` is 200 and
    ``/v1/models`` lists the served name."""

    name = "synthetic"
    parser = _LogParser
    section: type[EngineSectionBase] = SyntheticSection
    builds: Sequence[EngineBuild] = BUILDS
    default_version = __version__
    metrics_path: str | None = "/metrics"
    headline_metrics: tuple[str, ...] = (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
    )

    def argv(self, section: EngineSectionBase, target: ServeTarget) -> list[str]:
        """``python -m servelab.testing.synthetic_server --host H --port P --model NAME``
        and the schedule; the model argument is not passed (no weights are loaded)."""
        eng = _section(section)
        argv = [*target.launcher, "-m", SERVER_MODULE, "--host", eng.host]
        argv += ["--port", str(target.port), "--model", target.served_name]
        for field_name, option in _OPTIONS:
            value = getattr(eng.flags, field_name)
            if value is not None:
                argv += [option, str(value)]
        return argv

    def local_model(
        self, section: EngineSectionBase, path: Path, *, synth: bool, build: bool
    ) -> Path:
        """The checkpoint servelab inspects and plans (the server itself reads none)."""
        if build and not synth and not path.exists():
            raise CheckpointNotFoundError("model.path does not exist", path=path)
        return path

    def kv_arithmetic(self, section: EngineSectionBase | None = None) -> KvArithmetic | None:
        """None: the server has no KV cache to reproduce."""
        return None

    def plan_knobs(self, section: EngineSectionBase) -> EngineKnobs:
        """No flag of the server sizes memory: the planner's defaults."""
        _section(section)
        return EngineKnobs()

    @property
    def startup_rules(self) -> StartupRules | None:
        """None: the server has no start-up rules to foresee."""
        return None

    def section_for(self, flags: Mapping[str, Any]) -> EngineSectionBase:
        """A synthetic table holding ``flags`` unchecked."""
        return SyntheticSection.model_construct(
            name="synthetic", flags=SyntheticFlags.model_construct(**flags))


SYNTHETIC = SyntheticEngine()
