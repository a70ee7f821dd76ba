"""The options of ``servelab plan`` (and those ``choose`` and ``explain`` share with it), one
declaration per option group: each flag's name, help and default as a Typer annotation, and
beside them the group's value with its validation, built from the command's parsed
parameters (:meth:`typer.Context.params`) by name.

Groups: the hardware (profile, probe, topology), vLLM's flags (memory, KV pool, layout,
start-up), llama-server's KV flags, speculative decode, the store and the priors, and the
load to predict. ``plan`` and ``choose`` build their hardware, speculation and store from the
same groups; a flag whose help differs between them is declared once per command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self

import typer

from servelab.defaults import ENGINE_VERSION, prompt_lens_text
from servelab.errors import UsageError
from servelab.hardware.topology import LINKS, topology_for
from servelab.units import parse_float_list, parse_int_list, parse_size

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.hardware.profiles import HardwareProfile
    from servelab.hardware.topology import Topology
    from servelab.plan.load import LoadRequest
    from servelab.plan.request import Speculation, StoreChoice
    from servelab.sizing.knobs import EngineKnobs
    from servelab.sizing.layout import ParallelLayout

__all__ = ["HardwareOptions", "LlamaServerOptions", "LoadOptions", "SpeculationOptions",
           "StoreOptions", "VllmOptions", "parse_bytes", "parse_list"]


def parse_bytes(text: str) -> int:
    """``6GiB`` / ``6G`` / ``6442450944`` -> bytes (the one size parser, as in recipes)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_list(text: str, kind: type[int] | type[float], what: str) -> list[int] | list[float]:
    """``512,2048,8192`` -> [512, 2048, 8192]."""
    try:
        return parse_int_list(text, what) if kind is int else parse_float_list(text, what)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


class _Group:
    """An option group's value, built from a command's parsed parameters by field name (a
    field the command does not offer keeps its default)."""

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Self:
        """The group of ``params`` (a command's :attr:`typer.Context.params`)."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in params.items() if k in names})


# -- the hardware: a profile by name, a probe's ceilings, the links between its GPUs --------

PlanHardwareOpt = Annotated[str | None, typer.Option(
    "--hardware", "-H",
    help="Hardware profile name (servelab hardware list; default: a recipe's, else "
    "dgx-spark).")]
ProbeOpt = Annotated[Path | None, typer.Option(
    "--probe",
    help="Probe JSON (servelab hardware probe --json) whose measured ceilings replace the "
    "published ones.")]
GpusPerNodeOpt = Annotated[int | None, typer.Option(
    "--gpus-per-node", help="GPUs joined by the fast link (default by hardware).")]
InterconnectOpt = Annotated[str | None, typer.Option(
    "--interconnect", help=f"Link within a node: {', '.join(LINKS)}.")]
NetworkOpt = Annotated[str | None, typer.Option(
    "--network", help=f"Link between nodes: {', '.join(LINKS)}.")]


@dataclass(frozen=True)
class HardwareOptions(_Group):
    """The hardware a plan is for: a profile name (user files first), a probe file whose
    measured ceilings replace the published ones, the links between its GPUs."""

    hardware: str | None = None
    hardware_file: list[Path] | None = None
    probe: Path | None = None
    gpus_per_node: int | None = None
    interconnect: str | None = None
    network: str | None = None

    def profile(self, default: str) -> HardwareProfile:
        """The profile named (``default`` when none is), a probe's ceilings applied; looked
        up once per command."""
        from servelab.hardware.lookup import get_profile
        from servelab.hardware.probe import load_probe
        from servelab.hardware.profiles import with_probe

        hw = get_profile(self.hardware or default, files=self.hardware_file or [])
        if self.probe is None:
            return hw
        try:
            data = json.loads(self.probe.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise UsageError("probe file not found", path=self.probe) from exc
        except json.JSONDecodeError as exc:
            raise UsageError(f"probe file is not JSON: {exc}", path=self.probe) from exc
        pr = load_probe(data)
        return with_probe(hw, bandwidth=pr.copy_bandwidth.best,
                          compute={k: v.best for k, v in pr.matmul.items()}, cpu_isa=pr.cpu_isa)

    def topology(self, hw: HardwareProfile) -> Topology:
        """The links between ``hw``'s GPUs: its default topology, any part overridden."""
        return topology_for(hw.name, intra_node=self.interconnect, inter_node=self.network,
                            gpus_per_node=self.gpus_per_node)


# -- vLLM's flags: memory, the KV pool, the parallel layout, start-up ------------------------

MaxModelLenOpt = Annotated[int | None, typer.Option(
    "--max-model-len",
    help="vLLM --max-model-len (default: the model's max_position_embeddings).")]
