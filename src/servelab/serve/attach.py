"""Attach to a running OpenAI-compatible server: ``/version``, ``/v1/models``, ``/metrics``.

:func:`parse_metrics` (pure) reads Prometheus text; :func:`attach` does the HTTP and
returns :class:`ServerInfo`. Servers other than vLLM may lack ``/version`` or
``/metrics``; those fields are then ``None``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from servelab.errors import RemoteError, UsageError

__all__ = ["MetricSample", "ModelInfo", "ServerInfo", "attach", "parse_metrics"]

_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?\s*$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class MetricSample:
    """One Prometheus sample."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class ModelInfo:
    """One entry of ``/v1/models``."""

    id: str
    max_model_len: int | None = None
    root: str | None = None


@dataclass(frozen=True)
class ServerInfo:
    """What a running server says about itself."""

    url: str
    version: str | None
    models: tuple[ModelInfo, ...]
    metrics: tuple[MetricSample, ...] = field(default=())

    def metric(self, name: str) -> float | None:
        """Sum of all samples called ``name`` (``None`` when absent)."""
        values = [s.value for s in self.metrics if s.name == name]
        return sum(values) if values else None

    def cache_config(self) -> dict[str, str]:
        """Labels of vLLM's ``vllm:cache_config_info`` (block size, blocks, …)."""
        for s in self.metrics:
            if s.name == "vllm:cache_config_info":
                return dict(s.labels)
        return {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; metrics reduced to the engines' headline series."""
        from servelab.engines import ENGINES

        keys = [k for engine in ENGINES.values() for k in engine.headline_metrics]
        return {
            "url": self.url,
            "version": self.version,
            "models": [asdict(m) for m in self.models],
            "metrics": {k: self.metric(k) for k in keys if self.metric(k) is not None},
            "cache_config": self.cache_config(),
        }


def _unescape(v: str) -> str:
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_metrics(text: str) -> tuple[MetricSample, ...]:
    """Parse Prometheus text exposition; comments and malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group("labels") or "")}
        out.append(MetricSample(m.group("name"), labels, value))
    return tuple(out)


def _models(data: Any) -> tuple[ModelInfo, ...]:
    items = data.get("data", []) if isinstance(data, dict) else []
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        mml = item.get("max_model_len")
        root = item.get("root")
        out.append(
            ModelInfo(
                id=item["id"],
                max_model_len=mml if isinstance(mml, int) and not isinstance(mml, bool) else None,
                root=root if isinstance(root, str) else None,
            )
        )
    return tuple(out)


def attach(url: str, *, timeout: float = 10.0, api_key: str | None = None) -> ServerInfo:
    """Read ``/version``, ``/v1/models`` and ``/metrics`` from a running server."""
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    if not re.match(r"^https?://[^/\s]+", base):
        raise UsageError(f"not an http(s) URL: {url!r}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout, trust_env=False, headers=headers) as client:
            models_resp = client.get(f"{base}/v1/models")
            if models_resp.status_code != 200:
                raise RemoteError(f"{base}/v1/models answered HTTP {models_resp.status_code}")
            try:
                models = _models(models_resp.json())
            except ValueError:
                raise RemoteError(f"{base}/v1/models did not return JSON") from None
            version = None
            v = client.get(f"{base}/version")
            if v.status_code == 200:
                try:
                    raw = v.json().get("version")
                    version = raw if isinstance(raw, str) else None
                except (ValueError, AttributeError):
                    version = None
            metrics: tuple[MetricSample, ...] = ()
            mr = client.get(f"{base}/metrics")
            if mr.status_code == 200:
                metrics = parse_metrics(mr.text)
    except httpx.HTTPError as exc:
        raise RemoteError(f"cannot reach {base}: {exc}") from None
    return ServerInfo(url=base, version=version, models=models, metrics=metrics)
