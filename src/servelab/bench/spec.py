"""What a benchmark runs — :class:`WorkloadSpec` — and the one schema of its options.

The same workload is described in three places: ``servelab bench`` / ``servelab capacity``
options, a recipe's ``[bench]`` table, and :class:`WorkloadSpec` itself. They share this
module's definitions so that a name cannot drift:

- the **names, types and defaults** are :class:`WorkloadSpec`'s fields (:func:`default`);
- the **validation** is :meth:`WorkloadSpec.__post_init__` (a recipe runs it when it loads);
- the **command-line flag and help** of each field are in :data:`FIELDS`;
- a recipe's ``[bench]`` keys are the field names (:data:`RECIPE_KEYS`); a recipe run is a
  verification, not a study, so it starts from :data:`RECIPE_DEFAULTS` (fewer repeats, a
  looser CI); the names recipes used before the schema was shared still read
  (:data:`RECIPE_RENAMED`, :func:`recipe_fields`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from servelab.bench.profiles import LoadProfile, ProfileKind
from servelab.defaults import OUTPUT_LEN, PROMPT_LENS
from servelab.errors import UsageError

__all__ = [
    "FIELDS",
    "RECIPE_DEFAULTS",
    "RECIPE_KEYS",
    "RECIPE_RENAMED",
    "WorkloadField",
    "WorkloadSpec",
    "default",
    "option_default",
    "recipe_fields",
]

DEFAULT_PROMPT_LENS = PROMPT_LENS
DEFAULT_OUTPUT_LEN = OUTPUT_LEN


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to run. Lengths are in tokens, as the server counts them."""

    prompt_lens: tuple[int, ...] = DEFAULT_PROMPT_LENS
    output_len: int = DEFAULT_OUTPUT_LEN
    concurrency: tuple[int, ...] = (1,)
    request_rate: float | None = None
    """Requests per second, Poisson arrivals (open loop); None = closed loop."""
    request_rates: tuple[float, ...] = ()
    """A request-rate grid: every point runs at each rate (``request_rate`` is the first)."""
    requests: int | None = None
    """Measured requests per batch; default max(3, 2 × concurrency)."""
    duration_s: float | None = None
    """Time budget per point; batches stop once it is spent."""
    warmup_requests: int | None = None
    """Per point, excluded from metrics; default = concurrency."""
    ci_target: float = 0.02
    max_repeats: int = 5
    subtract_min_latency: bool = False
    seed: int = 0
    max_backoff_s: float = 10.0
    """Longest pause honoured for a Retry-After header (closed loop)."""
    drain_s: float = 30.0
    """With ``duration_s``: how long in-flight requests may run past the budget."""
    profile: ProfileKind = "poisson"
    """Open-loop arrival profile (with ``request_rate`` or ``trace``), see profiles.py."""
    burstiness: float = 1.0
    ramp_end_rate: float | None = None
    trace: str | None = None
    """JSONL trace (Mooncake format) to replay: arrival times and lengths."""
    shared_prefix_len: int = 0
    """Tokens of a shared system prompt at the start of every prompt (prefix caching)."""
    prefix_groups: int = 1
    """How many distinct shared prompts the requests cycle through."""
    turns: int = 1
    """Turns per conversation: turn t's prompt is turn t-1's prompt, the answer it streamed
    (verbatim) and ``prompt_len`` new tokens, sent after turn t-1 ended (closed loop only).
    On the chat endpoint the earlier turns are user / assistant messages."""
    depths: tuple[int, ...] = ()
    """Context-depth grid: at depth d every prompt is d tokens of context shared by the
    point's requests (cached after the warm-up) followed by ``prompt_len`` new tokens, so
    TTFT measures prefill of the new tokens and TPOT decode, both at depth d."""
    dataset: str | None = None
    """Prompts from a local ShareGPT JSON / JSONL file (see datasets.py)."""
    dataset_lengths: Literal["exact", "natural"] = "exact"
    """``exact``: cut/fill each text to the point's prompt length; ``natural``: as written."""
    dataset_output: Literal["fixed", "reference"] = "fixed"
    """``reference``: generate as many tokens as the dataset's reference answer has."""

    def __post_init__(self) -> None:
        if not self.prompt_lens or any(n < 1 for n in self.prompt_lens):
            raise UsageError("prompt lengths must be positive")
        if self.output_len < 1:
            raise UsageError("output length must be >= 1")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise UsageError("concurrency must be >= 1")
        if self.request_rates:
            if self.request_rate is None:
                object.__setattr__(self, "request_rate", self.request_rates[0])
            elif self.request_rate not in self.request_rates:
                raise UsageError("request_rate must be one of request_rates")
            if any(r <= 0 for r in self.request_rates):
                raise UsageError("request rates must be > 0")
            if len(set(self.request_rates)) != len(self.request_rates):
                raise UsageError("request rates must not repeat")
            if len(self.request_rates) > 1 and (self.profile in ("ramp", "trace")
                                                or self.trace is not None):
                raise UsageError("a ramp or a trace sets its own rates: give one request rate")
        if self.request_rate is not None and self.request_rate <= 0:
            raise UsageError("request rate must be > 0")
        if self.requests is not None and self.requests < 1:
            raise UsageError("requests must be >= 1")
        if self.duration_s is not None and self.duration_s <= 0:
            raise UsageError("duration must be > 0")
        if self.max_repeats < 1:
            raise UsageError("max repeats must be >= 1")
        if not 0 < self.ci_target < 1:
            raise UsageError("CI target must be a fraction between 0 and 1, e.g. 0.02")
        if self.trace is not None and self.profile != "trace":
            object.__setattr__(self, "profile", "trace")
        if self.profile == "trace" and self.trace is None:
            raise UsageError("the trace profile needs a trace file (--trace)")
        if self.request_rate is not None and self.profile != "trace":
            LoadProfile(self.profile, self.request_rate, self.burstiness,
                        self.ramp_end_rate)  # validates the profile's parameters
        if self.shared_prefix_len < 0 or self.prefix_groups < 1 or self.turns < 1:
            raise UsageError("shared prefix length must be >= 0, prefix groups and turns >= 1")
        if self.shared_prefix_len and min(self.prompt_lens) <= self.shared_prefix_len:
            raise UsageError(f"every prompt length must exceed the shared prefix "
                             f"({self.shared_prefix_len} tokens)")
        if self.dataset is not None and (self.shared_prefix_len or self.turns > 1):
            raise UsageError("a dataset cannot be combined with --shared-prefix or --turns")
        if any(d < 0 for d in self.depths):
            raise UsageError("depths must be >= 0")
        if any(self.depths) and (self.shared_prefix_len or self.turns > 1
                                 or self.dataset is not None):
            raise UsageError("a depth grid cannot be combined with --shared-prefix, --turns "
                             "or --dataset")
        if self.turns > 1 and self.open_loop:
            raise UsageError("multi-turn conversations run closed loop (no request rate)")

    @property
    def rates(self) -> tuple[float | None, ...]:
        """The request rates to sweep (``(None,)``: closed loop)."""
        return self.request_rates or (self.request_rate,)

    @property
    def open_loop(self) -> bool:
        """Requests follow an arrival schedule (rate or trace) rather than a closed loop."""
        return self.request_rate is not None or self.trace is not None

    def batch_size(self, concurrency: int) -> int:
        """Measured requests per batch at ``concurrency``."""
        return self.requests if self.requests is not None else max(3, 2 * concurrency)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        d = asdict(self)
        d["prompt_lens"] = list(self.prompt_lens)
        d["concurrency"] = list(self.concurrency)
        d["depths"] = list(self.depths)
        d["request_rates"] = list(self.request_rates)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkloadSpec:
        """Inverse of :meth:`to_json`."""
        d = dict(d)
        d["prompt_lens"] = tuple(d["prompt_lens"])
        d["concurrency"] = tuple(d["concurrency"])
        d["depths"] = tuple(d.get("depths", ()))
        d["request_rates"] = tuple(d.get("request_rates", ()))
        return cls(**d)


