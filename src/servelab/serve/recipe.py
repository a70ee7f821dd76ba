"""The recipe file: "this checkpoint, on this hardware, with this engine and these flags".

A recipe is TOML, validated with pydantic. Errors name the file, the offending key and
the line it is on (:class:`~servelab.errors.RecipeError`). Paths inside a recipe are
resolved relative to the recipe file (:meth:`Recipe.model_path`).

``[engine]`` is a tagged union: its ``name`` selects the engine's own table schema from the
engine registry (:mod:`servelab.engines`); a table without ``name`` is vLLM's, so older
recipes load unchanged.

Layout (every table but ``[model]`` is optional)::

    name = "tiny-cpu"              # short id, used for run directories and pages
    hardware = "host"              # hardware profile name (servelab hardware list)
    [model]                        # exactly one of path / repo / synth
    path = "../models/x"           # local checkpoint dir, relative to this file
    repo = "Qwen/Qwen3.6-35B-A3B-FP8"; revision = "main"
    synth = "qwen3_moe"            # a tiny random model servelab builds itself
    served_name = "my-model"
    [engine]                       # name (default "vllm") picks the engine; then build,
    [engine.flags]                 # version, python|executable, host, port, and the
    [engine.env]                   # engine's own flags (see servelab.engines.<name>.recipe)
    [bench]                        # workload defaults for ``servelab bench``
    [labels]                       # free-form string labels
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializeAsAny,
    Tag,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from servelab.bench.capacity import SearchSpec
from servelab.bench.spec import (
    FIELDS,
    RECIPE_DEFAULTS,
    RECIPE_KEYS,
    RECIPE_RENAMED,
    WorkloadSpec,
    default,
    recipe_fields,
)
from servelab.engines import DEFAULT_ENGINE, ENGINES
from servelab.engines.base import EngineSectionBase
from servelab.errors import RecipeError, UsageError
from servelab.synth.tiny import ARCHITECTURES as TINY_ARCHITECTURES

__all__ = [
    "SYNTH_ARCHS",
    "BenchSection",
    "EngineSection",
    "ModelSection",
    "Recipe",
    "load_recipe",
    "parse_recipe",
]

SYNTH_ARCHS = ("llama", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text")

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    """Which checkpoint to serve."""

    path: str | None = Field(
        default=None, description="Local checkpoint directory (relative to the recipe)."
    )
    repo: str | None = Field(
        default=None, description="Hugging Face repo id, e.g. Qwen/Qwen3.6-35B-A3B-FP8."
    )
    revision: str | None = Field(default=None, description="Repo revision (branch, tag or commit).")
    synth: str | None = Field(
        default=None,
        description="Build a tiny random model of this architecture (servelab synth tiny's).",
    )
    synth_overrides: dict[str, Any] = Field(default_factory=dict)
    synth_mtp: bool = Field(
        default=False,
        description="Give the tiny model a random MTP head (qwen3_next, qwen3_5_moe_text).",
    )
    served_name: str | None = Field(default=None, description="Name clients use in requests.")

    @field_validator("synth")
    @classmethod
    def _tiny_arch(cls, v: str | None) -> str | None:
        if v is not None and v not in TINY_ARCHITECTURES:
            raise ValueError(f"synth {v!r} is not one of {', '.join(TINY_ARCHITECTURES)}")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        given = [k for k in ("path", "repo", "synth") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of path, repo or synth"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.revision is not None and self.repo is None:
            raise ValueError("revision only applies to repo")
        if self.synth_overrides and self.synth is None:
            raise ValueError("synth_overrides only applies to synth")
        if self.synth_mtp and self.synth not in ("qwen3_next", "qwen3_5_moe_text"):
            raise ValueError("synth_mtp applies to synth = qwen3_next or qwen3_5_moe_text")
        return self

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", v):
            raise ValueError(f"not a repo id (owner/name): {v!r}")
        return v

    @field_validator("path", "served_name", "revision")
    @classmethod
    def _no_nul(cls, v: str | None) -> str | None:
        if v is not None and ("\x00" in v or not v.strip()):
            raise ValueError("must be a non-empty string without NUL characters")
        return v


def _engine_tag(value: Any) -> str:
    if isinstance(value, EngineSectionBase):
        return value.name
    if isinstance(value, dict):
        return str(value.get("name", DEFAULT_ENGINE))
    return DEFAULT_ENGINE


if TYPE_CHECKING:
    EngineSection = EngineSectionBase
else:
    # One member per registered engine, tagged by its ``name``; no name means vLLM.
    EngineSection = SerializeAsAny[
        Annotated[
            Union[tuple(Annotated[e.section, Tag(n)] for n, e in ENGINES.items())],  # noqa: UP007
            Discriminator(_engine_tag),
        ]
    ]


class _BenchBase(_Strict):
    """A recipe's ``[bench]`` table: the workload of ``servelab run`` under the one workload
    schema (:mod:`servelab.bench.spec`: the same names, types and validation as
    ``servelab bench``'s options; the recipe's defaults), and the client's sampling."""

    temperature: float = Field(default=0.0, ge=0)
    ignore_eos: bool = True

    @model_validator(mode="before")
    @classmethod
    def _earlier_names(cls, data: Any) -> Any:
        return recipe_fields(data) if isinstance(data, dict) else data

    @field_validator("*")
    @classmethod
    def _valid_alone(cls, value: Any, info: ValidationInfo) -> Any:
        """A workload key that is wrong on its own is named (its line too)."""
        if info.field_name in RECIPE_KEYS:
            try:
                WorkloadSpec(**{info.field_name: value})
            except UsageError as exc:
                raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _valid_workload(self) -> _BenchBase:
        try:
            self.workload()
        except UsageError as exc:
            raise ValueError(exc.message) from None
        return self

    def workload(self) -> WorkloadSpec:
        """The table as the bench workload it describes."""
        return WorkloadSpec(**{k: getattr(self, k) for k in RECIPE_KEYS})


