"""What an endpoint is, before a benchmark sends it a single measured request.

:func:`diagnose` asks ``GET /v1/models`` once, with short timeouts, and names what answered:

================  ==============================================================
``ok``            an OpenAI-compatible server; ``models`` lists what it serves
``refused``       nothing listens there (connection refused, no such host)
``hung``          it accepts connections but sends no byte within the timeout
``not_http``      something answers, but not in HTTP
``auth``          HTTP 401/403: a key is missing or wrong
``server_error``  HTTP 5xx
``not_openai``    HTTP, but no OpenAI API there (an HTML page, 404, other JSON)
================  ==============================================================

:func:`require_openai` turns every verdict but ``ok`` into one :class:`BenchError` line. With
a model name given, a server without ``/v1/models`` (404) is accepted: the name is the user's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import httpx

from servelab.errors import BenchError

Verdict = Literal["ok", "refused", "hung", "not_http", "auth", "server_error", "not_openai"]
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 15.0
"""A server that holds ``/v1/models`` this long without a byte is called hung."""


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What :func:`diagnose` found at ``url``."""

    url: str
    verdict: Verdict
    detail: str
    status: int | None = None
    models: tuple[str, ...] = ()
    owned_by: str | None = None
    """The first model's ``owned_by``: the serving engine (``vllm``, ``llamacpp``, ...)."""

    @property
    def message(self) -> str:
        """One line for the user: the URL, what it is, and what to do."""
        return f"{self.url}: {self.detail}"


def _is_html(r: httpx.Response) -> bool:
    ctype = r.headers.get("content-type", "")
    head = r.content[:200].lstrip().lower()
    return "html" in ctype or head.startswith((b"<!doctype html", b"<html"))


def diagnose(base_url: str, *, api_key: str | None = None,
             connect_s: float = CONNECT_TIMEOUT_S, read_s: float = READ_TIMEOUT_S) -> Diagnosis:
    """Ask ``base_url``'s ``/v1/models`` once and say what the endpoint is."""
    url = base_url.rstrip("/") + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx.Timeout(read_s, connect=connect_s)
    try:
        r = httpx.get(url, timeout=timeout, headers=headers)
    except httpx.ConnectTimeout:
        return Diagnosis(url, "refused", f"no connection within {connect_s:g} s (nothing "
                         "answers at this address; is the server up, the port right?)")
    except httpx.ConnectError as exc:
        why = "connection refused" if "refused" in str(exc).lower() else str(exc)
        return Diagnosis(url, "refused", f"cannot connect: {why} (is the server up, the "
                         "port right?)")
    except (httpx.ReadTimeout, httpx.PoolTimeout, httpx.WriteTimeout):
        return Diagnosis(url, "hung", f"the server accepted the connection but sent nothing "
                         f"within {read_s:g} s (hung or overloaded)")
    except (httpx.RemoteProtocolError, httpx.DecodingError, httpx.ReadError) as exc:
        return Diagnosis(url, "not_http", f"does not speak HTTP ({type(exc).__name__}: {exc}); "
                         "is this the server's HTTP port?")
    except httpx.HTTPError as exc:
        return Diagnosis(url, "not_http", f"{type(exc).__name__}: {exc}")
    st = r.status_code
    if st in (401, 403):
        return Diagnosis(url, "auth", f"HTTP {st}: the server wants an API key "
                         f"({'the one given was refused' if api_key else 'pass --api-key'})",
                         st)
    if st >= 500:
        return Diagnosis(url, "server_error", f"HTTP {st} from the server: it is up but "
                         f"failing ({r.text[:120].strip() or 'no body'})", st)
    if _is_html(r):
        return Diagnosis(url, "not_openai", f"HTTP {st} with an HTML page: a web server, not "
                         "an OpenAI-compatible API (wrong port or path?)", st)
    if st == 404:
        return Diagnosis(url, "not_openai", "HTTP 404: no /v1/models here, not an "
                         "OpenAI-compatible API (wrong port or path?)", st)
    if st >= 400:
        return Diagnosis(url, "not_openai", f"HTTP {st}: {r.text[:120].strip()}", st)
    try:
        data = r.json()["data"]
        models = tuple(str(m["id"]) for m in data)
        owner = data[0].get("owned_by") if data and isinstance(data[0], dict) else None
    except (ValueError, KeyError, TypeError) as exc:
        return Diagnosis(url, "not_openai", f"HTTP {st} but not an OpenAI model list "
                         f"({type(exc).__name__}); not an OpenAI-compatible API", st)
    return Diagnosis(url, "ok", f"OpenAI-compatible, serving {', '.join(models) or 'nothing'}",
                     st, models, str(owner) if isinstance(owner, str) and owner else None)


def engine_identity(base_url: str, *, api_key: str | None = None) -> tuple[str | None,
                                                                             str | None]:
    """``(engine name, version)`` as the server states them, for recording a run servelab
    did not start: the name from ``/v1/models``' ``owned_by``, vLLM's version from
    ``/version``; ``None`` for what the server does not say (never guessed)."""
    d = diagnose(base_url, api_key=api_key)
    if d.verdict != "ok" or d.owned_by is None:
        return None, None
    version = None
    if d.owned_by == "vllm":
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            r = httpx.get(base_url.rstrip("/") + "/version", headers=headers,
                          timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
            v = r.json().get("version") if r.status_code == 200 else None
            version = str(v) if isinstance(v, str) and v else None
        except (httpx.HTTPError, ValueError, AttributeError):
            version = None
    return d.owned_by, version


def require_openai(base_url: str, *, model: str | None, api_key: str | None = None) -> str:
    """The model to benchmark at ``base_url``: ``model``, else the first listed one.

    BenchError (one line: what the endpoint is) unless it is an OpenAI-compatible server;
    with ``model`` given, a server without ``/v1/models`` (HTTP 404) is accepted.
    """
    d = diagnose(base_url, api_key=api_key)
    if d.verdict == "ok":
        if model is not None:
            return model
        if not d.models:
            raise BenchError(f"{d.url}: the server lists no model; pass --model")
        return d.models[0]
    if model is not None and d.verdict == "not_openai" and d.status == 404 \
            and "HTML" not in d.detail:
        return model
    raise BenchError(d.message)


__all__ = ["Diagnosis", "Verdict", "diagnose", "engine_identity", "require_openai"]
