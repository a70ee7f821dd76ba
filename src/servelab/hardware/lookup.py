"""A hardware profile by name: user files, then the built-in profiles, then ``host``.

Above both :mod:`servelab.hardware.profiles` (the profile type, the built-in table, the
TOML reader) and :mod:`servelab.hardware.host` (this machine, measured on the spot),
so neither imports the other's way back.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from servelab.errors import HardwareProfileError
from servelab.hardware.host import host_profile
from servelab.hardware.profiles import (
    BUILTIN,
    HOST,
    HardwareProfile,
    load_profiles_toml,
    profile_names,
)

__all__ = ["get_profile"]


def get_profile(name: str, *, files: Iterable[str | Path] = ()) -> HardwareProfile:
    """A profile by name: user files first (later files win), then built-ins.

    ``host`` is this machine, measured on the spot by a short probe.
    """
    user: dict[str, HardwareProfile] = {}
    for f in files:
        user.update(load_profiles_toml(f))
    if name in user:
        return user[name]
    if name in BUILTIN:
        return BUILTIN[name]
    if name == HOST:
        return host_profile()
    known = ", ".join([*user, *profile_names()])
    raise HardwareProfileError(f"unknown hardware profile {name!r}; known: {known}")