#: A recipe has no ramp_end_rate or trace key: its arrivals are one of these.
RECIPE_TYPES: dict[str, Any] = {"profile": Literal["poisson", "constant", "gamma"]}


def _bench_fields() -> dict[str, Any]:
    hints = {**get_type_hints(WorkloadSpec), **RECIPE_TYPES}
    return {
        name: (hints[name], Field(default=RECIPE_DEFAULTS.get(name, default(name)),
                                  description=FIELDS[name].help))
        for name in RECIPE_KEYS
    }


if TYPE_CHECKING:
    BenchSection = _BenchBase
else:  # the workload fields come from WorkloadSpec: one schema, no second list of names
    BenchSection = create_model("BenchSection", __base__=_BenchBase, __module__=__name__,
                                **_bench_fields())


class CapacitySection(_Strict):
    """``[capacity]``: after the bench, ``servelab run`` searches the highest load meeting an
    SLO on the same server (``servelab capacity``'s search, its options' names) and stores
    the result with the run, where ``servelab plan --slo`` finds it beside its prediction."""

    slo: str = Field(description="SLO terms, e.g. ttft_p99=2000,tpot_p50=20 (ms).")
    variable: Literal["concurrency", "rate"] = "concurrency"
    prompt_lens: list[int] = Field(default_factory=lambda: [512], min_length=1)
    low: float | None = None
    high: float = 256.0
    tolerance: float = 0.05
    confirm: int = 2
    max_rounds: int = 3
    warmup_requests: int | None = None

    @model_validator(mode="after")
    def _valid(self) -> CapacitySection:
        from servelab.bench.slo import parse_slo

        try:
            parse_slo(self.slo)
            self.search()
        except UsageError as exc:
            raise ValueError(exc.message) from None
        if any(n < 1 for n in self.prompt_lens) or self.max_rounds < 1:
            raise ValueError("prompt lengths and max_rounds must be positive")
        return self

    def search(self) -> SearchSpec:
        """The search this section describes."""
        low = self.low if self.low is not None else (
            1.0 if self.variable == "concurrency" else 0.25)
        return SearchSpec(variable=self.variable, low=low, high=self.high,
                          tolerance=self.tolerance, confirm=self.confirm)


