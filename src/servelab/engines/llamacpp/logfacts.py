"""Facts read off a ``llama-server`` log (llama.cpp's own lines, no guessing).

servelab starts the server with ``-lv 4`` so that it prints its model and context lines;
each line carries llama.cpp's prefix ``M.SS.mmm.uuu L`` (time since start, level
``I``/``W``/``E``/``D``). Filled into the shared :class:`~servelab.engines.facts.EngineFacts`:

* ``version``: ``build 1 (abc123) with GNU 12.2.0`` → ``b1-abc123`` (llama.cpp's own
  ``system_fingerprint`` form; ``--version`` output gives the same);
* ``architecture``, ``model``: ``print_info: arch = llama``, ``loading model '...'``;
* ``checkpoint_gib``: ``print_info: file size = 0.21 MiB (8.54 BPW)``;
* ``weights_gib``: the sum of the ``... model buffer size = X MiB`` lines (all devices);
* ``offloaded_layers`` / ``offload_total_layers``: ``offloaded 29/29 layers to GPU``;
* ``threads``: ``system_info: n_threads = 2 (n_threads_batch = 2) / 2 | ...``, and the CPU
  features of that line it reports as 1 (``CPU : AVX2 = 1 | ... | REPACK = 1``) as
  ``cpu_paths``;
* ``weight_buffers``: the buffer types of the ``... model buffer size`` lines (``CPU``,
  ``CPU_REPACK``, ``AMX``, ``CUDA0``), in the order the log gives them;
* ``kv_pool_tokens``, ``kv_cache_gib``, ``kv_cache_type``: ``llama_kv_cache: size = 1.00
  MiB (2048 cells, 2 layers, 2/2 seqs), K (f16): 0.50 MiB, V (f16): 0.50 MiB`` — cells
  per stream times streams (one stream per slot unless the cache is unified), so the
  tokens the cache holds; the same line gives ``kv_cells``, ``kv_layers``,
  ``kv_streams``, ``kv_k_mib``, ``kv_cache_type_v`` and ``kv_v_mib``;
  ``kv_device``: the device of ``... KV buffer size``; a sliding-window model's second
  cache (after ``creating SWA KV cache``) gives ``kv_swa_cells``, ``kv_swa_layers`` and
  ``kv_swa_mib``;
* ``max_model_len``: ``n_ctx_seq = 2048`` (the context one slot can use),
  ``parallel_slots``: ``n_slots = 2``;
* ``server_url`` and ``startup_s``: the ``listening on http://...`` line and its time;
* ``errors``: lines at level ``E`` and bare ``error: ...`` lines.
"""

from __future__ import annotations

import re

from servelab.engines.base import parse_lines
from servelab.engines.facts import EngineFacts, LogNotice, Phase

__all__ = ["LogParser", "parse_log", "parse_version"]

_NUM = r"([\d.]+)"
_UNITS = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2**10}

_PREFIX = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ([IWEDT]) (.*)$")
_RE_BUILD = re.compile(r"\bbuild (\d+) \(([^)]*)\) with ")
_RE_VERSION = re.compile(r"^version: \S+ \(build (\d+), commit ([^)]*)\)")
_RE_SYSINFO = re.compile(r"system_info: n_threads = (\d+)")
_RE_ARCH = re.compile(r"print_info: arch\s+= (\S+)")
_RE_FILE_SIZE = re.compile(rf"print_info: file size\s+= {_NUM} (B|KiB|MiB|GiB|TiB)")
_RE_LOADING = re.compile(r"loading model '([^']+)'")
_RE_MODEL_BUF = re.compile(rf"(\S+) model buffer size =\s+{_NUM} (B|KiB|MiB|GiB)")
_RE_OFFLOAD = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_RE_KV_BUF = re.compile(r"(\S+) KV buffer size =")
_RE_SWA_CACHE = re.compile(r"llama_kv_cache_iswa: creating\s+SWA KV cache")
_RE_KV = re.compile(
    rf"llama_kv_cache: size =\s+{_NUM} (B|KiB|MiB|GiB)\s+\(\s*(\d+) cells,\s*(\d+) layers,"
    rf"\s*\d+/\s*(\d+) seqs\), K \((\w+)\):\s+{_NUM} MiB, V \((\w+)\):\s+{_NUM} MiB"
)
_RE_N_CTX_SEQ = re.compile(r"llama_context: n_ctx_seq\s+= (\d+)")
_RE_SLOTS = re.compile(r"n_slots = (\d+)")
_RE_LISTEN = re.compile(r"listening on (\S+)")
_RE_BARE_ERROR = re.compile(r"^error: (.+)$")

