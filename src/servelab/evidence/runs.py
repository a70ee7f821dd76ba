"""Calibration inputs from the results store: past runs become speed-model samples. Pure.

The stored-runs evidence sits above the store and hands the speed model values
(:class:`~servelab.predict.form.Sample`); the fits themselves are
:mod:`servelab.predict.calibration`'s.

A stored run carries its measured single-stream decode/prefill per prompt length (metrics at
its concurrency-1 points, :class:`~servelab.points.PointKey`) and the plan made before it
(read with :func:`~servelab.sizing.document.read_plan`): bytes read per token (weights + KV +
state), prefill FLOPs and bytes, the kernel path, and the checkpoint report (layer count). Together
they give one :class:`~servelab.predict.form.Sample` per point. Where an export redacted
``bytes_per_token`` (older exports did), it is rebuilt from its parts (weight, KV and state
bytes), which every plan stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.analysis.acceptance import run_acceptance, spec_config_of
from servelab.errors import ServelabError
from servelab.families import family_for
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import BUILTIN, HardwareProfile, profile_from_dict
from servelab.points import PointKey
from servelab.predict.calibration import Ceilings, reference_of
from servelab.predict.form import Sample, expert_slots
from servelab.predict.keys import BuildKey
from servelab.predict.ledger import LedgerRow, ledger
from servelab.predict.levels import Calibration, Target, calibrate
from servelab.predict.priors import PriorTable, load_priors
from servelab.predict.roofline import (
    bounds,
    coefficients,
    lower_bounds,
    roofline_coefficients,
)
from servelab.predict.spec import step_predictor
from servelab.sizing.document import PlanDocument, read_plan
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.startup import MaxNumSeqs, StartupOptions, StartupRules
from servelab.store.model import STATUS_OK, RunRecord


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _map(v: object) -> Mapping[str, Any] | None:
    return v if isinstance(v, Mapping) else None


def decode_bytes(point: Mapping[str, Any]) -> float | None:
    """Bytes read per generated token of a plan's decode point (rebuilt if redacted)."""
    total = _num(point.get("bytes_per_token"))
    if total is not None:
        return total
    parts = [_num(point.get(k)) for k in ("weight_bytes", "kv_bytes", "state_bytes")]
    if any(p is None for p in parts):
        return None
    return float(sum(p for p in parts if p is not None))


def _whole(value: Any) -> int | None:
    """``value`` when it is an integer (not a bool) in recorded JSON, else ``None``."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _dim(run: RunRecord, key: str) -> int | None:
    """An integer of the dims the run's plan recorded (``None`` when it did not)."""
    dims = _map((run.prediction or {}).get("dims")) or {}
    return _whole(dims.get(key))


def run_layers(run: RunRecord) -> int | None:
    """Decoder layer count of the run's checkpoint (inspect's report, else the plan)."""
    report = run.checkpoint_report or {}
    layers = report.get("layers") if isinstance(report, Mapping) else None
    if isinstance(layers, Mapping) and isinstance(layers.get("count"), int):
        return int(layers["count"])
    return _dim(run, "num_layers")


def run_experts(run: RunRecord) -> int:
    """Routed experts per MoE layer of the run's checkpoint (the plan's dims, else inspect's
    report; 0 for a dense model or when neither says)."""
    if (planned := _dim(run, "num_experts")) is not None:
        return planned
    report = run.checkpoint_report or {}
    experts = report.get("experts") if isinstance(report, Mapping) else None
    total = experts.get("total") if isinstance(experts, Mapping) else None
    return int(total) if isinstance(total, int) else 0


def run_active_routed_params(run: RunRecord) -> float:
    """Routed-expert parameters one token of the run's checkpoint multiplies by: inspect's
    routed-expert parameters x top-k / E (top-k from the plan's dims, else the report's; E
    from :func:`run_experts`; else the report's rounded routed fraction, which survives where
    an export redacted the experts per token); 0 for a dense model."""
    report = _map(run.checkpoint_report) or {}
    roles = report.get("roles")
    routed = sum(
        float(r.get("params") or 0)
        for r in (roles if isinstance(roles, list) else [])
        if isinstance(r, Mapping) and r.get("role") == "routed_expert"
    )
    experts = _map(report.get("experts")) or {}
    k = _dim(run, "experts_per_token") or _whole(experts.get("per_token"))
    e = run_experts(run)
    if k and e:
        return routed * k / e
    fraction = _num((_map(report.get("decode")) or {}).get("routed_fraction"))
    return routed * fraction if fraction else 0.0


def run_platform(run: RunRecord) -> str:
    """The platform of the hardware the run's plan was made for (``cuda`` if unrecorded)."""
    hw = (run.prediction or {}).get("hardware")
    platform = hw.get("platform") if isinstance(hw, Mapping) else None
    return str(platform) if platform else "cuda"


