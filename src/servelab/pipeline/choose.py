"""``servelab choose``: read each build's headers, plan it, look up what the store measured,
and rank (:func:`servelab.choose.rank.choose`).

A build is a Hub repo id, a local checkpoint directory or a GGUF file; a base model's repo
id with ``discover=True`` brings its model tree (:func:`servelab.choose.tree.model_tree`).
Each is planned through :func:`servelab.pipeline.planning.plan_source` (the public planning
function ``servelab plan`` uses), so later changes to the prediction flow in: vLLM's KV
pool at ``max_model_len = context``, llama.cpp's cache at ``-c context -np 1`` for a GGUF
file. A build the user named that cannot be read is an error (one line, like inspect); a
build that is read but cannot be planned (a KV layout the engine's arithmetic refuses, a
discovered repo that cannot be read) is a row saying why.

Measured numbers replace predictions where the store holds a successful run of the very
checkpoint (same header hash) on the same hardware: single-stream decode and prefill at the
prompt length, the newest run's mean over its requests with a 95 % interval (an interval
reaching zero is not a measurement and is skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from servelab.analysis.metrics import METRICS
from servelab.analysis.stats import mean_ci
from servelab.checkpoint.sources import gguf_file, load_checkpoint
from servelab.choose.rank import Candidate, Choice, Measurement, SloTarget, choose
from servelab.choose.tree import TreeChild, model_tree
from servelab.engines import DEFAULT_ENGINE
from servelab.errors import ServelabError, UsageError
from servelab.evidence.stored import store_exists, stored_runs
from servelab.hardware.profiles import HardwareProfile
from servelab.pipeline.planning import plan_source
from servelab.plan.build import Plan
from servelab.plan.request import PlanRequest, Speculation, StoreChoice
from servelab.points import PointKey
from servelab.predict.pairs import OrderError, all_pairs, order_error
from servelab.published.identity import identify, published_at
from servelab.published.runs import PublishedRun
from servelab.sizing.specsource import AUTO, DEFAULT_METHOD
from servelab.store.db import Store
from servelab.store.model import STATUS_OK, RunFilter, RunRecord

__all__ = ["ChooseRequest", "choose_builds", "measured_at", "order_error_for", "recipe_choices"]


@dataclass(frozen=True)
class ChooseRequest:
    """What to choose among and for what."""

    builds: tuple[str, ...]
    hardware: HardwareProfile
    context_len: int
    prompt_len: int = 2048
    slo: tuple[SloTarget, ...] = ()
    discover: bool = False
    endpoint: str | None = None
    store: StoreChoice = field(default_factory=StoreChoice)
    speculation: Speculation = field(default_factory=Speculation)
    published: bool = True
    """Show the shipped published figures for each build (``--no-published``: none)."""


def measured_at(run: RunRecord, metric: str, prompt_len: int) -> Measurement | None:
    """``decode_tok_s`` / ``prefill_tok_s`` of ``run`` single stream at ``prompt_len``: the
    mean of its requests with a 95 % interval; None when absent or when the interval reaches
    zero (not a measurement)."""
    for point in run.points:
        samples = run.samples_at(point)
        key = PointKey.parse(point, (s.prompt_tokens for s in samples))
        if (key is None or key.prompt_tokens != prompt_len or key.concurrency not in (1, None)
                or key.depth or key.open_loop):
            continue
        values = METRICS[metric].sample_values(run, point)
        if not values:
            continue
        mean, low, high = mean_ci(values)
        if len(values) > 1 and low <= 0:
            return None
        return Measurement(mean, low if len(values) > 1 else None,
                           high if len(values) > 1 else None, run.run_id or "unrecorded",
                           len(values))
    return None


def _measured(runs: Sequence[RunRecord], header_hash: str, hardware: str, metric: str,
              prompt_len: int) -> Measurement | None:
    mine = sorted((r for r in runs if r.checkpoint_header_hash == header_hash
                   and r.hardware == hardware and r.status == STATUS_OK),
                  key=lambda r: r.started_at, reverse=True)
    for run in mine:
        if (m := measured_at(run, metric, prompt_len)) is not None:
            return m
    return None


def _runs_with_samples(db: str | None, hardware: str) -> list[RunRecord]:
    """Successful runs on ``hardware`` with their samples (none without a database)."""
    from servelab.store.db import open_store

    if not store_exists(db):
        return []
    with open_store(db) as store:
        return store.list_runs(RunFilter(hardware=hardware, status=STATUS_OK), samples=True)


def _name(location: str) -> str:
    """A short display name: a repo id as is, a folder of huggingface_hub's cache by its repo
    id, another path by its last part."""
    path = Path(location)
    if not path.exists():
        return location
    return repo_id_of(location) or path.name


CHOOSE_DRAFT_TOKENS = 3
"""The draft length ``choose`` predicts a build's own MTP head at when no ``--draft-tokens``
is given: the seed recipe serves its MTP head at k=3. The acceptance length is a stored run's
or the published prior's (servelab.published.acceptance), never invented."""


