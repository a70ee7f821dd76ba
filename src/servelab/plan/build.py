"""Assemble a :class:`Plan`: KV pool, memory budget, fit, and predicted speed.

Pure: a :class:`~servelab.plan.request.PlanRequest`, the checkpoint as read once
(:class:`~servelab.plan.checkpoint.Checkpoint`) and the stored runs' evidence
(:class:`~servelab.predict.evidence.Evidence`) in, frozen Plan out. JSON schema
``servelab.plan/1`` (:meth:`Plan.to_dict`)::

    {"schema": "servelab.plan/1", "predicted": true, "checkpoint": str,
     "hardware": {...profile...}, "engine": {"name": "vllm", "version", "platform"},
     "weights": {"resident_bytes", "decode_bytes_per_token", "routed_expert_bytes",
                 "active_params", "scheme", "quant_label", "source"},
     "dims": {"num_layers", "full_attention_layers", "linear_attention_layers",
              "layer_kinds": {kind: layers}, "mtp_layers", "num_experts", "experts_per_token"},
     "kv_pool": {...KvPoolPlan: tokens, max_concurrency, block_size, groups, rule,
                 evidence, log_lines, ...},
     "memory": {...MemoryPlan...},
     "fits": {"fits", "headroom_bytes", "largest_context_at_concurrency_1"},
     "speed": {...SpeedPrediction: decode/prefill/mtp points (roofline bound, prediction
               with interval), decode_fit/prefill_fit (source, ±), each "predicted": true},
     "kernel": {"path", "compute", "origin": "engine" | "profile", "reason", "source",
                "calibrated_as", "risk", "layers": {"moe"?, "linear": {...KernelChoice}}},
     "parallel": {"layout": {...ParallelLayout, world_size, ...}, "gpus": int,
                  "weights_per_gpu": {...GpuWeights...}, "topology": {...},
                  "decode": [{context_len, memory_s, comm_s, comm: [...], tok_s,
                              tok_s_per_gpu, "predicted": true}]},
     "speculative": {...AcceptanceSource: acceptance_source given|measured|none, method,
                     draft_tokens, acceptance_lengths, detail, run_ids, spread, stdev,
                     position_rates, measured} | null,
     "startup": {"max_num_seqs": {"value", "source"} | null,
                 "graph_capture": {"max_tokens", "source"} | null,
                 "memory": {...StartupMemory: the engine's start-up memory check, verdict,
                            passing_utilization, kv_budget_bytes...} | null,
                 "findings": [{check, predicted, conditional, message, fix, max_num_seqs,
                               max_num_seqs_source, mamba_blocks}]},
     "notes": [str]}

``startup.findings`` are start-up refusals the plan foresees (:mod:`servelab.sizing.startup`);
``startup.graph_capture`` is the largest step (tokens) vLLM will capture a CUDA graph for
(0: none), ``null`` for llama.cpp.

Memory and KV figures are per GPU (the fullest GPU's weights, one rank's pool); the KV
pool's tokens and concurrency are one replica's, as that replica's engine logs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from servelab.errors import UsageError
from servelab.families import ModelDims
from servelab.hardware.profiles import HardwareProfile
from servelab.hardware.topology import Topology
from servelab.ops.fitted import FittedSteps
from servelab.plan.checkpoint import Checkpoint
from servelab.plan.request import PlanRequest
from servelab.predict.batched import step_costs
from servelab.predict.evidence import Evidence
from servelab.predict.model import speed_for
from servelab.predict.ops_fitted import fitted_prefill
from servelab.predict.ops_speed import BUDGET, OperatorSpeed, operator_speed
from servelab.predict.speed import SpeedPrediction
from servelab.sizing.document import PLAN_SCHEMA
from servelab.sizing.kernels import KernelAssumption, profile_assumption
from servelab.sizing.kvpool import KvOptions, KvPoolPlan
from servelab.sizing.kvseam import (
    AllocatedKvArithmetic,
    KvCache,
    PlannedKv,
    PooledKvArithmetic,
)
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.memory import MemoryPlan, plan_memory
from servelab.sizing.parallel import GpuWeights, ParallelDecode, parallel_decode, weights_per_gpu
from servelab.sizing.specsource import DEFAULT_METHOD, AcceptanceSource
from servelab.sizing.startup import (
    GraphCapture,
    MaxNumSeqs,
    StartupFinding,
    StartupRules,
)
from servelab.sizing.startup_memory import REFUSES, StartupMemory
from servelab.sizing.weights import Weights
from servelab.units import GIB

SCHEMA = PLAN_SCHEMA  # one name for writer (to_dict) and reader (plan.document)


@dataclass(frozen=True)
class Plan:
    """Everything ``servelab plan`` prints."""

    checkpoint: str
    hardware: HardwareProfile
    engine_version: str
    platform: str
    dims: ModelDims
    weights: Weights
    kv: PlannedKv
    """The engine's KV cache by its own arithmetic: a pool carved from the memory left
    (:class:`~servelab.sizing.kvpool.KvPoolPlan`, vLLM's) or a cache allocated from its flags
    (:class:`~servelab.sizing.kvseam.KvCache`, llama.cpp's)."""
    memory: MemoryPlan
    largest_context_c1: int
    speed: SpeedPrediction
    notes: tuple[str, ...]
    layout: ParallelLayout
    gpu_weights: GpuWeights
    topology: Topology
    parallel_decode: tuple[ParallelDecode, ...]
    engine_name: str = "vllm"
    kv_label: str = "vLLM"  # whose KV arithmetic the plan follows

    @property
    def pool(self) -> KvPoolPlan | None:
        """The KV pool when the engine carves one from the memory left (vLLM), else None."""
        return self.kv if isinstance(self.kv, KvPoolPlan) else None

    @property
    def cache(self) -> KvCache | None:
        """The KV cache when the engine allocates one from its flags (llama.cpp), else None."""
        return None if isinstance(self.kv, KvPoolPlan) else self.kv

    @property
    def kv_tokens(self) -> int:
        """Tokens the engine's KV cache holds, by that engine's own arithmetic."""
        return self.kv.tokens

    @property
    def kv_arithmetic(self) -> str:
        """Whose KV arithmetic the plan follows, for labels: ``vLLM`` or ``llama.cpp``."""
        return self.kv_label

    @property
    def rules_label(self) -> str:
        """Whose rules the plan follows: ``vLLM 0.32.0, cpu rules`` or ``llama.cpp b1-...``."""
        if self.pool is None:
            return f"{self.kv_label} {self.engine_version}, {self.platform}"
        return f"{self.kv_label} {self.engine_version}, {self.platform} rules"

    @property
    def fits_one_request(self) -> bool:
        """The pool holds one full-length request (llama.cpp allocates each slot's)."""
        return self.pool.fits_one_request if self.pool is not None else True

    @property
    def starts(self) -> bool:
        """The engine's start-up memory check does not refuse at every stated free-memory
        figure (True where no check applies)."""
        return self.startup_memory is None or self.startup_memory.verdict != REFUSES

    @property
    def fits(self) -> bool:
        """The weights, overhead and KV pool fit the budget, the pool holds one request and
        the engine's start-up memory check passes."""
        return self.memory.fits and self.fits_one_request and self.starts

    def fit_sentence(self) -> str:
        """Whether it fits, why not when it does not, and the memory left, in one sentence.

        A pool the budget leaves (memory profiling) takes all the budget, so its headroom is
        not a figure: the sentence says how much lies outside the budget instead.
        """
        mem = self.memory
        gib = _gib_text
        if not mem.fits and mem.kv_pool_bytes <= 0:
            why = (f"weights {gib(mem.weights_bytes)} + overhead {gib(mem.overhead_bytes)} "
                   f"leave no KV pool in the budget of {gib(mem.budget_bytes)}")
        elif not mem.fits:
            why = (f"weights + KV pool + overhead ({gib(mem.total_bytes)}) exceed "
                   f"{gib(mem.budget_bytes)}")
        elif not self.starts and self.startup_memory is not None:
            sm = self.startup_memory
            why = (f"vLLM refuses to start: it needs {gib(sm.requested_bytes)} free "
                   f"({sm.utilization:g} x {gib(sm.total_bytes)})"
                   + (f"; --gpu-memory-utilization {sm.passing_utilization:.2f} passes"
                      if sm.passing_utilization is not None else ""))
        elif self.pool is not None and not self.pool.fits_one_request:
            why = (f"one request of {self.pool.max_model_len:,} tokens needs more KV than the "
                   f"{gib(mem.kv_pool_bytes)} pool holds; the largest context that fits is "
                   f"{self.largest_context_c1:,} tokens (lower --max-model-len or give a larger "
                   "pool)")
        else:
            why = ""
        if mem.kv_pool_source.startswith("estimate"):
            room = (f"the KV pool takes what the budget leaves; "
                    f"{gib(mem.memory_bytes - mem.budget_bytes)} lies outside the budget "
                    f"(gpu_memory_utilization {mem.gpu_memory_utilization:g})")
        else:
            room = f"headroom {gib(mem.headroom_bytes)}"
        verdict = "yes" if self.fits else f"NO: {why}"
        return (f"fits: {verdict}; {room}; largest context at concurrency 1: "
                f"{self.largest_context_c1:,} tokens")
    speculative: AcceptanceSource | None = None
    """Where the speculative prediction's acceptance length came from (or why there is none)."""
    max_num_seqs: MaxNumSeqs | None = None
    """The engine's max_num_seqs (given or vLLM's default); None for a llama.cpp plan."""
    graph_capture: GraphCapture | None = None
    """The largest step vLLM captures a CUDA graph for; None for a llama.cpp plan."""
    findings: tuple[StartupFinding, ...] = ()
    """Start-up refusals the plan foresees (e.g. vLLM's mamba blocks vs max_num_seqs)."""
    checkpoint_hash: str | None = None
    """The checkpoint's header hash (stored runs of the same tensors are found by it)."""
    kernels: KernelAssumption | None = None
    """The kernel path the plan assumed for the build's weights, where it comes from (the
    engine's own selection or the profile's table) and why; :attr:`speed` used it."""
    startup_memory: StartupMemory | None = None
    """The engine's start-up memory check on the memory it sees (None where the profile
    states no free memory at start, or for a llama.cpp plan)."""
    startup_rules: StartupRules | None = field(default=None, repr=False, compare=False)
    """The engine's start-up rules the plan followed (the load model asks them for the step
    token budget at another ``max_num_batched_tokens``); None for a llama.cpp plan."""
    #: Where the operator model predicted the speed: the fits it replaced (None: it did not).
    operator: OperatorSpeed | None = field(default=None, repr=False, compare=False)
    #: Where the prefill came from the fitted rooflines (hardware without operator tables):
    #: its steps, for the load model (None: it did not).
    roofline_prefill: FittedSteps | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (schema ``servelab.plan/1``, see module docs)."""
        w = self.weights
        return {
            "schema": SCHEMA,
            "predicted": True,
            "checkpoint": self.checkpoint,
            "hardware": self.hardware.to_dict(),
            "engine": {
                "name": self.engine_name,
                "version": self.engine_version,
                "platform": self.platform,
            },
            "weights": {
                "resident_bytes": w.resident_bytes,
                "decode_bytes_per_token": w.decode_bytes_per_token,
                "routed_expert_bytes": w.routed_expert_bytes,
                "routed_expert_bits": w.routed_expert_bits,
                "active_params": w.active_params,
                "scheme": w.scheme,
                "quant_label": w.quant_label,
                "mtp_tensors": w.mtp_tensors,
                "source": w.source,
            },
            "dims": {
                "num_layers": self.dims.num_layers,
                "full_attention_layers": self.dims.num_full_attention_layers,
                "linear_attention_layers": self.dims.num_linear_layers,
                "layer_kinds": {
                    kind: self.dims.layer_types.count(kind)
                    for kind in dict.fromkeys(self.dims.layer_types)
                },
                "mtp_layers": self.dims.mtp_layers,
                "num_experts": self.dims.num_experts,
                "experts_per_token": self.dims.experts_per_token,
            },
            "kv_pool": self._kv_dict(),
            "memory": self.memory.to_dict(),
            "fits": {
                "fits": self.fits,
                "headroom_bytes": self.memory.headroom_bytes,
                "largest_context_at_concurrency_1": self.largest_context_c1,
            },
            "speed": self.speed.to_dict(),
            "kernel": self.kernels.to_dict() if self.kernels else None,
            "parallel": {
                "layout": self.layout.to_dict(),
                "gpus": self.layout.world_size,
                "weights_per_gpu": self.gpu_weights.to_dict(),
                "topology": self.topology.to_dict(),
                "decode": [d.to_dict() for d in self.parallel_decode],
            },
            "speculative": self.speculative.to_dict() if self.speculative else None,
            "startup": {
                "max_num_seqs": self.max_num_seqs.to_dict() if self.max_num_seqs else None,
                "graph_capture": self.graph_capture.to_dict() if self.graph_capture else None,
                "memory": self.startup_memory.to_dict() if self.startup_memory else None,
                "findings": [f.to_dict() for f in self.findings],
            },
            "step_costs": self._step_costs(),
            "notes": list(self.notes),
        }

    def _step_costs(self) -> dict[str, Any] | None:
        """What one engine step of this model costs (vLLM plans), for re-predicting a stored
        run's load sweep from its plan document."""
        if self.pool is None:
            return None
        return step_costs(self.weights, self.dims, self.pool.kv_dtype_bytes,
                          self.pool.mamba_ssm_dtype or "float32").to_dict()

    def _kv_dict(self) -> dict[str, Any]:
        if self.pool is None:
            return {**self.kv.to_dict(), "engine_version": self.engine_version}
        return self.pool.to_dict()


def _gib_text(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclass(frozen=True)
class _Sized:
    """The KV cache, memory and start-up limits of a plan, before its speed."""

    kv: PlannedKv
    memory: MemoryPlan
    longest: int
    platform: str
    notes: list[str]
    kv_dtype_bytes: int
    ssm_dtype: str
    seqs: MaxNumSeqs | None = None
    graphs: GraphCapture | None = None
    findings: tuple[StartupFinding, ...] = ()
    startup_memory: StartupMemory | None = None


def build_plan(request: PlanRequest, checkpoint: Checkpoint, evidence: Evidence) -> Plan:
    """Plan ``checkpoint`` as ``request`` says, its speed predicted from ``evidence``.

    The KV pool or cache is what the engine's own arithmetic (``request.kv_arithmetic``,
    :mod:`servelab.sizing.kvseam`) says: a pool carved from the memory left (vLLM's rules for
    the request's engine version), or a cache the engine allocates from its flags
    (llama.cpp). The engine's layout spreads the model over several GPUs of the hardware
    (each one a GPU of that profile); memory and fit are judged per GPU. Its start-up flags
    feed its start-up rules (:mod:`servelab.sizing.startup`; required with a pooled KV
    arithmetic). The speed model is asked once (:func:`servelab.predict.model.speed_for`).
    """
    r, dims, weights, hardware = request, checkpoint.dims, checkpoint.weights, request.hardware
    lay = r.knobs.layout
    _check_layout(dims, lay)
    gpu_w = weights_per_gpu(weights, dims.num_layers, lay)
    arithmetic = r.kv_arithmetic
    if isinstance(arithmetic, AllocatedKvArithmetic):
        sized = _allocated_kv(arithmetic, r, checkpoint, gpu_w)
    else:
        sized = _pooled(arithmetic, r, checkpoint, gpu_w, _draft_method(evidence))
    notes = sized.notes
    kernels = _kernels(r, checkpoint)
    notes.append(kernels.line)
    if kernels.risk:
        notes.append(f"kernel-path risk: {kernels.path.name} on {hardware.arch}: {kernels.risk}")
    if dims.mtp_layers and not weights.mtp_tensors:
        notes.append(
            f"config declares {dims.mtp_layers} MTP layer(s) but the checkpoint ships no mtp.* "
            "tensors: no speculative decode"
        )
    speed = speed_for(
        weights, dims, hardware, evidence, engine=r.engine, family=checkpoint.family,
        prompt_lens=r.prompt_lens, kv_dtype_bytes=sized.kv_dtype_bytes,
        ssm_dtype=sized.ssm_dtype, draft_tokens=r.speculation.draft_tokens,
        graph_tokens=sized.graphs.max_tokens if sized.graphs is not None else None,
        kernel_path=kernels.path,
    )
    budget = _budget(r, sized.platform, lay)
    ops = operator_speed(speed, checkpoint.config, scheme=weights.scheme,
                         hardware=hardware.name, engine=r.engine, gpus=lay.gpus_per_replica,
                         enabled=evidence.fitted, dims=dims, budget=budget)
    fp = fitted_prefill(ops.speed, checkpoint.config, scheme=weights.scheme, profile=hardware,
                        engine=r.engine, gpus=lay.gpus_per_replica,
                        enabled=evidence.fitted and not ops.used, dims=dims, budget=budget)
    speed = fp.speed
    bw, _ = hardware.effective_bandwidth_ceiling()
    pdec = tuple(
        parallel_decode(
            d.context_len,
            weight_bytes=d.weight_bytes,
            kv_bytes=d.kv_bytes,
            state_bytes=d.state_bytes,
            weights=weights,
            dims=dims,
            layout=lay,
            topo=r.topology,
            bandwidth=bw,
        )
        for d in speed.decode
    )
    notes += _layout_notes(sized, dims, weights, hardware, lay, r.startup_rules)
    return Plan(
        checkpoint=weights.name,
        hardware=hardware,
        engine_version=r.engine_version,
        platform=sized.platform,
        dims=dims,
        weights=weights,
        kv=sized.kv,
        memory=sized.memory,
        largest_context_c1=sized.longest,
        speed=speed,
        notes=(*notes, *evidence.notes, *r.notes),
        layout=lay,
        gpu_weights=gpu_w,
        topology=r.topology,
        parallel_decode=pdec,
        engine_name=r.engine,
        kv_label=arithmetic.label,
        speculative=evidence.acceptance,
        max_num_seqs=sized.seqs,
        graph_capture=sized.graphs,
        findings=sized.findings,
        startup_memory=sized.startup_memory,
        kernels=kernels,
        checkpoint_hash=checkpoint.header_hash,
        startup_rules=r.startup_rules,
        operator=ops if ops.used else None,
        roofline_prefill=fp.steps,
    )


def _budget(r: PlanRequest, platform: str, lay: ParallelLayout) -> int:
    """The step token budget the engine runs with (a long prompt's prefill chunk)."""
    if r.startup_rules is None:
        return BUDGET
    return r.startup_rules.max_num_batched_tokens(r.hardware, platform, lay,
                                                  r.knobs.startup).value


def _kernels(r: PlanRequest, checkpoint: Checkpoint) -> KernelAssumption:
    """The kernel path the plan assumes: the engine's own selection where its rules read one
    (vLLM's), else the hardware profile's table."""
    if r.startup_rules is None or checkpoint.weights.scheme.startswith("gguf"):
        return profile_assumption(r.hardware, checkpoint.weights,
                                  f"servelab does not read {r.engine}'s kernel selection")
    return r.startup_rules.kernels(checkpoint.scheme, checkpoint.weights, r.hardware,
                                   r.engine_version, model_type=checkpoint.model_type)


def _draft_method(evidence: Evidence) -> str:
    """The speculative method the plan counts draft layers for (MTP unless the evidence's
    acceptance says otherwise)."""
    return evidence.acceptance.method if evidence.acceptance is not None else DEFAULT_METHOD


def _allocated_kv(arithmetic: AllocatedKvArithmetic, r: PlanRequest, checkpoint: Checkpoint,
                  gpu_w: GpuWeights) -> _Sized:
    """A cache the engine allocates from its own flags (llama.cpp), whatever memory is left."""
    if not r.knobs.layout.is_single:
        raise UsageError(f"servelab plans {arithmetic.label} on one device: no parallel layout")
    cache = arithmetic.cache(checkpoint.dims, checkpoint.config)
    mem = replace(
        plan_memory(r.hardware, weights_bytes=gpu_w.per_gpu,
                    kv_cache_memory_bytes=cache.total_bytes,
                    overhead_bytes=r.knobs.overhead_bytes),
        kv_pool_source=cache.source,
    )
    return _Sized(cache, mem, cache.n_ctx_seq, r.hardware.platform, list(cache.notes),
                  cache.kv_dtype_bytes, "float32")


def _pooled(arithmetic: PooledKvArithmetic, r: PlanRequest, checkpoint: Checkpoint,
            gpu_w: GpuWeights, spec_method: str) -> _Sized:
    """A pool the engine carves from the memory its weights leave (vLLM), with the limits
    its start-up rules set and the refusals they foresee."""
    dims, weights, hardware, knobs = checkpoint.dims, checkpoint.weights, r.hardware, r.knobs
    draft_tokens = r.speculation.draft_tokens
    rules = r.startup_rules
    if rules is None:
        raise UsageError(f"{arithmetic.label}'s KV pool is planned with its engine's start-up "
                         "rules; none were given")
    platform, pnote = rules.platform(hardware)
    notes = [pnote] if pnote else []
    kv, mem, longest = _pooled_kv(
        arithmetic, dims, hardware, gpu_w, knobs.layout,
        KvOptions(
            max_model_len=knobs.max_model_len or dims.max_position_embeddings or 4096,
            engine_version=r.engine_version,
            platform=platform,
            kv_cache_dtype=knobs.kv_cache_dtype,
            block_size=knobs.block_size,
            enable_prefix_caching=knobs.enable_prefix_caching,
            num_speculative_tokens=draft_tokens,
            draft_attention_layers=dims.mtp_layers
            if draft_tokens and spec_method == "mtp" and weights.mtp_tensors else 0,
            layout=knobs.layout,
            cpu_isa=hardware.cpu_isa,
            attention_backend=knobs.attention_backend,
            device_memory_bytes=hardware.memory_bytes,
        ),
        kv_cache_memory_bytes=knobs.kv_cache_memory_bytes,
        gpu_memory_utilization=knobs.gpu_memory_utilization,
        overhead_bytes=knobs.overhead_bytes,
    )
    opts = knobs.startup
    seqs = rules.max_num_seqs(hardware, platform, knobs.layout, opts)
    graphs = rules.graph_capture(seqs, platform, opts, spec_tokens=draft_tokens)
    findings = rules.findings(kv, seqs, opts, hardware)
    startmem = rules.memory_check(
        hardware, r.engine_version, weights_bytes=gpu_w.per_gpu,
        overhead_bytes=mem.overhead_bytes, overhead_source=mem.overhead_source,
        gpu_memory_utilization=knobs.gpu_memory_utilization,
        kv_cache_memory_bytes=knobs.kv_cache_memory_bytes)
    if startmem is not None:
        notes.append(f"memory as vLLM sees it: {mem.memory_source}; {startmem.line}")
        if (found := rules.memory_finding(startmem)) is not None:
            findings = (*findings, found)
    if draft_tokens and spec_method == "mtp" and weights.mtp_tensors and dims.mtp_layers:
        notes.append(
            f"{dims.mtp_layers} MTP draft attention layer(s) and "
            f"{draft_tokens} speculative state slot(s) counted in the KV groups (this part "
            "of the arithmetic is not yet checked against an engine log)"
        )
    if not kv.verified_rule:
        kinds = ", ".join(sorted({g.kind for g in kv.groups}))
        notes.append(
            f"KV arithmetic for {arithmetic.label} {r.engine_version} on {platform} ({kinds}) "
            f"follows {arithmetic.label}'s source; not yet checked against that version's own "
            "log"
        )
    return _Sized(kv, mem, longest, platform, notes, kv.kv_dtype_bytes,
                  kv.mamba_ssm_dtype or "float32", seqs, graphs, findings, startmem)


def _layout_notes(sized: _Sized, dims: ModelDims, weights: Weights, hardware: HardwareProfile,
                  lay: ParallelLayout, rules: StartupRules | None) -> list[str]:
    """What the plan says of its parallel layout, then what the engine's rules say of it."""
    notes = []
    if not lay.is_single:
        notes.append(
            f"{lay.label()} on {lay.world_size} x {hardware.name}: memory, weights and KV pool "
            "are per GPU; the KV pool's tokens and concurrency are one replica's"
        )
    if rules is not None and isinstance(sized.kv, KvPoolPlan):
        notes += rules.plan_notes(dims, weights, lay, sized.kv, sized.platform)
    return notes


def _pooled_kv(
    arithmetic: PooledKvArithmetic,
    dims: ModelDims,
    hardware: HardwareProfile,
    gpu_w: GpuWeights,
    lay: ParallelLayout,
    opts: KvOptions,
    *,
    kv_cache_memory_bytes: int | None,
    gpu_memory_utilization: float | None,
    overhead_bytes: int | None,
) -> tuple[KvPoolPlan, MemoryPlan, int]:
    """The memory budget, the engine's KV pool and the largest context at concurrency 1."""
    mem = plan_memory(
        hardware,
        weights_bytes=gpu_w.per_gpu,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        overhead_bytes=overhead_bytes,
        stage_weights_bytes=gpu_w.per_stage,
        gpus=lay.world_size,
    )
    stage_mem = mem.stage_kv_pool_bytes
    kv = arithmetic.pool(dims, mem.kv_pool_bytes, opts, stage_memory_bytes=stage_mem)
    longest = arithmetic.largest_context(
        dims,
        mem.kv_pool_bytes,
        opts,
        limit=dims.max_position_embeddings,
        stage_memory_bytes=stage_mem,
    )
    return kv, mem, longest


def _check_layout(dims: ModelDims, layout: ParallelLayout) -> None:
    """The layout's checks against the model, as one-line errors: heads split over tensor
    ranks, layers over pipeline stages (as vLLM checks them at start-up)."""
    tp = layout.tensor
    if dims.num_attention_heads % tp:
        raise UsageError(
            f"tensor parallel size {tp} does not divide the model's "
            f"{dims.num_attention_heads} attention heads"
        )
    kvh = dims.num_kv_heads
    if kvh and kvh % tp and tp % kvh:
        raise UsageError(
            f"tensor parallel size {tp} and the model's {kvh} KV heads: one must divide "
            "the other"
        )
    if layout.pipeline > dims.num_layers:
        raise UsageError(
            f"pipeline parallel size {layout.pipeline} exceeds the model's "
            f"{dims.num_layers} layers"
        )
