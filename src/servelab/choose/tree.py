"""The builds of a base model on the Hub: its model tree, through ``huggingface_hub``.

The Hub tags every repo whose model card names a ``base_model`` with
``base_model:<relation>:<base id>`` (relation ``quantized``, ``finetune``, ``adapter`` or
``merge``); :func:`model_tree` asks ``HfApi(endpoint=...).list_models(filter=tag)`` for
each relation, so the endpoint (``HF_ENDPOINT`` or ``endpoint=``) and the token
(``token=``, else ``HF_TOKEN`` / ``hf auth login``) are huggingface_hub's, as for
``servelab inspect``. A GGUF repo (library ``gguf`` or a ``gguf`` tag) is marked so.

Errors follow inspect's rules: ``HF_HUB_OFFLINE`` set is a :class:`RemoteError` naming it
(discovery needs the Hub; name the builds instead), HTTP 401/403 names the token, any other
failure is one :class:`RemoteError` line naming the endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servelab.errors import RemoteError

RELATIONS = ("quantized", "finetune", "adapter", "merge")
"""The Hub's model-tree relations, in the order builds are listed."""

DEFAULT_LIMIT = 50
"""Children asked for per relation (most downloaded first)."""


@dataclass(frozen=True)
class TreeChild:
    """One repo of a base model's tree."""

    repo_id: str
    relation: str  # base | quantized | finetune | adapter | merge
    gguf: bool
    downloads: int | None = None

    @property
    def plannable(self) -> str | None:
        """Why servelab cannot plan this repo from its headers, or None when it can."""
        if self.relation == "adapter":
            return ("an adapter: it is loaded on top of its base model, not downloaded and "
                    "served as a build of its own")
        if self.gguf:
            return ("a GGUF repo: servelab reads GGUF headers from local files; download one "
                    ".gguf file of it and pass its path")
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"repo_id": self.repo_id, "relation": self.relation, "gguf": self.gguf,
                "downloads": self.downloads}


def _is_gguf(info: Any) -> bool:
    tags = tuple(getattr(info, "tags", None) or ())
    return getattr(info, "library_name", None) == "gguf" or "gguf" in tags


#: Seconds the one reachability request may take before the tree is listed.
PROBE_TIMEOUT_S = 10.0


def _reachable(where: str, base: str) -> None:
    """One request, no retries: the Hub answers, or a RemoteError says why at once.
    huggingface_hub's listing retries a failed connection five times with backoff (about
    25 s offline, and a line per retry), which is right for a blip but not for no network."""
    import httpx2
    from huggingface_hub import get_session

    try:
        get_session().head(where, timeout=PROBE_TIMEOUT_S)
    except (httpx2.HTTPError, OSError) as exc:
        raise RemoteError(
            f"cannot reach {where} ({exc or type(exc).__name__}): finding the builds of a base "
            "model needs the Hub; name the builds instead (repo ids, local directories, GGUF "
            "files)", path=base) from None


def model_tree(
    base: str,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> tuple[TreeChild, ...]:
    """The base model and its children on the Hub, base first, then each relation's
    children by downloads (a repo listed under several relations appears once)."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    where = endpoint or constants.ENDPOINT
    if constants.HF_HUB_OFFLINE:
        raise RemoteError(
            "HF_HUB_OFFLINE is set: finding the builds of a base model needs the Hub; name "
            "the builds instead (repo ids, local directories, GGUF files)", path=base)
    _reachable(where, base)
    api = HfApi(endpoint=endpoint, token=token)
    found: dict[str, TreeChild] = {base: TreeChild(base, "base", False)}
    for relation in RELATIONS:
        try:
            infos = list(api.list_models(filter=f"base_model:{relation}:{base}", sort="downloads",
                                         limit=limit))
        except OfflineModeIsEnabled:
            raise RemoteError("HF_HUB_OFFLINE is set: finding the builds of a base model needs "
                              "the Hub; name the builds instead", path=base) from None
        except HfHubHTTPError as exc:
            code = exc.response.status_code if exc.response is not None else None
            if code in (401, 403):
                raise RemoteError(
                    f"HTTP {code} from {where} listing the model tree: access denied (log in "
                    "with `hf auth login` or set HF_TOKEN)", path=base) from None
            raise RemoteError(f"HTTP {code} from {where} listing the model tree",
                              path=base) from None
        except (httpx2.HTTPError, OSError, ValueError) as exc:  # refused, timeouts, bad JSON
            raise RemoteError(f"listing the model tree at {where} failed: {exc}",
                              path=base) from None
        for info in infos:
            repo = str(info.id)
            if repo not in found:
                found[repo] = TreeChild(repo, relation, _is_gguf(info),
                                        getattr(info, "downloads", None))
    return tuple(found.values())