_PHASES: tuple[tuple[Phase, re.Pattern[str]], ...] = (
    (Phase.LOADING_WEIGHTS, re.compile(r"loading model '")),
    (Phase.KV_ALLOCATION, re.compile(r"llama_context: constructing")),
    (Phase.SERVER_STARTING, re.compile(r"n_slots = |model loaded")),
)


def _gib(value: str, unit: str) -> float:
    return float(value) * _UNITS[unit]


def cpu_paths(system_info: str) -> tuple[str, ...]:
    """The CPU features a ``system_info`` line reports as 1: ``... | CPU : SSE3 = 1 | AVX2 = 1
    | AMX_INT8 = 1 | REPACK = 1 |`` -> ``("SSE3", "AVX2", "AMX_INT8", "REPACK")`` (other
    backends' segments, such as ``CUDA : ARCHS = 900``, are not the CPU's)."""
    out: list[str] = []
    backend = ""
    for part in system_info.split("|"):
        name, eq, value = part.partition("=")
        if " : " in name:  # "CPU : SSE3 " opens a backend's segment
            backend, _, name = name.partition(" : ")
        if eq and backend.strip() == "CPU" and value.strip() == "1":
            out.append(name.strip())
    return tuple(out)


def parse_version(text: str) -> str | None:
    """``"b<build>-<commit>"`` from ``llama-server --version`` output or a log."""
    for line in text.splitlines():
        m = _RE_VERSION.match(line.strip()) or _RE_BUILD.search(line)
        if m:
            return f"b{m.group(1)}-{m.group(2)}"
    return None