def _drafts_by_default(spec: Speculation, plan: Plan) -> bool:
    """Whether to plan ``plan``'s build again drafting with its own MTP head: it ships a
    usable one and the request set no speculative decoding of its own."""
    return (spec.draft_tokens <= 0 and spec.acceptance == AUTO
            and bool(plan.dims.mtp_layers and plan.weights.mtp_tensors))


def repo_id_of(location: str) -> str | None:
    """The Hub repo id a build is, when something explicit says so
    (:func:`servelab.published.identity.identify`)."""
    ident = identify(location)
    return ident.repo_id if ident else None


def _published(location: str, req: ChooseRequest
               ) -> tuple[tuple[PublishedRun, ...], str | None]:
    """The shipped published figures for the build at ``location`` on the request's
    hardware and the identity they were matched by (none with ``--no-published`` or where
    nothing says which build it is)."""
    if not req.published:
        return (), None
    ident, rows = published_at(location, req.hardware.name)
    return rows, ident.words if ident and rows else None


def _unique(names: Sequence[str], locations: Sequence[str]) -> list[str]:
    """Display names, the full location where two builds share a short name."""
    return [n if names.count(n) == 1 else loc for n, loc in zip(names, locations, strict=True)]


def _candidate(location: str, name: str, req: ChooseRequest, every: Sequence[RunRecord],
               measured: Sequence[RunRecord], *, named: bool) -> Candidate:
    """Read and plan one build; a read error is raised for a build the user ``named``."""
    try:
        source = load_checkpoint(location, endpoint=req.endpoint)
    except ServelabError as exc:
        if named:
            raise
        return Candidate(name, location, None, refused=f"cannot be read: {exc}",
                         published=_published(location, req)[0])
    gguf = gguf_file(Path(location)) is not None  # a GGUF file, or a folder of one
    request = PlanRequest.for_build(
        name, req.hardware, engine="llamacpp" if gguf else DEFAULT_ENGINE,
        context_len=req.context_len, prompt_len=req.prompt_len,
        speculation=req.speculation, store=req.store,
    )
    try:
        plan = plan_source(source, request, every)
        if not gguf and _drafts_by_default(req.speculation, plan):
            plan = plan_source(source, replace(request, speculation=Speculation(
                AUTO, DEFAULT_METHOD, CHOOSE_DRAFT_TOKENS, hint=False)), every)
    except ServelabError as exc:
        return Candidate(name, location, None, refused=str(exc),
                         published=_published(location, req)[0])
    hw = req.hardware.name
    published, identity = _published(location, req)
    return Candidate(
        name, location, plan,
        decode=_measured(measured, source.header_sha256, hw, "decode_tok_s", req.prompt_len),
        prefill=_measured(measured, source.header_sha256, hw, "prefill_tok_s", req.prompt_len),
        published=published, identity=identity,
    )


def resolve_builds(req: ChooseRequest) -> tuple[tuple[str, str | None, bool], ...]:
    """(location, why it cannot be planned or None, named by the user) per build."""
    if not req.builds:
        raise UsageError("name a base model's repo id, or the builds to choose among")
    if not req.discover:
        return tuple((b, None, True) for b in dict.fromkeys(req.builds))
    if len(req.builds) != 1:
        raise UsageError("--discover takes one base model's repo id")
    children: tuple[TreeChild, ...] = model_tree(req.builds[0], endpoint=req.endpoint)
    return tuple((c.repo_id, c.plannable, c.relation == "base") for c in children)


def order_error_for(hardware: str, runs: Sequence[RunRecord], priors: Path | None = None
                    ) -> OrderError | None:
    """How far the order of two decode predictions may be off on ``hardware``: the pairs of
    builds of one family measured side by side in the priors (``priors``: the shipped table
    when None) and ``runs``, the family held out (:mod:`servelab.predict.pairs`)."""
    from servelab.evidence.runs import samples_from_runs
    from servelab.predict.calibration import reference_of
    from servelab.predict.priors import load_priors

    ref = reference_of(samples_from_runs(runs), load_priors(priors))
    return order_error(all_pairs(ref.samples, ref.physical, lower=ref.lower), hardware)