@dataclass(frozen=True)
class WorkloadField:
    """How one :class:`WorkloadSpec` field is given on the command line."""

    name: str  # the field (and recipe key)
    flag: str  # the command-line option
    help: str


def _f(name: str, flag: str, help: str) -> tuple[str, WorkloadField]:
    return name, WorkloadField(name, flag, help)


#: Every workload field a user sets, with its command-line flag and help.
FIELDS: dict[str, WorkloadField] = dict((
    _f("prompt_lens", "--prompt-lens", "Comma-separated prompt lengths in tokens."),
    _f("output_len", "--output-len", "Tokens to generate per request (ignore_eos)."),
    _f("concurrency", "--concurrency", "Comma-separated concurrency levels to sweep."),
    _f("request_rates", "--request-rate", "Poisson arrivals at this many requests/s "
       "(concurrency caps); comma-separated for a grid, e.g. 1,2,4."),
    _f("requests", "--requests", "Measured requests per batch (default max(3, 2 × "
       "concurrency))."),
    _f("duration_s", "--duration", "Time budget per point, seconds."),
    _f("warmup_requests", "--warmup", "Warm-up requests per point, excluded (default: the "
       "concurrency)."),
    _f("ci_target", "--ci-target", "Repeat batches until the 95% CI of decode tok/s and TTFT "
       "is within ± this fraction."),
    _f("max_repeats", "--max-repeats", "Most batches per point."),
    _f("subtract_min_latency", "--subtract-min-latency", "Measure a minimal request's "
       "latency and subtract it from TTFT before computing prefill tok/s."),
    _f("seed", "--seed", "Seed for prompt filler and Poisson arrivals."),
    _f("profile", "--profile", "Arrivals with --request-rate: constant, poisson, gamma, "
       "ramp."),
    _f("burstiness", "--burstiness", "Gamma shape of the gaps (gamma, ramp): 1 = Poisson, "
       "< 1 burstier."),
    _f("ramp_end_rate", "--ramp-end-rate", "ramp: the rate reached at the last request, "
       "req/s."),
    _f("trace", "--trace", "Replay a JSONL trace (Mooncake format: timestamp ms, "
       "input_length, output_length per line): arrival times and exact lengths."),
    _f("shared_prefix_len", "--shared-prefix", "Tokens of a shared system prompt at the "
       "start of every prompt (prefix caching)."),
    _f("prefix_groups", "--prefix-groups", "Distinct shared prompts the requests cycle "
       "through."),
    _f("turns", "--turns", "Turns per conversation; each turn's prompt extends the previous "
       "one by the prompt length (history)."),
    _f("depths", "--depths", "Context-depth grid: tokens of shared, cached context before "
       "each prompt, e.g. 0,1024,4096."),
    _f("dataset", "--dataset", "Prompts from a ShareGPT JSON or JSONL file, cut/filled to "
       "each prompt length (see --dataset-lengths)."),
    _f("dataset_lengths", "--dataset-lengths", "exact: cut or fill each text to the prompt "
       "length; natural: as written (measured by the server's count)."),
    _f("dataset_output", "--dataset-output", "fixed: --output-len; reference: the dataset "
       "answer's tokens."),
))