class LogParser:
    """Live parser of llama-server output (see the module docstring for the lines)."""

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self._f: dict[str, object] = {}
        self._weights_gib = 0.0
        self._errors: list[LogNotice] = []
        self._swa_next = False  # the next cache line is the SWA cache's
        self._buffers: list[str] = []

    def feed(self, raw_line: str) -> Phase | None:
        """Take one line; return the new phase when startup moved forward."""
        line = raw_line.rstrip("\r\n")
        level, t, msg = "", None, line
        if m := _PREFIX.match(line):
            mins, secs, ms, us = (int(m.group(i)) for i in range(1, 5))
            t = mins * 60 + secs + ms / 1e3 + us / 1e6
            level, msg = m.group(5), m.group(6)
        self._facts_from(msg, level, t)
        for phase, pattern in _PHASES:
            if phase > self.phase and pattern.search(msg):
                self.phase = phase
                return phase
        return None

    def _once(self, key: str, value: object) -> None:
        self._f.setdefault(key, value)

    def _facts_from(self, msg: str, level: str, t: float | None) -> None:
        if level == "E" or (not level and _RE_BARE_ERROR.match(msg)):
            text = msg.removeprefix("error: ").strip()
            self._errors.append(LogNotice("engine-error", text))
            return
        if (m := _RE_BUILD.search(msg)) and "version" not in self._f:
            self._once("version", f"b{m.group(1)}-{m.group(2)}")
        elif m := _RE_SYSINFO.search(msg):
            self._once("threads", int(m.group(1)))
            self._once("cpu_paths", cpu_paths(msg))
        elif m := _RE_ARCH.search(msg):
            self._once("architecture", m.group(1))
        elif m := _RE_FILE_SIZE.search(msg):
            self._once("checkpoint_gib", _gib(m.group(1), m.group(2)))
        elif m := _RE_LOADING.search(msg):
            self._once("model", m.group(1))
        elif m := _RE_MODEL_BUF.search(msg):
            self._weights_gib += _gib(m.group(2), m.group(3))
            if m.group(1) not in self._buffers:
                self._buffers.append(m.group(1))
        elif m := _RE_OFFLOAD.search(msg):
            self._once("offloaded_layers", int(m.group(1)))
            self._once("offload_total_layers", int(m.group(2)))
        elif _RE_SWA_CACHE.search(msg):
            self._swa_next = True
        elif (m := _RE_KV.search(msg)) and self._swa_next:
            self._swa_next = False
            self._once("kv_swa_cells", int(m.group(3)))
            self._once("kv_swa_layers", int(m.group(4)))
            self._once("kv_swa_mib", _gib(m.group(1), m.group(2)) * 1024)
        elif m := _RE_KV.search(msg):
            cells, layers, streams = int(m.group(3)), int(m.group(4)), int(m.group(5))
            self._once("kv_cache_gib", _gib(m.group(1), m.group(2)))
            self._once("kv_pool_tokens", cells * streams)
            self._once("kv_cells", cells)
            self._once("kv_layers", layers)
            self._once("kv_streams", streams)
            self._once("kv_cache_type", m.group(6))
            self._once("kv_k_mib", float(m.group(7)))
            self._once("kv_cache_type_v", m.group(8))
            self._once("kv_v_mib", float(m.group(9)))
        elif m := _RE_KV_BUF.search(msg):
            self._once("kv_device", m.group(1))
        elif m := _RE_N_CTX_SEQ.search(msg):
            self._once("max_model_len", int(m.group(1)))
        elif m := _RE_SLOTS.search(msg):
            self._once("parallel_slots", int(m.group(1)))
        elif m := _RE_LISTEN.search(msg):
            self._once("server_url", m.group(1))
            if t is not None:
                self._once("startup_s", t)

    def facts(self) -> EngineFacts:
        """Everything parsed so far."""
        f = self._f
        return EngineFacts(
            version=_str(f.get("version")),
            model=_str(f.get("model")),
            architecture=_str(f.get("architecture")),
            max_model_len=_int(f.get("max_model_len")),
            checkpoint_gib=_float(f.get("checkpoint_gib")),
            weights_gib=round(self._weights_gib, 12) if self._weights_gib else None,
            kv_device=_str(f.get("kv_device")),
            kv_pool_tokens=_int(f.get("kv_pool_tokens")),
            kv_cache_gib=_float(f.get("kv_cache_gib")),
            kv_cache_type=_str(f.get("kv_cache_type")),
            kv_cache_type_v=_str(f.get("kv_cache_type_v")),
            kv_cells=_int(f.get("kv_cells")),
            kv_streams=_int(f.get("kv_streams")),
            kv_layers=_int(f.get("kv_layers")),
            kv_k_mib=_float(f.get("kv_k_mib")),
            kv_v_mib=_float(f.get("kv_v_mib")),
            kv_swa_cells=_int(f.get("kv_swa_cells")),
            kv_swa_layers=_int(f.get("kv_swa_layers")),
            kv_swa_mib=_float(f.get("kv_swa_mib")),
            threads=_int(f.get("threads")),
            cpu_paths=_strs(f.get("cpu_paths")),
            weight_buffers=tuple(self._buffers),
            offloaded_layers=_int(f.get("offloaded_layers")),
            offload_total_layers=_int(f.get("offload_total_layers")),
            parallel_slots=_int(f.get("parallel_slots")),
            server_url=_str(f.get("server_url")),
            startup_s=_float(f.get("startup_s")),
            errors=tuple(self._errors),
        )


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _strs(v: object) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, tuple) else ()


def _int(v: object) -> int | None:
    return v if isinstance(v, int) else None


def _float(v: object) -> float | None:
    return v if isinstance(v, float) else None


def parse_log(text: str) -> EngineFacts:
    """Parse a whole llama-server log into :class:`EngineFacts`."""
    return parse_lines(LogParser(), text)