def run_graph_tokens(run: RunRecord) -> int | None:
    """The largest step (tokens) the run's engine captured a CUDA graph for: what its log said
    (engine facts ``cudagraph_capture_max``), else what a plan makes of the flags it was
    started with (vLLM's ``non_default_args``: its start-up rules' graph capture at its
    ``max_num_seqs``, as ``servelab plan`` does). ``None`` for another engine, or when the
    flags leave ``max_num_seqs`` to the default of a hardware profile servelab does not
    know."""
    facts = _map(run.engine_facts) or {}
    if (logged := _whole(facts.get("cudagraph_capture_max"))) is not None:
        return logged
    if (run.engine_name or "vllm") != "vllm" or not run.hardware:
        return None
    opts = _startup_options(_map(facts.get("non_default_args")) or {})
    platform = run_platform(run)
    rules = vllm_startup_rules()
    if opts.max_num_seqs is not None:
        seqs = MaxNumSeqs(opts.max_num_seqs, "--max-num-seqs")
    else:
        try:
            profile = get_profile(run.hardware)
        except ServelabError:
            return None
        seqs = rules.max_num_seqs(profile, platform, ParallelLayout(), opts)
    spec = spec_config_of(run)
    return rules.graph_capture(
        seqs, platform, opts, spec_tokens=spec.draft_tokens if spec else 0
    ).max_tokens


def vllm_startup_rules() -> StartupRules:
    """vLLM's start-up rules, as its engine hands them over (a stored run's flags are read
    with the rules of the engine that ran it)."""
    from servelab.engines import get_engine

    rules = get_engine("vllm").startup_rules
    assert rules is not None  # vLLM's rules are servelab's own
    return rules


def _startup_options(args: Mapping[str, Any]) -> StartupOptions:
    """The start-up flags a plan reads, from vLLM's logged ``non_default_args``."""
    compilation = _map(args.get("compilation_config")) or {}
    mode, perf = compilation.get("cudagraph_mode"), args.get("performance_mode")
    return StartupOptions(
        max_num_seqs=_whole(args.get("max_num_seqs")),
        max_num_batched_tokens=_whole(args.get("max_num_batched_tokens")),
        enforce_eager=args.get("enforce_eager") is True,
        cudagraph_mode=mode if isinstance(mode, str) else None,
        optimization_level=_whole(args.get("optimization_level")),
        performance_mode=perf if isinstance(perf, str) else None,
    )


def run_name(run: RunRecord) -> str:
    """The name a run gives what it served (model id, else recipe, else run id)."""
    return run.model_id or run.recipe_name or run.run_id or "?"


def checkpoint_names(runs: Sequence[RunRecord]) -> list[str]:
    """One name per checkpoint: runs whose checkpoint headers hash alike served the same
    tensors whatever they called them (an MTP run and a plain run of one checkpoint under two
    served names), so leave-one-model-out must leave them out together. One name per run (in
    order): the shortest (then first in order) among its checkpoint's runs; a run without a
    header hash keeps its own."""
    best: dict[str, str] = {}
    for run in runs:
        if run.checkpoint_header_hash:
            name = run_name(run)
            have = best.get(run.checkpoint_header_hash)
            if have is None or (len(name), name) < (len(have), have):
                best[run.checkpoint_header_hash] = name
    return [best.get(run.checkpoint_header_hash or "", run_name(run)) for run in runs]


def run_family(run: RunRecord) -> str:
    """The model family (:mod:`servelab.families`) of the run's checkpoint, by the
    ``model_type`` its report recorded ("" when it recorded none servelab reads)."""
    config = _map((_map(run.checkpoint_report) or {}).get("model"))
    if config is None:
        return ""
    try:
        return family_for(config).name
    except ServelabError:
        return ""


def build_key(run: RunRecord, weight_bytes: float | None, name: str | None = None) -> BuildKey:
    """The build a run measured, for leave-one-model-out: the model's ``name`` (default the
    run's own, :func:`run_name`) plus weight bytes per token (so a BF16 and an FP32 cast of
    one checkpoint are two builds), with its family."""
    return BuildKey.of(name or run_name(run), weight_bytes, run_family(run))


@dataclass(frozen=True)
class _RunBuild:
    """What every sample of one run shares: build key, engine, kernel path, compute
    precision and platform, read from the run and the plan stored with it."""

    build: BuildKey
    engine: str
    kernel_path: str
    compute: str
    platform: str