KvCacheMemoryBytesOpt = Annotated[str | None, typer.Option(
    "--kv-cache-memory-bytes",
    help="vLLM --kv-cache-memory-bytes: a fixed pool, e.g. 6GiB or 6442450944.")]
GpuMemoryUtilizationOpt = Annotated[float | None, typer.Option(
    "--gpu-memory-utilization",
    help="vLLM --gpu-memory-utilization (default: vLLM's 0.92; the pool ignores it when "
    "--kv-cache-memory-bytes is set, vLLM's start-up memory check does not).")]
KvCacheDtypeOpt = Annotated[str, typer.Option(
    "--kv-cache-dtype", help="vLLM --kv-cache-dtype (auto, fp8, bfloat16, …).")]
EngineVersionOpt = Annotated[str, typer.Option(
    "--engine-version", help="vLLM version whose arithmetic to follow.")]
NoPrefixCachingOpt = Annotated[bool, typer.Option(
    "--no-enable-prefix-caching", help="As vLLM's flag (changes hybrid state blocks).")]
OverheadOpt = Annotated[str | None, typer.Option(
    "--overhead", help="Runtime overhead to budget (default 2GiB estimate).")]
TensorParallelOpt = Annotated[int, typer.Option(
    "--tensor-parallel-size", "-tp", help="vLLM --tensor-parallel-size (GPUs per stage).")]
PipelineParallelOpt = Annotated[int, typer.Option(
    "--pipeline-parallel-size", "-pp", help="vLLM --pipeline-parallel-size (stages).")]
DataParallelOpt = Annotated[int, typer.Option(
    "--data-parallel-size", "-dp", help="vLLM --data-parallel-size (replicas).")]
ExpertParallelOpt = Annotated[bool, typer.Option(
    "--enable-expert-parallel", help="vLLM's EP: routed experts split over TP x DP.")]
# checked in the group, not with min=1: Typer would print "<int range> [x>=1]" as the metavar
# and widen the help's metavar column until option names are cut at 80 columns
MaxNumSeqsOpt = Annotated[int | None, typer.Option(
    "--max-num-seqs",
    help="vLLM --max-num-seqs (default: vLLM's for the hardware: 1024 on a GPU with >= 70 GiB, "
    "else 256; on CPU 128 per rank); checked against a hybrid's mamba blocks.")]
EnforceEagerOpt = Annotated[bool, typer.Option(
    "--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs.")]
AttentionBackendOpt = Annotated[str | None, typer.Option(
    "--attention-backend",
    help="vLLM --attention-backend (default: the one vLLM picks; on a CPU by its features, "
    "e.g. AMX_MLA where it has AMX tiles, else CPU_MLA).")]
MaxNumBatchedTokensOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens",
    help="vLLM --max-num-batched-tokens, the step's token budget (default: vLLM's).")]
PlanEngineOpt = Annotated[str, typer.Option(
    "--engine", help="Whose KV arithmetic: vllm, llamacpp, or auto (llamacpp for a .gguf file).")]


@dataclass(frozen=True)
class VllmOptions(_Group):
    """vLLM's flags a plan follows (``plan``'s defaults are vLLM's)."""

    max_model_len: int | None = None
    kv_cache_memory_bytes: str | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    engine_version: str = ENGINE_VERSION
    no_prefix_caching: bool = False
    overhead: str | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    attention_backend: str | None = None
    max_num_batched_tokens: int | None = None

    def check(self) -> None:
        """A UsageError for a value vLLM would refuse."""
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise UsageError(f"--max-num-seqs must be at least 1, got {self.max_num_seqs}")

    def layout(self) -> ParallelLayout:
        """The parallel options as the one layout value plan and recipes share."""
        from servelab.sizing.layout import ParallelLayout

        return ParallelLayout(tensor=self.tensor_parallel, pipeline=self.pipeline_parallel,
                              data=self.data_parallel, expert=self.expert_parallel)

    def given(self) -> dict[str, bool]:
        """Which vLLM-only flags were given (a llama.cpp plan and a recipe take none)."""
        return {
            "--max-model-len": self.max_model_len is not None,
            "--kv-cache-memory-bytes": self.kv_cache_memory_bytes is not None,
            "--kv-cache-dtype": self.kv_cache_dtype != "auto",
            "-tp/-pp/-dp/--enable-expert-parallel":
                not self.layout().is_single or self.expert_parallel,
            "--max-num-seqs": self.max_num_seqs is not None,
            "--enforce-eager": self.enforce_eager,
            "--attention-backend": self.attention_backend is not None,
        }

    def knobs(self) -> EngineKnobs:
        """The engine flags a plan follows."""
        from servelab.sizing.knobs import EngineKnobs
        from servelab.sizing.startup import StartupOptions

        return EngineKnobs(
            max_model_len=self.max_model_len,
            kv_cache_memory_bytes=parse_bytes(self.kv_cache_memory_bytes)
            if self.kv_cache_memory_bytes else None,
            gpu_memory_utilization=self.gpu_memory_utilization,
            kv_cache_dtype=self.kv_cache_dtype,
            enable_prefix_caching=not self.no_prefix_caching,
            overhead_bytes=parse_bytes(self.overhead) if self.overhead else None,
            layout=self.layout(),
            startup=StartupOptions(max_num_seqs=self.max_num_seqs,
                                   enforce_eager=self.enforce_eager,
                                   max_num_batched_tokens=self.max_num_batched_tokens),
            attention_backend=self.attention_backend,
        )