class Recipe(_Strict):
    """A validated recipe. ``source`` is the file it came from (``None`` when built in code)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    title: str | None = None
    description: str | None = None
    hardware: str | None = Field(default=None, description="Hardware profile name, e.g. dgx-spark.")
    model: ModelSection
    engine: EngineSection = Field(
        default_factory=lambda: ENGINES[DEFAULT_ENGINE].section.model_validate({})
    )
    bench: BenchSection = Field(default_factory=lambda: BenchSection())
    capacity: CapacitySection | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    source: Path | None = Field(default=None, exclude=True)

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths in the recipe are resolved against."""
        return self.source.parent if self.source is not None else Path.cwd()

    def served_model_name(self) -> str:
        """The name clients send: ``served_name``, else the repo id, else the recipe name."""
        if self.model.served_name:
            return self.model.served_name
        if self.model.repo:
            return self.model.repo
        return self.name

    def model_path(self) -> Path | None:
        """The local checkpoint directory (``model.path`` resolved), or ``None``."""
        if self.model.path is None:
            return None
        return resolve_recipe_path(self.base_dir, self.model.path)

    def engine_python(self) -> Path | None:
        """``engine.python`` resolved relative to the recipe, or ``None``."""
        if self.engine.python is None:
            return None
        return resolve_recipe_path(self.base_dir, self.engine.python)


def resolve_recipe_path(base: Path, value: str) -> Path:
    """Resolve ``value`` (``~`` expanded) against ``base``; returns an absolute path.

    Reading from anywhere the user points is allowed; servelab never writes to these
    paths (runs write only under their run directory).
    """
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = base / p
    return Path(_normalise(p))


def _normalise(p: Path) -> str:
    import os.path

    return os.path.normpath(str(p.absolute()))


# ---------------------------------------------------------------------------- loading


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file; :class:`RecipeError` names file, key and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError("recipe file not found", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read recipe: {exc}", path=p) from None
    return parse_recipe(text, source=p)


def parse_recipe(text: str, *, source: Path | None = None) -> Recipe:
    """Validate recipe TOML text. ``source`` names the file in errors and anchors paths."""
    where = str(source) if source is not None else "<recipe>"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"not valid TOML: {exc}", path=where) from None
    if source is not None:
        data["source"] = source.resolve()
    elif "source" in data:
        raise RecipeError("unknown key 'source'", path=where)
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        lines = key_lines(text)
        err = exc.errors()[0]
        loc = tuple(str(x) for x in err["loc"])
        if len(loc) > 1 and loc[0] == "engine" and loc[1] in ENGINES:
            loc = (loc[0], *loc[2:])  # drop the union's tag from the key path
        if len(loc) > 1 and loc[0] == "bench" and isinstance(data.get("bench"), dict):
            earlier = {new: old for old, new in RECIPE_RENAMED.items() if old in data["bench"]}
            loc = ("bench", earlier.get(loc[1], loc[1]), *loc[2:])  # the key as written
        line = _line_for(lines, loc)
        key = ".".join(loc) if loc else "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown engine {err['input'].get('name')!r}; choose one of {', '.join(ENGINES)}"
            key = "engine.name"
            line = lines.get(("engine", "name"), line)
        elif err["type"] == "missing":
            msg = "required key is missing"
        at = f"line {line}: " if line else ""
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RecipeError(f"{at}{key}: {msg}{more}", path=where) from None


_TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(
    r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)


def _split_dotted(key: str) -> tuple[str, ...]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)", key)
    return tuple(a or b or c for a, b, c in parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each table and key path in TOML ``text`` to its 1-based line number.

    A light scan (tables, dotted keys, ``key =`` lines) that is good enough to point at
    the line of an offending key; inline tables and arrays map to the line of their key.
    """
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_multiline: str | None = None
    for no, line in enumerate(text.splitlines(), start=1):
        if in_multiline is not None:
            if in_multiline in line:
                in_multiline = None
            continue
        if m := _TABLE.match(line):
            table = _split_dotted(m.group(1))
            out.setdefault(table, no)
            continue
        if m := _KEY.match(line):
            path = table + _split_dotted(m.group(1))
            out.setdefault(path, no)
            rest = line[m.end() :]
            for q in ('"""', "'''"):
                if rest.count(q) == 1:
                    in_multiline = q
    return out


def _line_for(lines: dict[tuple[str, ...], int], loc: tuple[str, ...]) -> int | None:
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None