_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(WorkloadSpec)}
assert set(FIELDS) <= set(_SPEC_FIELDS), "FIELDS names a field WorkloadSpec does not have"


def default(name: str) -> Any:
    """The default of a workload field (:class:`WorkloadSpec`'s)."""
    return _SPEC_FIELDS[name].default


def option_default(name: str) -> Any:
    """The default of a workload field as its command-line option takes it (a tuple as
    comma-separated text)."""
    value = default(name)
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) if value else None
    return value


#: The workload fields a recipe's ``[bench]`` table may set (the rest are options of one
#: ``servelab bench`` call: traces, datasets, depth grids).
RECIPE_KEYS = ("prompt_lens", "output_len", "concurrency", "request_rates", "requests",
               "max_repeats", "ci_target", "warmup_requests", "profile", "burstiness")

#: Where a recipe run starts (a verification, not a study): 256 output tokens, 3 measured
#: requests per batch, at most 4 batches (10 requests), a ±5 % CI target, 1 warm-up request.
RECIPE_DEFAULTS: Mapping[str, Any] = {
    "output_len": 256, "requests": 3, "max_repeats": 4, "ci_target": 0.05,
    "warmup_requests": 1,
}

#: ``[bench]`` keys of recipes written before the schema was shared -> today's key.
RECIPE_RENAMED: Mapping[str, str] = {
    "prompt_tokens": "prompt_lens", "output_tokens": "output_len", "repetitions": "requests",
    "warmup": "warmup_requests", "arrival_profile": "profile",
    "ci_target_pct": "ci_target", "max_repetitions": "max_repeats",
}


def recipe_fields(table: Mapping[str, Any]) -> dict[str, Any]:
    """A recipe's ``[bench]`` workload keys under today's names (other keys pass through, for
    the recipe's own validation to name). Keys under their earlier names are read:
    ``ci_target_pct`` is a percentage (``ci_target`` a fraction); ``max_repetitions`` counts
    requests in all (``max_repeats`` counts batches of ``requests``); ``requests = "auto"`` is
servelab bench's default batch, ``max(3, 2 x concurrency)``. ``ValueError`` names a
    key given under both names."""
    out: dict[str, Any] = {}
    old: dict[str, Any] = {}
    for key, value in table.items():
        if key == "requests" and value == "auto":
            out[key] = None  # servelab bench's default batch: max(3, 2 x concurrency)
            continue
        new = RECIPE_RENAMED.get(key)
        if new is None:
            out[key] = value
            continue
        if new in table:
            raise ValueError(f"give {new} or its earlier name {key}, not both")
        old[key] = value
    for key, value in old.items():
        if key == "ci_target_pct":
            out["ci_target"] = value / 100.0 if isinstance(value, int | float) else value
        elif key != "max_repetitions":
            out[RECIPE_RENAMED[key]] = value
    if "repetitions" in old and "max_repetitions" not in old and "max_repeats" not in table:
        old["max_repetitions"] = 10  # the earlier default: 10 requests in all
    if "max_repetitions" in old:
        total, per = old["max_repetitions"], out.get("requests", RECIPE_DEFAULTS["requests"])
        if isinstance(total, int) and isinstance(per, int) and per > 0:
            if total < per:
                raise ValueError("max_repetitions must be >= repetitions")
            out["max_repeats"] = max(1, math.ceil(total / per))
        else:
            out["max_repeats"] = total
    return out
