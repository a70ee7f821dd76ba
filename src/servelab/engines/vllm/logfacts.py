"""Facts read off a vLLM log: the engine's own word on what it chose and how big things are.

The log is the ground truth servelab checks its plans against, so this module never
guesses: every field is either parsed from a line the engine printed or ``None``.
Unknown lines are ignored.

Two entry points share one implementation:

* :func:`parse_log` takes a whole log text and returns :class:`EngineFacts`;
* :class:`LogParser` is fed line by line (live parsing while the engine starts) and
  reports startup :class:`Phase` changes as they happen.

Formats covered: vLLM 0.32.0 (CPU build, lines seen on this project's machines) and the
GPU-only lines of vLLM 0.2x-0.33 reproduced from its source (``Model loading took``,
``Available KV cache memory``, ``Graph capturing finished``, FP8/NVFP4 MoE backends, the
Marlin weight-only fallback warning).
"""

from __future__ import annotations

import ast
import re
from datetime import datetime
from typing import Any

from servelab.engines.facts import EngineFacts, LogNotice, Phase
from servelab.redact import REDACTED, is_secret_key

__all__ = ["LogParser", "parse_log"]


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "(APIServer pid=2810) INFO 12-02 15:39:55 [api_utils.py:286] message"
_PREFIX = re.compile(
    r"^(?:\((?P<proc>[\w.-]+) pid=\d+(?:, ip=(?P<ip>[\w.:-]+))?\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"\[[^\]]*\]\s?(?P<msg>.*)$"
)
_NUM = r"([\d,]+(?:\.\d+)?)"
_RE_BANNER_VERSION = re.compile(r"\bversion\s+(\d+\.\d+\.\d+\S*)\s*$")
_RE_BANNER_MODEL = re.compile(r"\bmodel\s+(\S.*?)\s*$")
_RE_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\)")
_RE_NONDEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_RE_ARCH = re.compile(r"Resolved architecture: (\w+)")
_RE_MAXLEN = re.compile(r"Using max model len (\d+)")
_RE_ATTN = re.compile(r"Using (?:backend )?'?(\w+)'? attention backend")
# a backend named by the user (--attention-backend): "Using AttentionBackendEnum.FLASHMLA
# backend." (vLLM 0.26.0 on CUDA); not the encoder's "... for MMEncoderAttention" line
_RE_ATTN_ENUM = re.compile(r"Using AttentionBackendEnum\.(\w+) backend\.?\s*$")
_RE_ATTN_ALT = re.compile(
    r"Using (FLASH_ATTN|FLASHINFER|TRITON_ATTN|FLEX_ATTENTION|TORCH_SDPA|CPU_ATTN|CPU_MLA"
    r"|AMX_MLA|FLASHMLA|TRITON_MLA|CUTLASS_MLA)\b(?: backend)?"
)
_RE_MOE_ORACLE = re.compile(
    r"Using '?([\w-]+)'? (Fp8|NvFp4|Mxfp4|MxFp8|Unquantized|WNA16|Int8|W4A8|W4A8 Int8) MoE backend"
)
_RE_MOE_OLD = re.compile(r"Using (Triton|Marlin|DeepGEMM|CUTLASS|FlashInfer) backend for (\w+) MoE")
_RE_MOE_EXPERTS = re.compile(r"Using (\w+) MoE backend\s*$")
_RE_MARLIN = re.compile(r"Weight-only \w+ compression will be used leveraging the Marlin kernel")
_RE_MODEL_LOADING = re.compile(rf"Model loading took {_NUM} GiB(?: memory)? and {_NUM} seconds")
_RE_WEIGHTS_TOOK = re.compile(rf"Loading weights took {_NUM} seconds")
_RE_CHECKPOINT = re.compile(rf"Checkpoint size: {_NUM} GiB")
_RE_KV_AVAIL = re.compile(rf"Available KV cache memory: {_NUM} GiB")
_RE_KV_CPU = re.compile(rf"Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache")
_RE_KV_RESERVED = re.compile(rf"reserved {_NUM} GiB memory for KV Cache")
_RE_LINEAR_KERNEL = re.compile(r"Selected (\w+) for (\w+LinearMethod)")
_RE_FA_VERSION = re.compile(r"Using FlashAttention version (\d+)")
_RE_COMPILE = re.compile(rf"torch\.compile took {_NUM} s in total")
_RE_KV_SIZE = re.compile(rf"(GPU|CPU|XPU|TPU)? ?KV cache size: {_NUM} tokens")
_RE_CONCURRENCY = re.compile(rf"Maximum concurrency for {_NUM} tokens per request: {_NUM}x")
_RE_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
_RE_LCM_BLOCK = re.compile(r"kv lcm block sizes (\d+)")
_RE_MAMBA_PAD = re.compile(rf"Padding mamba page size by {_NUM}%")
_RE_PAD_LAYERS = re.compile(r"Add (\d+) padding layers")
_RE_GRAPH = re.compile(rf"Graph capturing finished in {_NUM} secs?, took {_NUM} GiB")
# The engine's config dump ("Initializing a V1 LLM engine (v0.26.0) with config: ...").
_RE_CAPTURE_SIZE = re.compile(r"'max_cudagraph_capture_size': (\d+|None)")
_RE_GRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_RE_EAGER = re.compile(r"\benforce_eager=(True|False)")
_RE_MAMBA_BLOCKS = re.compile(r"exceeds available Mamba cache blocks \((\d+)\)")
_RE_INIT_ENGINE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s"
)
_RE_SERVER = re.compile(r"Starting vLLM (?:API )?server on (\S+)")
# Multi-rank starts: the engine's parallel config, each rank's torch.distributed init,
# the transport its collectives use, and Ray.
_RE_PARALLEL_CFG = re.compile(
    r"tensor_parallel_size=(\d+), pipeline_parallel_size=(\d+), data_parallel_size=(\d+)"
)
_RE_EXECUTOR_CFG = re.compile(r"distributed_executor_backend='?(\w+)")
_RE_DIST_INIT = re.compile(r"world_size=(\d+) rank=\d+ (?:local_rank=\d+ )?.*backend=(\w+)")
_RE_WORLD = re.compile(r"\bworld_size=(\d+)")
_RE_OMP_BIND = re.compile(r"\bVLLM_CPU_OMP_THREADS_BIND='([^']*)'")
_RE_NCCL = re.compile(r"vLLM is using nccl==([\w.+-]+)")
_RE_SHM_OFF = re.compile(r"CPU SHM communicator disabled")
_RE_RAY = re.compile(
    r"Ray is already initialized|placement group|RayWorkerWrapper|Ray distributed executor"
    r"|Connecting to existing Ray cluster"
)
_RE_EP = re.compile(
    r"\[EP Rank \d+/(\d+)\] Expert parallelism is enabled.*"
    r"Local/global number of experts: (\d+)/\d+"
)
_RE_RANK_PROC = re.compile(r"^(?:(?:Worker|RayWorkerWrapper)_?\w*|EngineCore_DP\d+)$")
_RE_EXC = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")

_WARNINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kv-profiling-skipped", re.compile(r"skipped memory profiling")),
    ("default-moe-config", re.compile(r"Using default MoE config")),
    ("marlin-weight-only", _RE_MARLIN),
    ("cpu-memory-low", re.compile(r"less than desired CPU memory utilization")),
    ("kv-cache-low", re.compile(r"less than requested memory for kv")),
)
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)

_PHASE_MARKERS: tuple[tuple[Phase, re.Pattern[str]], ...] = (
    (
        Phase.LOADING_WEIGHTS,
        re.compile(r"Starting to load model|Loading safetensors checkpoint|Loading weights took"),
    ),
    (
        Phase.PROFILING,
        re.compile(r"Warming up model|Memory profiling|profiling/warmup|Model loading took"),
    ),
    (
        Phase.KV_ALLOCATION,
        re.compile(
            r"KV cache size:|Available KV cache memory|for KV cache on node"
            r"|skipped memory profiling"
        ),
    ),
    (Phase.GRAPH_CAPTURE, re.compile(r"Capturing CUDA graph|Graph capturing|Capturing graphs")),
    (
        Phase.SERVER_STARTING,
        re.compile(r"Starting vLLM (?:API )?server on|Application startup complete"),
    ),
)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _literal_dict(text: str) -> dict[str, Any] | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return value
    return None