def _run_build(run: RunRecord, plan: PlanDocument, name: str | None) -> _RunBuild:
    speed = _speed(plan)
    kernel = _map(speed.get("kernel_path"))
    weight = _num(plan.decode[0].raw.get("weight_bytes")) if plan.decode else None
    return _RunBuild(
        build=build_key(run, weight, name),
        engine=run.engine_name or "vllm",
        # the name the path is calibrated under (a plan records it where it differs)
        kernel_path=str(kernel.get("calibration") or kernel.get("name")) if kernel
        else "unknown",
        compute=str(speed.get("compute_precision") or "bf16"),
        platform=run_platform(run),
    )


def _speed(plan: PlanDocument) -> Mapping[str, Any]:
    return _map(plan.raw.get("speed")) or plan.raw


def samples_from_run(run: RunRecord, name: str | None = None) -> list[Sample]:
    """Decode and prefill samples of one successful run (empty when it lacks inputs), under
    the model ``name`` (default the run's own; see :func:`checkpoint_names`). A run that
    drafted gives :func:`step_samples` instead: its decode speed is tokens per verification
    step x steps per second, not a plain decode measurement."""
    if spec_config_of(run) is not None:
        return step_samples(run, name)
    plan = read_plan(run.prediction)
    layers = run_layers(run)
    if run.status != STATUS_OK or not run.hardware or not layers or not plan.decode:
        return []
    b = _run_build(run, plan, name)
    slots = expert_slots(layers, run_experts(run))
    graph = run_graph_tokens(run)
    linear = _dim(run, "linear_attention_layers") or 0
    linear = linear if 0 <= linear <= layers else 0
    routed = run_active_routed_params(run)
    out: list[Sample] = []
    for point in (*plan.decode, *plan.prefill):
        n = point.tokens
        measured = run.metric(f"{point.kind}_tok_s", PointKey(n, 1).label)
        if measured is None or measured.value <= 0:
            continue
        nbytes: float | None
        flops: float | None
        xflops = 0.0
        if point.kind == "decode":
            nbytes, flops, seconds = decode_bytes(point.raw), 0.0, 1.0 / measured.value
        else:
            nbytes, flops = _num(point.raw.get("bytes_read")), _num(point.raw.get("flops"))
            seconds = n / measured.value
            # recorded by plans since the split; older plans: from the run's own checkpoint
            recorded = _num(point.raw.get("expert_flops"))
            xflops = recorded if recorded is not None else 2.0 * routed * n
        if not nbytes or flops is None or (point.kind == "prefill" and not flops):
            continue
        out.append(
            Sample(b.build, b.engine, b.kernel_path, run.hardware, point.kind, n, layers, nbytes,
                   flops, seconds, f"run {run.run_id}", b.compute, slots, b.platform,
                   eager=point.kind == "prefill" and graph is not None and n > graph,
                   linear_layers=linear, expert_flops=min(xflops, flops))
        )
    return out


def step_samples(run: RunRecord, name: str | None = None) -> list[Sample]:
    """Samples of one speculative step from a drafting run: at each measured single-stream
    decode point, ``t_step = acceptance length / tok/s`` (the run's own measured acceptance),
    with the step's cost from the plan stored with the run (its ``spec_steps``): they
    calibrate the draft term (:mod:`servelab.predict.spec`), not plain decode. A plan that
    predates the step's parts stored MTP steps only (an n-gram run's step there counted
    draft passes it never ran): its n-gram runs give none. Empty without a measured
    acceptance or stored step costs."""
    measured = run_acceptance(run)
    if measured is None or not run.hardware:
        return []
    method = measured.config.method
    plan = read_plan(run.prediction)
    raw_steps = _speed(plan).get("spec_steps")
    k = measured.config.draft_tokens
    steps = {
        int(st["context_len"]): st
        for st in (raw_steps if isinstance(raw_steps, list) else [])
        if isinstance(st, Mapping) and st.get("draft_tokens") == k
        and st.get("method", "mtp") == method
    }
    b = _run_build(run, plan, name)
    build = b.build.stepped(measured.config.label)  # still a build of the same model
    a = measured.acceptance_length
    out: list[Sample] = []
    for n, st in sorted(steps.items()):
        tok_s = run.metric("decode_tok_s", PointKey(n, 1).label)
        nbytes, layers = _num(st.get("step_bytes")), st.get("step_layers")
        passes = st.get("draft_passes", k)
        if tok_s is None or tok_s.value <= 0 or not nbytes or not isinstance(layers, int):
            continue
        out.append(
            Sample(build, b.engine, b.kernel_path, run.hardware, "decode", n, layers,
                   nbytes, 0.0, a / tok_s.value,
                   f"run {run.run_id} (speculative step: {measured.config.label}, "
                   f"measured acceptance {a:.2f})",
                   b.compute, int(st.get("expert_slots") or 0), b.platform,
                   spec_method=method, draft_passes=int(passes) if isinstance(passes, int) else k)
        )
    return out


