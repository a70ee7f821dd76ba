"""Which Hub build a location is, said explicitly, never guessed: the key published figures
are matched on (:func:`servelab.published.runs.published_for`).

A build is identified by

* a Hub repo id as given (``hf://`` and ``@revision`` aside);
* a folder in huggingface_hub's cache (``models--ORG--NAME/snapshots/REV``): the cache names
  the repo it downloaded;
* a build manifest, :data:`MANIFEST` in the folder (or beside a GGUF file), that records the
  repo it is a copy or header replica of: ``{"schema": "servelab.build/1", "repo_id":
  "ORG/NAME", "revision": ...}``. ``servelab synth replica --source-repo`` writes one; a
  team may write one beside any local copy.

Nothing else identifies a folder: its own name is whatever someone called it, a config's
``_name_or_path`` is the path the weights were loaded from before the export was saved
(often the base model), a model card's ``base_model`` names the parent, and two builds of
one model have the same shapes. Reads one small JSON file at most.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.errors import InputError
from servelab.published.runs import PublishedRun, published_for

MANIFEST = "servelab-build.json"
MANIFEST_SCHEMA = "servelab.build/1"
#: :attr:`BuildIdentity.how` of a repo id given as such (not a local folder).
GIVEN = "the repo id given"


@dataclass(frozen=True)
class BuildIdentity:
    """A build's Hub repo id and what said so."""

    repo_id: str
    how: str
    """``the repo id given``, ``huggingface_hub's cache folder``, ``its servelab-build.json``."""

    @property
    def words(self) -> str:
        """``unsloth/X (from its servelab-build.json)``."""
        return f"{self.repo_id} (from {self.how})"


def is_repo_id(text: str) -> bool:
    """``ORG/NAME``: one slash, both parts non-empty."""
    org, _, name = text.partition("/")
    return bool(org and name and "/" not in name and " " not in text)


def manifest_doc(repo_id: str, revision: str | None = None) -> dict[str, Any]:
    """The manifest a copy or replica of ``repo_id`` carries (:data:`MANIFEST`)."""
    if not is_repo_id(repo_id):
        raise InputError(f"{repo_id!r} is not a Hub repo id (ORG/NAME)")
    doc: dict[str, Any] = {"schema": MANIFEST_SCHEMA, "repo_id": repo_id}
    if revision:
        doc["revision"] = revision
    return doc


def _from_manifest(path: Path) -> BuildIdentity | None:
    """The repo a manifest beside ``path`` records; a manifest that cannot be read is an
    error naming the file (it was written to be read)."""
    folder = path if path.is_dir() else path.parent
    file = folder / MANIFEST
    if not file.is_file():
        return None
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the build manifest: {exc}", path=file) from exc
    rid = doc.get("repo_id") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA or not (
            isinstance(rid, str) and is_repo_id(rid)):
        raise InputError(f"not a build manifest: want schema {MANIFEST_SCHEMA!r} and a "
                         "repo_id ORG/NAME", path=file)
    return BuildIdentity(rid, f"its {MANIFEST}")


def identify(location: str) -> BuildIdentity | None:
    """The Hub build at ``location``, when something explicit says which (module docs)."""
    path = Path(location)
    if not path.exists():
        rid = location.removeprefix("hf://").split("@", 1)[0].strip("/")
        return BuildIdentity(rid, GIVEN) if is_repo_id(rid) else None
    for part in reversed(path.absolute().parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return BuildIdentity(part.removeprefix("models--").replace("--", "/", 1),
                                 "huggingface_hub's cache folder")
    return _from_manifest(path)


def published_at(location: str, hardware: str
                 ) -> tuple[BuildIdentity | None, tuple[PublishedRun, ...]]:
    """The build at ``location`` (:func:`identify`) and what was published for it on
    ``hardware`` (:func:`~servelab.published.runs.published_for`, newest first)."""
    ident = identify(location)
    return ident, (published_for(ident.repo_id, hardware) if ident else ())
