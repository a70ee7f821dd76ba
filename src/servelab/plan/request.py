"""What to plan, resolved once: :class:`PlanRequest` and the choices it carries.

A request is built once, by one of three constructors, from what the user wrote:
:meth:`PlanRequest.from_flags` (``servelab plan``'s and ``explain``'s options),
:meth:`PlanRequest.from_recipe` (a recipe's engine table: ``servelab run`` and
``servelab plan RECIPE``) and :meth:`PlanRequest.for_build` (a build ``servelab choose``
ranks). Each resolves everything the plan needs — the hardware profile (looked up, a probe
applied), the topology between its GPUs, the engine's KV arithmetic, start-up rules and
flags, as the engine hands them over through its interface (:mod:`servelab.engines.base`),
the prompt lengths, speculative decode, the calibration's source — and nothing below looks
a hardware profile, a topology or an engine up by name again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.engines import DEFAULT_ENGINE, get_engine
from servelab.hardware.profiles import HardwareProfile
from servelab.hardware.topology import Topology, topology_for
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.kvseam import KvArithmetic
from servelab.sizing.specsource import AUTO, DEFAULT_METHOD, AcceptanceOption
from servelab.sizing.startup import StartupRules

if TYPE_CHECKING:
    from servelab.serve.recipe import Recipe

__all__ = ["PlanRequest", "Speculation", "StoreChoice"]


@dataclass(frozen=True)
class Speculation:
    """Speculative decode to predict: ``draft_tokens`` per step at ``acceptance`` lengths
    (``auto``: what stored runs of the checkpoint with ``method`` and ``draft_tokens``
    measured; ``none``)."""

    acceptance: AcceptanceOption = AUTO
    method: str = DEFAULT_METHOD
    draft_tokens: int = 0
    hint: bool = True
    """A plan that drafts nothing notes the configurations stored runs of the checkpoint
    measured (``servelab plan`` does; a recipe's plan follows its own engine flags)."""


@dataclass(frozen=True)
class StoreChoice:
    """Where the calibration comes from: the results database ``db`` (unless ``use``
    is false) over the priors table ``priors`` (``None``: the shipped one)."""

    db: str | None = None
    use: bool = True
    priors: Path | None = None


@dataclass(frozen=True)
class PlanRequest:
    """One plan of a checkpoint, every choice resolved."""

    checkpoint: str
    """What the plan is of: a path or Hub repo id (``servelab plan``), a build's display name
    (``choose``), the recipe's model (``run``); the plan and its weights carry this name."""
    hardware: HardwareProfile
    topology: Topology
    kv_arithmetic: KvArithmetic
    startup_rules: StartupRules | None = None
    """The engine's start-up rules (required with a pooled KV arithmetic: vLLM's)."""
    engine: str = "vllm"
    engine_version: str = ENGINE_VERSION
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    prompt_lens: tuple[int, ...] = PROMPT_LENS
    revision: str | None = None
    speculation: Speculation = field(default_factory=Speculation)
    store: StoreChoice = field(default_factory=StoreChoice)
    where: str | None = None
    """Names the checkpoint in a plan's errors (``None``: :attr:`checkpoint`; ``""``: none)."""
    notes: tuple[str, ...] = ()
    """What the request adds to the plan's notes (an engine planned with another's
    arithmetic says so)."""

    @property
    def error_path(self) -> str:
        """How the plan's errors name the checkpoint ("" for none)."""
        return self.checkpoint if self.where is None else self.where

    @classmethod
    def from_flags(
        cls,
        checkpoint: str,
        hardware: HardwareProfile,
        topology: Topology,
        *,
        engine: str = DEFAULT_ENGINE,
        engine_version: str = ENGINE_VERSION,
        knobs: EngineKnobs | None = None,
        engine_flags: Mapping[str, Any] | None = None,
        prompt_lens: tuple[int, ...] = PROMPT_LENS,
        revision: str | None = None,
        speculation: Speculation | None = None,
        store: StoreChoice | None = None,
    ) -> PlanRequest:
        """A request from command-line flags (``servelab plan``, ``explain``): ``knobs`` are
        the vLLM-named flags, ``engine_flags`` the engine's own (llama-server's ``-c -np -ctk
        -ctv -fa -kvu``) as its table holds them; the engine's version is its own default
        unless ``engine_version`` names another than vLLM's default."""
        serving = get_engine(engine)
        table = serving.section_for(engine_flags) if engine_flags is not None else None
        arithmetic = serving.kv_arithmetic(table)
        assert arithmetic is not None  # the CLI plans vLLM's or llama.cpp's: servelab's own
        version = serving.default_version if engine_version == ENGINE_VERSION else engine_version
        return cls(checkpoint, hardware, topology, arithmetic, serving.startup_rules,
                   engine=serving.name, engine_version=version, knobs=knobs or EngineKnobs(),
                   prompt_lens=prompt_lens, revision=revision,
                   speculation=speculation or Speculation(), store=store or StoreChoice())

    @classmethod
    def from_recipe(cls, recipe: Recipe, hardware: HardwareProfile, *, engine_version: str,
                    store_used: bool, priors: Path | None = None) -> PlanRequest:
        """A request from a recipe: its model, its engine and that engine's flags, as the
        engine hands them to the planner; a recipe that drafts (vLLM's
        ``speculative_config``) is predicted at the acceptance stored runs measured. An
        engine whose KV pool servelab does not reproduce is planned with vLLM's arithmetic
        and start-up rules, and the plan says so."""
        serving = get_engine(recipe.engine.name)
        knobs = serving.plan_knobs(recipe.engine)
        own = serving.kv_arithmetic(recipe.engine)
        planner = serving if own is not None else get_engine(DEFAULT_ENGINE)
        arithmetic = own or planner.kv_arithmetic()
        assert arithmetic is not None
        notes = () if own is not None else (
            f"servelab does not model {serving.name}'s own KV pool: the pool above follows "
            f"vLLM {engine_version}'s arithmetic",)
        spec = knobs.speculative
        return cls(
            recipe.model.repo or recipe.name, hardware, topology_for(hardware.name), arithmetic,
            planner.startup_rules, engine=serving.name, engine_version=engine_version,
            knobs=knobs, prompt_lens=tuple(recipe.bench.workload().prompt_lens),
            revision=recipe.model.revision,
            speculation=Speculation(AUTO, spec.method, spec.draft_tokens, hint=False)
            if spec is not None else Speculation(hint=False),
            store=StoreChoice(use=store_used, priors=priors),
            where="", notes=notes,
        )

    @classmethod
    def for_build(cls, name: str, hardware: HardwareProfile, *, engine: str, context_len: int,
                  prompt_len: int, speculation: Speculation, store: StoreChoice) -> PlanRequest:
        """A request for one build ``servelab choose`` ranks, at ``context_len``: vLLM's pool
        at ``max_model_len = context_len``, llama.cpp's cache at ``-c context_len -np 1``."""
        serving = get_engine(engine)
        gguf = serving.name != DEFAULT_ENGINE
        table = serving.section_for({"ctx_size": context_len, "parallel": 1}) if gguf else None
        arithmetic = serving.kv_arithmetic(table)
        assert arithmetic is not None  # both arithmetics are servelab's own
        return cls(
            name, hardware, topology_for(hardware.name), arithmetic, serving.startup_rules,
            engine=serving.name, engine_version=serving.default_version,
            knobs=EngineKnobs() if gguf else EngineKnobs(max_model_len=context_len),
            prompt_lens=(prompt_len,), speculation=speculation, store=store,
        )