def samples_from_runs(runs: Iterable[RunRecord]) -> list[Sample]:
    """All samples of ``runs``, runs of one checkpoint under one name."""
    runs = list(runs)
    names = checkpoint_names(runs)
    return [s for run, name in zip(runs, names, strict=True) for s in samples_from_run(run, name)]


def roofline_of_run(run: RunRecord) -> tuple[Ceilings, Ceilings] | None:
    """(roofline coefficients, lower bounds) of the ceilings a run's own plan used: its
    bandwidth and its kernel path's compute rate (``None`` when the plan lacks them)."""
    speed = (run.prediction or {}).get("speed")
    if not isinstance(speed, Mapping):
        return None
    bw = _num(speed.get("bandwidth"))
    if not bw:
        return None
    roof = coefficients(bw, _num(speed.get("compute_rate")))
    hw = (run.prediction or {}).get("hardware")
    return roof, bounds(roof, cpu=isinstance(hw, Mapping) and hw.get("platform") == "cpu")


def ledger_for_runs(
    runs: Iterable[RunRecord], priors: PriorTable | None = None
) -> tuple[LedgerRow, ...]:
    """The leave-one-model-out ledger over ``runs`` (each build predicted as if never run),
    with each run's own ceilings as the roofline. Pure."""
    stored: list[Sample] = []
    ceilings: dict[BuildKey, tuple[Ceilings, Ceilings]] = {}
    runs = list(runs)
    for run, name in zip(runs, checkpoint_names(runs), strict=True):
        got = samples_from_run(run, name)
        bounds = roofline_of_run(run)
        if not got or bounds is None:
            continue
        stored.extend(got)
        for s in got:
            ceilings.setdefault(s.build, bounds)
    table = priors or load_priors()
    # the priors' steps (for the draft term) at their hardware profiles' ceilings
    shipped = [s for s in table.samples if s.build in ceilings or s.hardware in BUILTIN]

    def ceiling(s: Sample, which: int) -> Ceilings:
        if s.build in ceilings:
            return ceilings[s.build][which]
        hw = BUILTIN[s.hardware]
        return (lower_bounds if which else roofline_coefficients)(hw, s.compute)

    return ledger(
        stored,
        table.samples,
        lambda kind, s: ceilings[s.build][0][kind],
        lower=lambda kind, s: ceilings[s.build][1][kind],
        steps=step_predictor(stored, shipped, lambda kind, s: ceiling(s, 0)[kind],
                             lambda kind, s: ceiling(s, 1)[kind]),
        reference=reference_of(stored, table),
    )


def run_profile(run: RunRecord) -> HardwareProfile:
    """The hardware profile the run stored (the built-in one of its name when unreadable)."""
    if isinstance(run.hardware_profile, Mapping):
        try:
            return profile_from_dict(run.hardware_profile)
        except (ServelabError, KeyError, TypeError, ValueError):
            pass
    return get_profile(run.hardware or "")


def held_out_calibration(
    run: RunRecord, runs: Sequence[RunRecord], priors: PriorTable | None = None
) -> Calibration | None:
    """The decode and prefill fits ``run``'s build gets with its model left out of the stored
    ``runs`` (``run`` among them) and of the priors, at the ceilings of the run's own plan:
    what servelab would have predicted for it had it never been run. ``None`` when the run's
    plan lacks what a fit needs (a roofline, a decode point, a hardware)."""
    index = next((i for i, r in enumerate(runs) if r is run), None)
    if index is None:
        raise ServelabError("held_out_calibration: the run is not among the runs given")
    plan = read_plan(run.prediction)
    ceilings = roofline_of_run(run)
    if not plan.decode or not run.hardware or ceilings is None:
        return None
    b = _run_build(run, plan, checkpoint_names(runs)[index])
    everything = samples_from_runs(runs)
    table = priors or load_priors()
    roof, low = ceilings
    target = Target(engine=b.engine, kernel_path=b.kernel_path, hardware=run.hardware,
                    model=b.build.model, family=b.build.family)
    # the run's hardware held out at the profile its plan stored (a host run's own probe),
    # as its fit is, not at this process's probe of the machine reading the store
    return calibrate(target, [s for s in everything if s.hardware == run.hardware],
                     table.samples, lambda k: roof[k], lambda k: low[k],
                     reference=reference_of(everything, table, run_profile(run)))


def run_startup_options(run: RunRecord) -> StartupOptions:
    """The start-up flags a plan reads, from the run's logged ``non_default_args``."""
    return _startup_options(_map((_map(run.engine_facts) or {}).get("non_default_args")) or {})
