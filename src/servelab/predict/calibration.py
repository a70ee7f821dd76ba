"""The speed model's fits for one target from samples: stored runs' (handed over as values by
:mod:`servelab.evidence.runs`) over the shipped priors, each held out at its hardware
profile's ceilings. Pure but for looking built-in profiles up by name.

* :func:`calibration_for`: decode and prefill fits (:class:`~servelab.predict.levels.
  Calibration`) of a build on a hardware profile;
* :func:`draft_for`: the draft term of a speculative method;
* :func:`reference_of`: the held-out half-widths over the priors and stored samples;
* :func:`profile_roofline` / :func:`profile_lower`: a sample's ceilings by its profile name.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from servelab.errors import ServelabError
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import BUILTIN, HardwareProfile, KernelPath
from servelab.predict.form import Sample
from servelab.predict.holdout import Reference
from servelab.predict.levels import Calibration, Target, calibrate
from servelab.predict.priors import PriorTable, engine_label, load_priors
from servelab.predict.roofline import ByKind, lower_bounds, roofline_coefficients
from servelab.predict.spec import draft_fit_for
from servelab.predict.specstep import DraftFit
from servelab.sizing.weights import Weights

__all__ = ["Ceilings", "calibration_for", "draft_for", "profile_ceilings", "profile_lower",
           "profile_roofline", "reference_of"]


def calibration_for(
    samples: Sequence[Sample],
    hardware: HardwareProfile,
    weights: Weights,
    *,
    engine: str = "vllm",
    model: str = "",
    family: str = "",
    priors: PriorTable | None = None,
    path: KernelPath | None = None,
) -> Calibration:
    """The speed model's fits for ``weights`` on ``hardware``: from the stored ``samples`` on
    that hardware (the evidence of stored runs, :mod:`servelab.evidence.runs`) over the priors
    ``priors`` (default: the shipped table; they carry the
    prediction when no run is stored),
    else the roofline alone (see :mod:`servelab.predict`). Samples of build
    ``model`` are left out of the fit; ``family`` (the model's, :mod:`servelab.families`)
    tells whether the calibration set has seen it (:func:`~servelab.predict.levels.
    fit_levels`: an unseen family's interval is the one measured leaving a family out).
    ``path``: the kernel path ``weights`` take on ``hardware``, when the caller has worked it
    out already."""
    everything = list(samples)
    stored = [s for s in everything if s.hardware == hardware.name]
    table = priors or load_priors()
    path = path or hardware.kernel_path(weights.scheme, moe=weights.moe)
    target = Target(engine=engine, kernel_path=path.key, hardware=hardware.name, model=model,
                    family=family)
    roof = roofline_coefficients(hardware, path.compute)
    low = lower_bounds(hardware, path.compute)
    label = engine_label(engine)
    cal = calibrate(target, stored, table.samples, lambda kind: roof[kind], lambda k: low[k],
                    reference=reference_of(everything, table, hardware),
                    missing=lambda k: f"no stored {label} {k} run or "
                                      f"{table.lacks(k, engine, hardware.name)}")
    if any(s.hardware == hardware.name and s.engine == engine for s in table.samples):
        note = table.label()
        return Calibration(cal.target, cal.decode, cal.prefill, (*cal.notes, note))
    return cal


def draft_for(
    samples: Sequence[Sample],
    hardware: HardwareProfile,
    weights: Weights,
    method: str,
    *,
    engine: str = "vllm",
    model: str = "",
    priors: PriorTable | None = None,
    path: KernelPath | None = None,
) -> DraftFit | None:
    """The draft term of ``method`` for ``weights`` on ``hardware``
    (:func:`servelab.predict.spec.draft_fit_for`) from the measured steps among ``samples``
    (stored runs' samples, any hardware: another machine's steps are a labelled fallback) and
    the shipped priors; each step's plain part predicted with the ceilings of its own hardware
    profile."""
    table = priors or load_priors()
    profiles = {hardware.name: hardware}
    # other machines' steps by their built-in profiles (never probe this host for them); a
    # machine servelab has no profile of sits out
    for name in {s.hardware for s in table.samples} | {s.hardware for s in samples}:
        if name not in profiles and name in BUILTIN:
            profiles[name] = BUILTIN[name]
    stored = [s for s in samples if s.hardware in profiles]
    pri = [s for s in table.samples if s.hardware in profiles]
    path = path or hardware.kernel_path(weights.scheme, moe=weights.moe)
    target = Target(engine, path.key, hardware.name, model)
    return draft_fit_for(
        target, method, stored, pri,
        lambda s: roofline_coefficients(profiles[s.hardware], s.compute)["decode"],
        lambda s: lower_bounds(profiles[s.hardware], s.compute)["decode"],
    )


Ceilings = ByKind


@functools.cache
def profile_ceilings(hardware: str, compute: str) -> tuple[Ceilings, Ceilings] | None:
    """(roofline coefficients, lower bounds) of a built-in or saved hardware profile and a
    compute precision (None for a profile servelab does not know)."""
    try:
        profile = get_profile(hardware)
    except ServelabError:
        return None
    return roofline_coefficients(profile, compute), lower_bounds(profile, compute)


def _pick(got: tuple[Ceilings, Ceilings] | None, s: Sample, which: int,
          kind: str) -> Sequence[float]:
    """``kind``'s roofline coefficients (``which`` 0) or lower bounds (1) from ``s``'s
    ceilings; a sample whose hardware servelab has no profile of is an error."""
    if got is None:
        raise ServelabError(f"no hardware profile {s.hardware!r} for sample {s.name!r}")
    return got[which][kind]


def profile_roofline(kind: str, s: Sample) -> Sequence[float]:
    """The roofline coefficients of ``kind`` on ``s``'s hardware profile and compute."""
    return _pick(profile_ceilings(s.hardware, s.compute), s, 0, kind)


def profile_lower(kind: str, s: Sample) -> Sequence[float]:
    """The lower bounds of ``kind``'s fit on ``s``'s hardware profile and compute."""
    return _pick(profile_ceilings(s.hardware, s.compute), s, 1, kind)


def reference_of(
    stored: Sequence[Sample], table: PriorTable, hardware: HardwareProfile | None = None
) -> Reference:
    """The held-out half-widths (:class:`~servelab.predict.holdout.Reference`) over the
    shipped priors and the stored samples they do not restate, on the hardware profiles
    servelab knows (each at its profile's roofline). ``hardware``: the profile a prediction
    is made for; its own samples are held out at its ceilings, the ones the prediction's
    fit uses (a ``--probe`` file's, or this process's one probe of ``host``), never at
    those of another lookup of the same name."""
    shipped = {(s.build.model, s.hardware, s.kind, s.length, s.eager) for s in table.samples}
    extra = [s for s in stored
             if (s.build.model, s.hardware, s.kind, s.length, s.eager) not in shipped]
    own: dict[str, tuple[Ceilings, Ceilings]] = {}

    def ceilings(s: Sample) -> tuple[Ceilings, Ceilings] | None:
        if hardware is None or s.hardware != hardware.name:
            return profile_ceilings(s.hardware, s.compute)
        if s.compute not in own:
            own[s.compute] = (roofline_coefficients(hardware, s.compute),
                              lower_bounds(hardware, s.compute))
        return own[s.compute]

    known = [s for s in (*table.samples, *extra) if ceilings(s) is not None]
    return Reference(known, lambda kind, s: _pick(ceilings(s), s, 0, kind),
                     lower=lambda kind, s: _pick(ceilings(s), s, 1, kind))