# -- llama-server's KV flags ----------------------------------------------------------------

CtxSizeOpt = Annotated[int | None, typer.Option(
    "--ctx-size", "-c",
    help="llama.cpp -c: KV cells in all (default: the training context per stream).")]
ParallelOpt = Annotated[int | None, typer.Option(
    "--parallel", "-np", help="llama.cpp -np: server slots (default: auto, 4 unified).")]
CacheTypeKOpt = Annotated[str, typer.Option(
    "--cache-type-k", "-ctk", help="llama.cpp -ctk: K cache type (f16, q8_0, ...).")]
CacheTypeVOpt = Annotated[str, typer.Option(
    "--cache-type-v", "-ctv", help="llama.cpp -ctv: V cache type (f16, q8_0, ...).")]
FlashAttnOpt = Annotated[str, typer.Option(
    "--flash-attn", "-fa", help="llama.cpp -fa: on, off or auto.")]
# Two plain flags, not "--kv-unified/--no-kv-unified": the pair would widen the help's
# short-name column until option names are cut at 80 columns.
KvUnifiedOnOpt = Annotated[bool, typer.Option(
    "--kv-unified", help="llama.cpp -kvu: one KV stream shared by all slots.")]
KvUnifiedOffOpt = Annotated[bool, typer.Option(
    "--no-kv-unified", help="llama.cpp --no-kv-unified: one KV stream per slot.")]


@dataclass(frozen=True)
class LlamaServerOptions(_Group):
    """llama-server's KV flags as ``plan`` takes them (``-c -np -ctk -ctv -fa -kvu``); the
    engine's own table holds them (:meth:`~servelab.engines.base.Engine.section_for`)."""

    ctx_size: int | None = None
    parallel: int | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    kv_unified_on: bool = False
    kv_unified_off: bool = False

    def check(self) -> None:
        """A UsageError for flags that exclude each other."""
        if self.kv_unified_on and self.kv_unified_off:
            raise UsageError("--kv-unified and --no-kv-unified exclude each other")

    def given(self) -> dict[str, bool]:
        """Which flags differ from llama-server's defaults, by their short names."""
        return {
            "-c": self.ctx_size is not None, "-np": self.parallel is not None,
            "-ctk": self.cache_type_k != "f16", "-ctv": self.cache_type_v != "f16",
            "-fa": self.flash_attn != "auto", "--kv-unified": self.kv_unified is not None,
        }

    @property
    def kv_unified(self) -> bool | None:
        """``-kvu`` (True), ``--no-kv-unified`` (False) or neither (None)."""
        return True if self.kv_unified_on else False if self.kv_unified_off else None

    def flags(self) -> dict[str, Any]:
        """The flags by the engine table's names."""
        return {
            "ctx_size": self.ctx_size, "parallel": self.parallel, "kv_unified": self.kv_unified,
            "cache_type_k": self.cache_type_k, "cache_type_v": self.cache_type_v,
            "flash_attn": self.flash_attn,
        }


# -- speculative decode -----------------------------------------------------------------------

PlanMtpAcceptanceOpt = Annotated[str, typer.Option(
    "--mtp-acceptance",
    help="Mean acceptance lengths to predict speculative decode at (needs --draft-tokens): "
    "auto = measured by stored runs of this checkpoint with the same --spec-method and "
    "--draft-tokens (none found: no prediction), none, or lengths, e.g. 1.5,2,2.5.")]
PlanDraftTokensOpt = Annotated[int, typer.Option(
    "--draft-tokens", help="Speculative tokens per step (num_speculative_tokens).")]
SpecMethodOpt = Annotated[str, typer.Option(
    "--spec-method",
    help="vLLM speculative method whose measured acceptance auto looks up (mtp, ngram, "
    "eagle, ...).")]