class LogParser:
    """Incremental parser: :meth:`feed` lines as they arrive, read :meth:`facts` any time.

    :meth:`feed` returns the new :class:`Phase` when a line moves startup forward
    (never backwards), else ``None``.
    """

    def __init__(self) -> None:
        self._f: dict[str, Any] = {}
        self._args: dict[str, Any] = {}
        self._warnings: list[LogNotice] = []
        self._errors: list[LogNotice] = []
        self._seen: set[tuple[str, str]] = set()
        self._first_ts: str | None = None
        self._server_ts: str | None = None
        self._ranks: set[str] = set()
        self._ray_nodes: set[str] = set()
        self.phase = Phase.STARTING

    def feed_text(self, text: str) -> None:
        """Feed a chunk of whole lines."""
        for line in text.splitlines():
            self.feed(line)

    def feed(self, raw_line: str) -> Phase | None:
        """Parse one line; return the new phase if this line advanced startup."""
        line = _ANSI.sub("", raw_line).rstrip("\r\n")
        m = _PREFIX.match(line)
        if m:
            msg = m.group("msg")
            level = m.group("level")
            ts = m.group("ts")
            if self._first_ts is None:
                self._first_ts = ts
        else:
            msg = line.strip()
            level = ""
            ts = None
        if not msg:
            return None
        if m:
            self._rank_from(m.group("proc"), m.group("ip"), msg)
        self._facts_from(msg, level)
        if ts is not None and self._server_ts is None and _RE_SERVER.search(msg):
            self._server_ts = ts
        return self._advance(msg)

    def _advance(self, msg: str) -> Phase | None:
        for phase, pattern in _PHASE_MARKERS:
            if phase > self.phase and pattern.search(msg):
                self.phase = phase
                return phase
        return None

    def _set_once(self, key: str, value: Any) -> None:
        self._f.setdefault(key, value)

    def _notice(self, bucket: list[LogNotice], kind: str, text: str) -> None:
        if (kind, text) not in self._seen:
            self._seen.add((kind, text))
            bucket.append(LogNotice(kind, text))

    def _rank_from(self, proc: str | None, ip: str | None, msg: str) -> None:
        """Per-rank process labels (``Worker_TP1``, ``Worker_PP0``) and Ray worker hosts."""
        if proc and _RE_RANK_PROC.match(proc) and proc not in ("Worker", "RayWorkerWrapper"):
            self._ranks.add(proc)
        if proc and proc.startswith("RayWorkerWrapper"):
            self._f["executor"] = "ray"
            if ip:
                self._ray_nodes.add(ip)

    def _parallel_from(self, msg: str) -> None:
        f = self._f
        if m := _RE_PARALLEL_CFG.search(msg):
            f["tensor_parallel_size"] = int(m.group(1))
            f["pipeline_parallel_size"] = int(m.group(2))
            f["data_parallel_size"] = int(m.group(3))
        if m := _RE_EXECUTOR_CFG.search(msg):
            f["executor"] = m.group(1)
        if m := _RE_DIST_INIT.search(msg):
            f["world_size"] = int(m.group(1))
            f["dist_backend"] = m.group(2)
        elif (m := _RE_WORLD.search(msg)) and "DP group leader" in msg:
            f["world_size"] = int(m.group(1))
        if m := _RE_NCCL.search(msg):
            f["nccl_version"] = m.group(1)
            f["comm_transport"] = f"NCCL {m.group(1)}"
        if _RE_SHM_OFF.search(msg) and "comm_transport" not in f:
            f["comm_transport"] = "torch.distributed (gloo); CPU shared-memory communicator off"
        if _RE_RAY.search(msg):
            f["executor"] = "ray"
        if m := _RE_OMP_BIND.search(msg):
            f["cpu_threads_bind"] = m.group(1)
        if m := _RE_EP.search(msg):
            f["expert_parallel_size"] = int(m.group(1))
            f["experts_per_rank"] = int(m.group(2))

    def _graph_config_from(self, msg: str) -> None:
        """The largest CUDA graph capture size from the config dump; 0 when the dump says
        the engine captures none (eager, or cudagraph_mode NONE)."""
        if (size := _RE_CAPTURE_SIZE.search(msg)) is None:
            return
        eager = _RE_EAGER.search(msg)
        mode = _RE_GRAPH_MODE.search(msg)
        if (eager and eager.group(1) == "True") or (mode and mode.group(1) == "NONE"):
            self._f["cudagraph_capture_max"] = 0
        elif size.group(1) != "None":
            self._f["cudagraph_capture_max"] = int(size.group(1))

    def _facts_from(self, msg: str, level: str) -> None:
        f = self._f
        self._parallel_from(msg)
        if m := _RE_VERSION.search(msg):
            f["version"] = m.group(1)
        elif "version" not in f and (m := _RE_BANNER_VERSION.search(msg)):
            f["version_banner"] = m.group(1)
        if (m := _RE_BANNER_MODEL.search(msg)) and ("█" in msg or "▀" in msg):
            self._set_once("model", m.group(1))
        if m := _RE_NONDEFAULT.search(msg):
            parsed = _literal_dict(m.group(1))
            if parsed is not None:
                self._args = {k: (REDACTED if is_secret_key(k) else v) for k, v in parsed.items()}
                if isinstance(parsed.get("model"), str):
                    self._set_once("model", parsed["model"])
        if m := _RE_ARCH.search(msg):
            self._set_once("architecture", m.group(1))
        if m := _RE_MAXLEN.search(msg):
            f["max_model_len"] = int(m.group(1))
        if (m := _RE_ATTN.search(msg) or _RE_ATTN_ENUM.search(msg)) or (
            # "Using FLASH_ATTN MLA prefill backend." names MLA's prefill kernel only
            msg.startswith("Using ") and "prefill" not in msg and (m := _RE_ATTN_ALT.match(msg))
        ):
            self._set_once("attention_backend", m.group(1))
        if m := _RE_MOE_ORACLE.search(msg):
            self._set_once("moe_backend", m.group(1))
            self._set_once("moe_quant", m.group(2))
        elif m := _RE_MOE_OLD.search(msg):
            self._set_once("moe_backend", m.group(1).upper())
            self._set_once("moe_quant", m.group(2))
        elif m := _RE_MOE_EXPERTS.search(msg):
            self._set_once("moe_experts_kernel", m.group(1))
        if _RE_MARLIN.search(msg):
            f["marlin_fallback"] = True
        if m := _RE_MODEL_LOADING.search(msg):
            f["weights_gib"] = _num(m.group(1))
            f["weights_load_s"] = _num(m.group(2))
        elif (m := _RE_WEIGHTS_TOOK.search(msg)) and "weights_gib" not in f:
            f["weights_load_s"] = _num(m.group(1))
        if m := _RE_CHECKPOINT.search(msg):
            f["checkpoint_gib"] = _num(m.group(1))
        if (
            (m := _RE_KV_AVAIL.search(msg))
            or (m := _RE_KV_CPU.search(msg))
            or (m := _RE_KV_RESERVED.search(msg))
        ):
            f["kv_available_gib"] = _num(m.group(1))
        if m := _RE_LINEAR_KERNEL.search(msg):
            f["linear_kernel"] = f"{m.group(1)} ({m.group(2)})"
        if m := _RE_FA_VERSION.search(msg):
            f["flash_attn_version"] = int(m.group(1))
        if m := _RE_COMPILE.search(msg):
            f["compile_s"] = _num(m.group(1))
        if m := _RE_KV_SIZE.search(msg):
            f["kv_pool_tokens"] = _int(m.group(2))
            if m.group(1):
                f["kv_device"] = m.group(1)
        if m := _RE_CONCURRENCY.search(msg):
            f["concurrency_at_tokens"] = _int(m.group(1))
            f["max_concurrency"] = _num(m.group(2))
        if m := _RE_BLOCK.search(msg):
            f["attention_block_size"] = int(m.group(1))
        if m := _RE_LCM_BLOCK.search(msg):
            f["scheduler_block_size"] = int(m.group(1))
        if m := _RE_MAMBA_PAD.search(msg):
            f["mamba_padding_pct"] = _num(m.group(1))
        if m := _RE_PAD_LAYERS.search(msg):
            f["padding_layers"] = int(m.group(1))
        if m := _RE_GRAPH.search(msg):
            f["graph_capture_s"] = _num(m.group(1))
            f["graph_capture_gib"] = _num(m.group(2))
        self._graph_config_from(msg)
        if m := _RE_MAMBA_BLOCKS.search(msg):
            f["mamba_cache_blocks"] = int(m.group(1))
        if m := _RE_INIT_ENGINE.search(msg):
            f["init_engine_s"] = _num(m.group(1))
        if m := _RE_SERVER.search(msg):
            self._set_once("server_url", m.group(1))
        for kind, pattern in _WARNINGS:
            if pattern.search(msg):
                self._notice(self._warnings, kind, msg)
        if m := _RE_EXC.match(msg):
            exc_name = m.group(1)
            kind = "out-of-memory" if _OOM.search(msg) else "exception"
            # Tracebacks print "ValueError: ..." without a log prefix, or prefixed by ERROR.
            if level in ("", "ERROR", "CRITICAL") and exc_name not in ("EngineDeadError",):
                self._notice(self._errors, kind, msg)
        elif level in ("ERROR", "CRITICAL") and _OOM.search(msg):
            self._notice(self._errors, "out-of-memory", msg)

    def facts(self) -> EngineFacts:
        """The facts gathered so far."""
        f = dict(self._f)
        banner = f.pop("version_banner", None)
        if "version" not in f and banner is not None:
            f["version"] = banner
        startup_s = None
        if self._first_ts and self._server_ts:
            startup_s = _seconds_between(self._first_ts, self._server_ts)
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if key not in f and isinstance(self._args.get(key), int):
                f[key] = self._args[key]
        if "comm_transport" not in f and f.get("dist_backend"):
            f["comm_transport"] = f"torch.distributed ({f['dist_backend']})"
        return EngineFacts(
            **f,
            ranks=tuple(sorted(self._ranks)),
            ray_nodes=tuple(sorted(self._ray_nodes)),
            non_default_args=dict(self._args),
            startup_s=startup_s,
            warnings=tuple(self._warnings),
            errors=tuple(self._errors),
        )


def _seconds_between(start: str, end: str) -> float | None:
    """Seconds between two ``MM-DD HH:MM:SS`` stamps (the log carries no year)."""
    fmt = "%Y-%m-%d %H:%M:%S"
    try:
        a = datetime.strptime(f"2000-{start}", fmt)
        b = datetime.strptime(f"2000-{end}", fmt)
    except ValueError:
        return None
    delta = (b - a).total_seconds()
    if delta < 0:  # crossed a new year
        delta += 366 * 86400
    return delta


def parse_log(text: str) -> EngineFacts:
    """Parse a whole vLLM log into :class:`EngineFacts`; unknown lines are ignored."""
    parser = LogParser()
    parser.feed_text(text)
    return parser.facts()
