"""A hardware profile by name: user files, then the built-in profiles, then ``host``.

Above both :mod:`servelab.hardware.profiles` (the profile type, the built-in table, the
TOML reader) and :mod:`servelab.hardware.host` (this machine, measured on the spot),
so neither imports the other's way back.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path

from servelab.errors import HardwareProfileError, ServelabError
from servelab.hardware.host import host_profile, host_profile_of
from servelab.hardware.probe import load_probe
from servelab.hardware.profiles import (
    BUILTIN,
    HardwareProfile,
    load_profiles_toml,
    resolve_profile_name,
)

__all__ = ["HOST_PROBE_VAR", "get_profile", "this_host"]

#: A probe file (``servelab hardware probe -o FILE``) this machine is planned at instead of a
#: live quick probe, by every command in the process, calibration reports included.
HOST_PROBE_VAR = "SERVELAB_HOST_PROBE"


def get_profile(name: str, *, files: Iterable[str | Path] = ()) -> HardwareProfile:
    """A profile by name or alias, case aside: user files first (later files win), then
    built-ins (:func:`~servelab.hardware.profiles.resolve_profile_name`).

    ``host`` is this machine, measured by a short probe the first time it is asked for in
    a process (:func:`this_host`).
    """
    user: dict[str, HardwareProfile] = {}
    for f in files:
        user.update(load_profiles_toml(f))
    name = resolve_profile_name(name, user)  # an alias or another case: the profile's name
    if name in user:
        return user[name]
    if name in BUILTIN:
        return BUILTIN[name]
    return this_host()


def this_host() -> HardwareProfile:
    """This machine's profile, probed once per process: every use in one plan (the target's
    roofline, the ceilings its calibration rows are fitted and held out against) sees the
    same bandwidth and compute. Quick probes on a busy 2-core machine read 15-20 GB/s
    from one run to the next (benchmarks/cpu/results/runs-llamacpp-cpu*.json), and a plan
    that mixed two of them printed another interval, and on CI another basis, than the
    same plan a moment later (2026-12-05).

    With ``$SERVELAB_HOST_PROBE`` naming a probe file, this machine is taken at that file's
    figures instead, in every command (``plan --probe`` does it for one plan; a calibration
    report has no such flag): what servelab says of the host then does not move with how
    busy the machine is."""
    return _host_at(os.environ.get(HOST_PROBE_VAR) or None)


@functools.cache
def _host_at(probe_file: str | None) -> HardwareProfile:
    if probe_file is None:
        return host_profile()
    path = Path(probe_file)
    try:
        probe = load_probe(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ServelabError) as exc:
        raise HardwareProfileError(f"${HOST_PROBE_VAR}: not a readable probe file ({exc})",
                                   path=path) from None
    return host_profile_of(probe, f"probe file {path.name} (${HOST_PROBE_VAR})")