ChooseMtpAcceptanceOpt = Annotated[str, typer.Option(
    "--mtp-acceptance",
    help="Acceptance length for speculative decode (needs --draft-tokens): auto = measured "
    "by stored runs of the build, or a length, e.g. 2.5.")]
ChooseDraftTokensOpt = Annotated[int, typer.Option(
    "--draft-tokens", help="MTP draft tokens per step for builds with a usable head.")]


@dataclass(frozen=True)
class SpeculationOptions(_Group):
    """Speculative decode to predict: tokens per step, the method, the acceptance lengths."""

    mtp_acceptance: str = "auto"
    draft_tokens: int = 0
    spec_method: str = "mtp"

    def speculation(self) -> Speculation:
        """As the plan request holds it (``auto``, ``none`` or lengths checked here)."""
        from servelab.plan.request import Speculation
        from servelab.sizing.specsource import parse_acceptance_option

        return Speculation(parse_acceptance_option(self.mtp_acceptance), self.spec_method,
                           self.draft_tokens)


# -- the results store and the priors --------------------------------------------------------

PlanDbOpt = Annotated[str | None, typer.Option(
    "--db",
    help="Results database whose runs calibrate the prediction (default: $SERVELAB_DB, "
    "else the data directory's results.db when it exists).")]
PlanNoStoreOpt = Annotated[bool, typer.Option(
    "--no-store", help="Ignore stored runs: predict from the shipped priors alone.")]
ChooseNoStoreOpt = Annotated[bool, typer.Option(
    "--no-store", help="Ignore stored runs: priors only, nothing measured.")]
PriorsOpt = Annotated[Path | None, typer.Option(
    "--priors", help="A priors table (TOML) to use instead of the shipped one.")]


@dataclass(frozen=True)
class StoreOptions(_Group):
    """Where a plan's calibration comes from: a results database (unless ignored) over a
    priors table."""

    db: str | None = None
    no_store: bool = False
    priors: Path | None = None

    def choice(self) -> StoreChoice:
        """As the plan request holds it."""
        from servelab.plan.request import StoreChoice

        return StoreChoice(self.db, not self.no_store, self.priors)


# -- the load to predict ----------------------------------------------------------------------

PromptLensOpt = Annotated[str, typer.Option(
    "--prompt-lens", help="Comma-separated context/prompt lengths to predict.")]
ConcurrencyOpt = Annotated[str | None, typer.Option(
    "--concurrency",
    help="Predict serving under load at these closed-loop concurrencies, e.g. 1,4,16,64: "
    "TPOT, TTFT, tok/s per stream and per GPU (at each --prompt-lens).")]
RequestRateOpt = Annotated[str | None, typer.Option(
    "--request-rate", help="Predict under load at these constant request rates (req/s).")]
OutputLenOpt = Annotated[int, typer.Option(
    "--output-len", help="Output tokens per request under load.")]
RequestsOpt = Annotated[int | None, typer.Option(
    "--requests",
    help="Requests per load point (default: as servelab bench, max(3, 2 x concurrency)).")]
PlanSloOpt = Annotated[str | None, typer.Option(
    "--slo",
    help="Predict the highest load meeting this SLO, capacity's syntax "
    "(ttft_p99=500,tpot_p50=40), per prompt length.")]

PROMPT_LENS_DEFAULT = prompt_lens_text()


@dataclass(frozen=True)
class LoadOptions(_Group):
    """The prompt lengths to predict at, and the load (closed-loop concurrencies, request
    rates, an SLO) to predict serving under."""

    prompt_lens: str = PROMPT_LENS_DEFAULT
    concurrency: str | None = None
    request_rate: str | None = None
    output_len: int = 128
    requests: int | None = None
    max_num_batched_tokens: int | None = None
    slo: str | None = None

    def lens(self) -> tuple[int, ...]:
        """The prompt lengths."""
        return tuple(int(x) for x in parse_list(self.prompt_lens, int, "--prompt-lens"))

    def request(self) -> LoadRequest | None:
        """The load to predict (``None`` when none was asked for)."""
        from servelab.cli.load_view import parse_request

        return parse_request(
            list(self.lens()), self.output_len,
            [int(x) for x in parse_list(self.concurrency, int, "--concurrency")]
            if self.concurrency else [],
            [float(x) for x in parse_list(self.request_rate, float, "--request-rate")]
            if self.request_rate else [],
            self.requests, self.max_num_batched_tokens, self.slo,
        )


def vllm_only(given: Mapping[str, bool], *more: Mapping[str, bool]) -> Sequence[str]:
    """The names of the flags given among ``given`` and ``more``."""
    return [k for d in (given, *more) for k, v in d.items() if v]