def choose_builds(req: ChooseRequest) -> Choice:
    """Plan every build of ``req`` on its hardware and rank them."""
    if req.context_len < 1 or req.prompt_len < 1:
        raise UsageError("--context and --prompt-len must be at least 1 token")
    builds = resolve_builds(req)
    every = stored_runs(req.store.db, None) if req.store.use else []
    measured = _runs_with_samples(req.store.db, req.hardware.name) if req.store.use else []
    locations = [b[0] for b in builds]
    names = _unique([_name(loc) for loc in locations], locations)
    candidates = [
        Candidate(name, loc, None, refused=why) if why is not None
        else _candidate(loc, name, req, every, measured, named=named)
        for (loc, why, named), name in zip(builds, names, strict=True)
    ]
    return choose(candidates, hardware=req.hardware.name, context_len=req.context_len,
                  prompt_len=req.prompt_len, slo=req.slo,
                  order=order_error_for(req.hardware.name, every, req.store.priors))


# --- the site's answer: every recipe of a model on every hardware servelab knows ----------


def _hardware_profiles(runs: Sequence[RunRecord]) -> list[HardwareProfile]:
    """Every built-in profile, then each hardware the runs were on that is not built in
    (``host``: the profile stored with its newest run)."""
    from servelab.hardware.profiles import BUILTIN, profile_from_dict

    out = list(BUILTIN.values())
    for run in sorted(runs, key=lambda r: r.started_at, reverse=True):
        if run.hardware and run.hardware not in {p.name for p in out} and run.hardware_profile:
            try:
                out.append(profile_from_dict(run.hardware_profile))
            except (KeyError, TypeError, ValueError):
                continue
    return out


def _recipe_plan(run: RunRecord, hardware: HardwareProfile, store: Store) -> Plan:
    """The plan ``servelab run`` would make of ``run``'s recipe on ``hardware`` (headers of
    the checkpoint the run served, read again; the recipe's own engine and flags)."""
    from servelab.checkpoint.report import build_report
    from servelab.pipeline.run import make_run_plan
    from servelab.serve.recipe import parse_recipe

    path = run.checkpoint_path
    if not run.recipe_text or not path or not Path(path).exists():
        raise UsageError("its checkpoint is not on this machine: its headers cannot be read")
    recipe = parse_recipe(run.recipe_text)
    source = load_checkpoint(path)
    return make_run_plan(recipe, build_report(source), dict(source.config or {}), hardware,
                         engine_version=run.engine_version or "", store=store,
                         header_hash=source.header_sha256)


def recipe_choices(store: Store, runs: Sequence[RunRecord], *, prompt_len: int,
                   context_len: int) -> tuple[Choice, ...]:
    """One :class:`Choice` per hardware servelab knows among the recipes of ``runs`` (the
    builds of one model): measured where a recipe's newest successful run on that hardware
    measured decode at ``prompt_len``, predicted from its plan elsewhere. A build whose
    checkpoint is not on this machine is a row saying so."""
    newest: dict[str, RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        if run.status == STATUS_OK:
            newest[run.recipe_name or run.model_id or "unnamed"] = run
    out = []
    for hw in _hardware_profiles(runs):
        candidates = []
        for name, latest in newest.items():
            on_hw = [r for r in runs if (r.recipe_name or r.model_id or "unnamed") == name
                     and r.hardware == hw.name and r.status == STATUS_OK]
            on_hw.sort(key=lambda r: r.started_at, reverse=True)
            decode = next((m for r in on_hw
                           if (m := measured_at(r, "decode_tok_s", prompt_len))), None)
            prefill = next((m for r in on_hw
                            if (m := measured_at(r, "prefill_tok_s", prompt_len))), None)
            try:
                plan = _recipe_plan(on_hw[0] if on_hw else latest, hw, store)
            except ServelabError as exc:
                candidates.append(Candidate(name, name, None, refused=str(exc)))
                continue
            candidates.append(Candidate(name, name, plan, decode=decode, prefill=prefill))
        out.append(choose(candidates, hardware=hw.name, context_len=context_len,
                          prompt_len=prompt_len, order=order_error_for(hw.name, runs)))
    return tuple(out)

