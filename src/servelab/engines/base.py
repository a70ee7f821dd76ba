"""The engine seam: what servelab needs from a serving engine, and the recipe table base.

An engine is one folder under ``servelab/engines/`` holding an object that satisfies
:class:`Engine`, plus one line in the registry (:mod:`servelab.engines`). Everything else
(launch, process lifecycle, bench, store, pages) talks to engines only through this
interface, over HTTP and through their log; servelab never imports an engine.

Imports go one way: an engine sees only its own ``[engine]`` table (a subclass of
:class:`EngineSectionBase`) and values servelab resolved for it, never the whole recipe;
:mod:`servelab.serve` (recipe, install, launch, process) sits above and uses the registry.

What an engine provides:

* install/version: its installable :attr:`Engine.builds` (:mod:`servelab.engines.builds`:
  each a venv of its own, or ``shared_env`` when it runs in servelab's own environment);
* the recipe's ``[engine]`` table: :attr:`Engine.section`, a subclass of
  :class:`EngineSectionBase` whose ``name`` literal is the tag of the tagged union;
* argv from its own ``[engine]`` table and a :class:`ServeTarget` that servelab resolved
  (launcher, model argument, served name, port): :meth:`Engine.argv`; the model it serves
  from a local checkpoint: :meth:`Engine.local_model`;
* readiness: :meth:`Engine.ready` (which HTTP answers mean "serving");
* log facts: :meth:`Engine.log_parser` (live) and :meth:`Engine.parse_log` (whole text);
* what the planner knows of it, all handed over through this interface (the planner never
  imports an engine): :meth:`Engine.plan_knobs` (the flags of its table the planner reads,
  :class:`~servelab.sizing.knobs.EngineKnobs`), :meth:`Engine.kv_arithmetic` (the engine's
  own KV arithmetic, which lives in its folder and which the planner asks through
  :mod:`servelab.sizing.kvseam`; ``None`` when servelab does not reproduce this engine's KV
  pool), :attr:`Engine.startup_rules` (its start-up rules: defaults, graph capture,
  admission limits, refusals it can foresee; :mod:`servelab.sizing.startup`), and
  :meth:`Engine.section_for` (its table holding flags a command line gave);
* metrics: :attr:`Engine.metrics_path` and :attr:`Engine.headline_metrics` (Prometheus).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.engines.facts import EngineFacts, LineParser
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.kvseam import KvArithmetic
from servelab.sizing.startup import StartupRules

if TYPE_CHECKING:
    import httpx

    from servelab.engines.builds import EngineBuild

__all__ = [
    "Engine",
    "EngineSectionBase",
    "LogParsingEngine",
    "ServeTarget",
    "check_extra_args",
    "first_flag",
    "flag_value",
    "models_ready",
    "parse_lines",
]


class EngineSectionBase(BaseModel):
    """Keys every engine's ``[engine]`` table has; engines subclass it with their flags."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    build: str
    version: str | None = Field(
        default=None, description="PEP 440 requirement, e.g. '>=0.24,<0.27'."
    )
    python: str | None = Field(default=None, description="Interpreter of the engine's own venv.")
    executable: str | None = Field(default=None, description="The engine's server executable.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    startup_timeout_s: float = Field(default=900.0, gt=0)
    stop_grace_s: float = Field(default=20.0, ge=0)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("version")
    @classmethod
    def _spec(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            SpecifierSet(v)
        except InvalidSpecifier:
            raise ValueError(
                f"not a version requirement: {v!r} (e.g. '==0.32.0', '>=0.24,<0.27')"
            ) from None
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"not an environment variable name: {k!r}")
            if "\x00" in val:
                raise ValueError(f"{k}: value must not contain NUL characters")
        return v

    @model_validator(mode="after")
    def _launcher(self) -> EngineSectionBase:
        if self.python is not None and self.executable is not None:
            raise ValueError("give python or executable, not both")
        return self


@dataclass(frozen=True)
class ServeTarget:
    """What servelab resolved for one launch; the engine turns it into its argv."""

    launcher: tuple[str, ...]
    """The argv prefix: ``(python,)`` of the engine's venv, or ``(executable,)``."""
    model: str
    """The model argument: a local path (what :meth:`Engine.local_model` chose) or a repo id."""
    served_name: str
    """The name clients send in requests."""
    port: int
    revision: str | None = None
    """The repo revision (``model.revision``), when one is pinned."""


class Engine(Protocol):
    """A serving engine servelab can install, launch, watch, plan for and measure."""

    @property
    def name(self) -> str:
        """The ``[engine] name`` tag (e.g. ``"vllm"``); also stored as ``run.engine_name``."""
        ...

    @property
    def section(self) -> type[EngineSectionBase]:
        """Schema of this engine's ``[engine]`` table."""
        ...

    @property
    def builds(self) -> Sequence[EngineBuild]:
        """Installable builds (``servelab engine install NAME``); the first is the default."""
        ...

    def kv_arithmetic(self, section: EngineSectionBase | None = None) -> KvArithmetic | None:
        """This engine's KV arithmetic for the flags of ``section`` (its defaults when
        ``None``), as the planner asks it; ``None`` when servelab does not reproduce this
        engine's KV pool (checked against its logs in tests)."""
        ...

    @property
    def default_version(self) -> str:
        """The version whose rules the planner follows when the engine is not installed
        and the recipe pins none (``servelab plan RECIPE``)."""
        ...

    @property
    def metrics_path(self) -> str | None:
        """Path of its Prometheus endpoint, or ``None`` when it has none."""
        ...

    @property
    def headline_metrics(self) -> tuple[str, ...]:
        """Prometheus series worth recording when attaching to it."""
        ...

    def argv(self, section: EngineSectionBase, target: ServeTarget) -> list[str]:
        """The server's argument list from its ``[engine]`` table (never a shell string)."""
        ...

    def local_model(
        self, section: EngineSectionBase, path: Path, *, synth: bool, build: bool
    ) -> Path:
        """What the server loads for local checkpoint ``path`` (a built ``synth`` model
        when ``synth``); checks it exists (and prepares it) only when ``build``."""
        ...

    def ready(self, client: httpx.Client, base_url: str, served_model_name: str) -> bool:
        """One readiness poll: True once the server answers requests for the model."""
        ...

    def log_parser(self) -> LineParser:
        """A fresh live parser of this engine's output."""
        ...

    def parse_log(self, text: str) -> EngineFacts:
        """Facts from a whole log text."""
        ...

    def plan_knobs(self, section: EngineSectionBase) -> EngineKnobs:
        """The settings of ``section`` that the memory/KV planner reads (defaults resolved)."""
        ...

    @property
    def startup_rules(self) -> StartupRules | None:
        """The engine's start-up rules as the planner asks them; ``None`` when servelab
        checks none for this engine (its plans have no graph capture or admission limits)."""
        ...

    def section_for(self, flags: Mapping[str, Any]) -> EngineSectionBase:
        """This engine's ``[engine]`` table holding ``flags`` as a command line gave them
        (``servelab plan``'s and ``choose``'s): checked by the arithmetic that reads them when
        it runs, not as a recipe's table is."""
        ...

    def auto_env(self, section: EngineSectionBase) -> dict[str, str]:
        """Variables servelab adds to the engine's environment because its table needs
        them and does not set them (``[engine.env]`` always wins); recorded with the run."""
        ...

    @property
    def use_check(self) -> Mapping[str, Any] | None:
        """The ``[engine]`` table (less ``name``, ``python``, ``executable``) that starts
        this engine quickly on servelab's tiny ``llama`` model for an install's check by
        use (start, one token, stop); ``None``: nothing to check (it ships with servelab)."""
        ...


def check_extra_args(args: tuple[str, ...], managed: tuple[str, ...]) -> tuple[str, ...]:
    """Validate a recipe's ``extra`` arguments: no NUL, none of the ``managed`` flags."""
    for arg in args:
        if "\x00" in arg:
            raise ValueError("arguments must not contain NUL characters")
        name = arg.split("=", 1)[0]
        if name in managed:
            raise ValueError(f"{name} is set by servelab from the recipe; remove it from extra")
    return args


def first_flag(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The first option name among ``args`` (the part before any ``=``) that is in ``names``."""
    return next((name for arg in args if (name := arg.split("=", 1)[0]) in names), None)


def flag_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The value ``args`` give an option of ``names`` (``--name V`` or ``--name=V``; the last
    one wins, as with argparse); ``""`` for a bare flag, ``None`` when it is absent."""
    found: str | None = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name not in names:
            continue
        if eq:
            found = value
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            found = args[i + 1]
        else:
            found = ""
    return found


def parse_lines(parser: LineParser, text: str) -> EngineFacts:
    """Feed every line of ``text`` to ``parser`` and return its facts."""
    for line in text.splitlines():
        parser.feed(line)
    return parser.facts()


class LogParsingEngine:
    """Readiness and log facts shared by engines with ``/health`` and a line parser.

    Subclasses set :attr:`parser` (a class whose instances are :class:`LineParser`).
    """

    parser: type[LineParser]
    health_path: str | None = "/health"

    def ready(self, client: httpx.Client, base_url: str, served_model_name: str) -> bool:
        """:attr:`health_path` is 200 and ``/v1/models`` lists ``served_model_name``."""
        return models_ready(client, base_url, served_model_name, health=self.health_path)

    def log_parser(self) -> LineParser:
        """A fresh live parser of this engine's output."""
        return self.parser()

    def parse_log(self, text: str) -> EngineFacts:
        """Facts from a whole log text."""
        return parse_lines(self.log_parser(), text)

    def auto_env(self, section: EngineSectionBase) -> dict[str, str]:
        """None by default."""
        return {}

    #: See :attr:`Engine.use_check`.
    use_check: Mapping[str, Any] | None = None


def models_ready(
    client: httpx.Client, base_url: str, served_model_name: str, *, health: str | None
) -> bool:
    """``health`` (when given) answers 200 and ``/v1/models`` lists ``served_model_name``."""
    import httpx  # only when an engine is polled (``servelab --help`` stays light)

    try:
        if health is not None and client.get(f"{base_url}{health}").status_code != 200:
            return False
        models = client.get(f"{base_url}/v1/models")
        if models.status_code != 200:
            return False
        data: Any = models.json()
    except (httpx.HTTPError, ValueError):
        return False
    ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    return served_model_name in ids
