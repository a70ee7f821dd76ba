"""Facts read off a ``llama-server`` log (llama.cpp's own lines, no guessing).

Filled into the shared :class:`~servelab.engine.facts.EngineFacts`:

* ``version``: ``build: 7 (abc123) with cc ...`` (or ``version: ...`` of ``--version``);
* ``architecture``, ``model``: ``print_info: arch = llama``, ``loading model '...'``;
* ``checkpoint_gib``: ``print_info: file size = 213.75 KiB (8.54 BPW)``;
* ``weights_gib``: the sum of the ``... model buffer size = X MiB`` lines (all devices);
* ``offloaded_layers`` / ``offload_total_layers``: ``offloaded 29/29 layers to GPU``;
* ``threads``: ``system_info: n_threads = 2 (n_threads_batch = 2) / 2 | ...``;
* ``kv_pool_tokens``, ``kv_cache_gib``, ``kv_cache_type``: ``llama_kv_cache: size = 32.00
  MiB (4096 cells, 2 layers, 1/1 seqs), K (f16): 16.00 MiB, V (f16): 16.00 MiB``
  (llama.cpp's KV cells are tokens);
* ``max_model_len``: ``n_ctx_seq`` / ``n_ctx_per_seq`` (the context one slot can use),
  ``parallel_slots``: ``n_slots = 4``; ``kv_device``: the device of the KV buffer;
* ``server_url``: ``server is listening on http://...``; errors: ``error ...`` lines.
"""

from __future__ import annotations

import re

from servelab.engine.facts import EngineFacts, LogNotice, Phase
from servelab.engines.base import parse_lines

__all__ = ["LogParser", "parse_log", "parse_version"]

_NUM = r"([\d.]+)"
_UNITS = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2**10}

_RE_BUILD = re.compile(r"^(?:build|version): (\S+ \([^)]*\))")
_RE_SYSINFO = re.compile(r"system_info: n_threads = (\d+)")
_RE_ARCH = re.compile(r"print_info: arch\s+= (\S+)")
_RE_FILE_SIZE = re.compile(rf"print_info: file size\s+= {_NUM} (B|KiB|MiB|GiB|TiB)")
_RE_LOADING = re.compile(r"loading model '([^']+)'")
_RE_MODEL_BUF = re.compile(rf"(\S+) model buffer size =\s+{_NUM} (B|KiB|MiB|GiB)")
_RE_OFFLOAD = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_RE_KV_BUF = re.compile(r"(\S+) KV buffer size =")
_RE_KV = re.compile(
    rf"llama_kv_cache(?:_unified)?: size =\s+{_NUM} (B|KiB|MiB|GiB)\s+\(\s*(\d+) cells,"
    rf".*K \((\w+)\)"
)
_RE_N_CTX_SEQ = re.compile(r"n_ctx_(?:seq|per_seq)\s+= (\d+)")
_RE_SLOTS = re.compile(r"n_slots = (\d+)")
_RE_LISTEN = re.compile(r"server is listening on (\S+)")
_RE_ERROR = re.compile(r"(?:^|: )(?:error|failed)\b[: ]\s*(.+)$", re.IGNORECASE)

_PHASES: tuple[tuple[Phase, re.Pattern[str]], ...] = (
    (Phase.LOADING_WEIGHTS, re.compile(r"llama_model_loader:|loading model '")),
    (Phase.KV_ALLOCATION, re.compile(r"llama_context:|llama_kv_cache")),
    (Phase.SERVER_STARTING, re.compile(r"initializing slots|main: model loaded")),
)


def _gib(value: str, unit: str) -> float:
    return float(value) * _UNITS[unit]


def parse_version(text: str) -> str | None:
    """``"<build> (<commit>)"`` from ``llama-server --version`` output or a log."""
    for line in text.splitlines():
        m = _RE_BUILD.match(line.strip())
        if m:
            return m.group(1)
    return None


class LogParser:
    """Live parser of llama-server output (see the module docstring for the lines)."""

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self._f: dict[str, object] = {}
        self._weights_gib = 0.0
        self._errors: list[LogNotice] = []

    def feed(self, raw_line: str) -> Phase | None:
        """Take one line; return the new phase when startup moved forward."""
        line = raw_line.rstrip("\r\n")
        self._facts_from(line)
        for phase, pattern in _PHASES:
            if phase > self.phase and pattern.search(line):
                self.phase = phase
                return phase
        return None

    def _once(self, key: str, value: object) -> None:
        self._f.setdefault(key, value)

    def _facts_from(self, line: str) -> None:
        stripped = line.strip()
        if m := _RE_BUILD.match(stripped):
            self._once("version", m.group(1))
        elif m := _RE_SYSINFO.search(line):
            self._once("threads", int(m.group(1)))
        elif m := _RE_ARCH.search(line):
            self._once("architecture", m.group(1))
        elif m := _RE_FILE_SIZE.search(line):
            self._once("checkpoint_gib", _gib(m.group(1), m.group(2)))
        elif m := _RE_LOADING.search(line):
            self._once("model", m.group(1))
        elif m := _RE_MODEL_BUF.search(line):
            self._weights_gib += _gib(m.group(2), m.group(3))
        elif m := _RE_OFFLOAD.search(line):
            self._once("offloaded_layers", int(m.group(1)))
            self._once("offload_total_layers", int(m.group(2)))
        elif m := _RE_KV.search(line):
            self._once("kv_cache_gib", _gib(m.group(1), m.group(2)))
            self._once("kv_pool_tokens", int(m.group(3)))
            self._once("kv_cache_type", m.group(4))
        elif m := _RE_KV_BUF.search(line):
            self._once("kv_device", m.group(1))
        elif m := _RE_N_CTX_SEQ.search(line):
            self._once("max_model_len", int(m.group(1)))
        elif m := _RE_SLOTS.search(line):
            self._once("parallel_slots", int(m.group(1)))
        elif m := _RE_LISTEN.search(line):
            self._once("server_url", m.group(1))
        elif (m := _RE_ERROR.search(stripped)) and "error_" not in stripped:
            self._errors.append(LogNotice("engine-error", m.group(1).strip()))

    def facts(self) -> EngineFacts:
        """Everything parsed so far."""
        f = self._f
        return EngineFacts(
            version=_str(f.get("version")),
            model=_str(f.get("model")),
            architecture=_str(f.get("architecture")),
            max_model_len=_int(f.get("max_model_len")),
            checkpoint_gib=_float(f.get("checkpoint_gib")),
            weights_gib=round(self._weights_gib, 6) if self._weights_gib else None,
            kv_device=_str(f.get("kv_device")),
            kv_pool_tokens=_int(f.get("kv_pool_tokens")),
            kv_cache_gib=_float(f.get("kv_cache_gib")),
            kv_cache_type=_str(f.get("kv_cache_type")),
            threads=_int(f.get("threads")),
            offloaded_layers=_int(f.get("offloaded_layers")),
            offload_total_layers=_int(f.get("offload_total_layers")),
            parallel_slots=_int(f.get("parallel_slots")),
            server_url=_str(f.get("server_url")),
            errors=tuple(self._errors),
        )


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) else None


def _float(v: object) -> float | None:
    return v if isinstance(v, float) else None


def parse_log(text: str) -> EngineFacts:
    """Parse a whole llama-server log into :class:`EngineFacts`."""
    return parse_lines(LogParser(), text)
