"""Measure operator costs ON THE GPU with vLLM's own kernels, called directly (no model load).

Reads the job list benchmarks/ops/grid.py wrote (``jobs.json``) and times every job's points:

* ``gemm``: vLLM 0.26's linear kernels through its own kernel classes
  (``torch.nn.functional.linear`` for BF16; ``DeepGemmFp8BlockScaledMMKernel`` and
  ``CutlassFp8BlockScaledMMKernel`` for 128x128-block FP8; the kernel
  ``init_fp8_linear_kernel`` picks for FP8 per-tensor and per-channel weights; Machete and
  Marlin for W4A16 / W8A16 through ``ops.machete_mm`` / ``apply_gptq_marlin_linear``),
  activation quantization included, as ``apply_weights`` runs it;
* ``moe``: ``fused_experts`` (vLLM's Triton fused MoE, BF16 and FP8 128x128 block), random
  uniform routing (``fused_topk`` over random logits);
* ``attn_decode`` / ``attn_prefill``: ``vllm_flash_attn.flash_attn_varlen_func``
  (FlashAttention 3) over a paged KV cache (block 16, NHD), with the AOT scheduler metadata
  and split limit vLLM's FLASH_ATTN backend passes (32 splits for decode under CUDA graphs);
  sliding window and sinks as the model has them; ``kv_write``: ``reshape_and_cache_flash``;
* ``gdn_prefill`` / ``gdn_decode``: Qwen3-Next / Qwen3.5 Gated DeltaNet core as vLLM runs it
  (``causal_conv1d_fn`` + ``fused_post_conv_prep`` + FLA ``chunk_gated_delta_rule``;
  ``causal_conv1d_update`` + ``fused_recurrent_gated_delta_rule_packed_decode``);
* ``mamba_prefill`` / ``mamba_decode``: Mamba2 (``causal_conv1d_*`` +
  ``mamba_chunk_scan_combined_varlen`` / ``selective_state_update``);
* ``rms_norm`` (fused add + RMSNorm), ``qk_norm``, ``rope``, ``silu_mul``, ``router``
  (``fused_topk``), ``embed``, ``sampler`` (greedy argmax; softmax + exponential-race
  random sample with top-k/top-p through vLLM's sampler ops);
* ``host``: per-step host cost of launching N small kernels eagerly vs replaying them as
  one CUDA graph (wall clock, synchronised).

Timing: CUDA events around a CUDA-graph replay of the op (eager when it cannot be
captured, said in the row), L2 flushed (256 MiB write) before every repetition, warm-up
first, median of 3..25 repetitions. Rows are written as they come (JSON lines), with the
run's provenance in the first line, so a run cut off keeps what it measured.

    python measure.py --jobs jobs.json --out results.jsonl [--phase warm|measure]
        [--shard I/N] [--priority P] [--only OP,...] [--budget SECONDS]
    python measure.py --jobs jobs.json --dry-run      # no torch.cuda, no vLLM: the plan
    python measure.py --jobs jobs.json --check        # CPU: import every vLLM symbol used
                                                      # and bind every call's arguments
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Ops timed eagerly: their vLLM call reads a length on the host (a sync), as the engine's
#: prefill path does outside CUDA graphs.
NO_GRAPH = frozenset({"gdn_prefill", "mamba_prefill"})
CHECK = False  # --check: bind vLLM calls' arguments instead of calling them
DEVICE = "cuda"


# --- calling vLLM: real call, or (in --check) a signature bind --------------------------


class Bound:
    """What a checked call returns: the function's name (no result exists on CPU)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<bound {self.name}>"


CHECKED: list[str] = []


def C(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` (a vLLM function); in --check mode bind its signature instead."""
    if CHECK:
        target = getattr(fn, "__wrapped__", fn)
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            CHECKED.append(f"{getattr(fn, '__name__', fn)}: no signature (op)")
            return Bound(str(fn))
        sig.bind(*args, **kwargs)
        CHECKED.append(f"{getattr(target, '__qualname__', target)}: ok")
        return Bound(getattr(target, "__qualname__", str(target)))
    return fn(*args, **kwargs)


# --- timing ----------------------------------------------------------------------------


class Timer:
    """CUDA-event timing of a graph replay (or eager call), L2 flushed between reps."""

    def __init__(self, target_ms: float = 40.0, min_reps: int = 3, max_reps: int = 25) -> None:
        import torch

        self.torch = torch
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=DEVICE)
        self.target_ms, self.min_reps, self.max_reps = target_ms, min_reps, max_reps

    def __call__(self, fn: Callable[[], Any], *, graph: bool = True) -> dict[str, Any]:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
            fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        run: Callable[[], Any] = fn
        mode = "eager"
        g = None
        if graph:
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                g.replay()
                torch.cuda.synchronize()
                run, mode = g.replay, "graph"
            except Exception as e:
                torch.cuda.synchronize()
                g = None
                mode = f"eager (no graph: {type(e).__name__})"
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        self.flush.zero_()
        e0.record()
        run()
        e1.record()
        torch.cuda.synchronize()
        est = max(e0.elapsed_time(e1), 1e-3)
        reps = int(min(self.max_reps, max(self.min_reps, round(self.target_ms / est))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush.zero_()
            starts[i].record()
            run()
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        del g
        return {
            "latency": statistics.median(times),
            "latency_min": times[0],
            "latency_max": times[-1],
            "reps": reps,
            "timing": mode,
        }


# --- provenance ------------------------------------------------------------------------


def provenance(jobs_path: Path) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {
        "schema": "servelab.ops-run/1",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "script": "benchmarks/ops/measure.py",
        "jobs": jobs_path.name,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        import vllm

        out["vllm"] = vllm.__version__
    except ImportError as e:
        out["vllm"] = f"unavailable: {e}"
    try:
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,"
             "power.limit,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False)
        out["nvidia_smi"] = q.stdout.strip()
        out["driver"] = q.stdout.split(",")[0].strip()
    except (OSError, subprocess.SubprocessError) as e:
        out["nvidia_smi"] = f"unavailable: {e}"
    commit = os.environ.get("SERVELAB_COMMIT")
    if commit:
        out["commit"] = commit
    return out


# --- the ops ---------------------------------------------------------------------------

BF16: Any = None
FP8: Any = None


def _t():  # type: ignore[no-untyped-def]
    import torch

    return torch


def randn(*shape: int, dtype: Any = None, scale: float = 1.0) -> Any:
    torch = _t()
    return torch.randn(*shape, dtype=dtype or BF16, device=DEVICE) * scale


def _vllm_config() -> contextlib.AbstractContextManager[Any]:
    """vLLM's config context (CustomOp instantiation reads it); on CPU a null context."""
    if CHECK:
        return contextlib.nullcontext()
    from vllm.config import VllmConfig, set_current_vllm_config

    return set_current_vllm_config(VllmConfig())


class _Layer:
    """A stand-in nn.Module carrying a linear layer's parameters for a vLLM kernel."""

    @staticmethod
    def make(**params: Any) -> Any:
        torch = _t()
        layer = torch.nn.Module()
        for name, value in params.items():
            if isinstance(value, torch.Tensor):
                layer.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
            else:
                setattr(layer, name, value)
        return layer


def gemm_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    """(point builder: m -> fn, kernel_source) for one GEMM job."""
    torch = _t()
    n, k, fmt = int(job["n"]), int(job["k"]), str(job["fmt"])
    max_m = max(job["ms"])
    x = randn(max_m, k, scale=1.0)
    if fmt == "bf16":
        w = randn(n, k, scale=0.02)
        f = torch.nn.functional.linear
        return (lambda m: (lambda: f(x[:m], w))), "torch.nn.functional.linear"
    if fmt.startswith("fp8_block"):
        from vllm.model_executor.kernels.linear.scaled_mm.cutlass import (
            CutlassFp8BlockScaledMMKernel,
        )
        from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import (
            DeepGemmFp8BlockScaledMMKernel,
        )
        from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
            FP8ScaledMMLinearLayerConfig,
        )
        from vllm.model_executor.layers.quantization.utils.quant_utils import (
            kFp8Dynamic128Sym,
            kFp8Static128BlockSym,
        )
        from vllm.utils.deep_gemm import DeepGemmQuantScaleFMT

        DeepGemmQuantScaleFMT.init_oracle_cache()
        cls = DeepGemmFp8BlockScaledMMKernel if fmt.endswith("deepgemm") else \
            CutlassFp8BlockScaledMMKernel
        cfg = FP8ScaledMMLinearLayerConfig(
            weight_quant_key=kFp8Static128BlockSym, activation_quant_key=kFp8Dynamic128Sym,
            weight_shape=(n, k), input_dtype=BF16, out_dtype=BF16)
        with _vllm_config():
            kern = cls(cfg)
            kern.quant_fp8._forward_method = kern.quant_fp8.forward_cuda
        w = randn(n, k, scale=0.1).to(FP8)
        s = torch.rand(math.ceil(n / 128), math.ceil(k / 128), device=DEVICE) * 0.01 + 0.001
        layer = _Layer.make(weight=w, weight_scale_inv=s, input_scale=None,
                            weight_block_size=[128, 128])
        kern.process_weights_after_loading(layer)
        return (lambda m: (lambda: kern.apply_weights(layer, x[:m]))), cls.__name__
    if fmt in ("fp8_tensor", "fp8_channel"):
        from vllm.model_executor.kernels.linear import init_fp8_linear_kernel
        from vllm.model_executor.layers.quantization.utils.quant_utils import (
            kFp8DynamicTensorSym,
            kFp8DynamicTokenSym,
            kFp8StaticChannelSym,
            kFp8StaticTensorSym,
        )

        per_channel = fmt == "fp8_channel"
        with _vllm_config():
            kern = init_fp8_linear_kernel(
                activation_quant_key=kFp8DynamicTokenSym if per_channel else
                kFp8DynamicTensorSym,
                weight_quant_key=kFp8StaticChannelSym if per_channel else kFp8StaticTensorSym,
                input_dtype=BF16, out_dtype=BF16, weight_shape=(n, k))
            kern.quant_fp8._forward_method = kern.quant_fp8.forward_cuda
        w = randn(n, k, scale=0.1).to(FP8).t()  # [K, N] column-major, as Fp8LinearMethod
        s = (torch.rand(n, 1, device=DEVICE) * 0.01 + 0.001) if per_channel else \
            torch.tensor([0.005], device=DEVICE)
        layer = _Layer.make(weight=w, weight_scale=s, input_scale=None)
        kern.process_weights_after_loading(layer)
        return (lambda m: (lambda: kern.apply_weights(layer, x[:m]))), type(kern).__name__
    if fmt == "w4a16_machete":
        from vllm import _custom_ops as ops
        from vllm.scalar_type import scalar_types

        group = 128
        wt = scalar_types.uint4b8
        packed = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32,
                               device=DEVICE)
        b_q = ops.machete_prepack_B(packed.t().contiguous().t(), a_type=BF16, b_type=wt,
                                    group_scales_type=BF16)
        scales = randn(k // group, n, scale=0.01).abs() + 1e-3
        return (lambda m: (lambda: ops.machete_mm(a=x[:m], b_q=b_q, b_type=wt,
                                                   b_group_scales=scales,
                                                   b_group_size=group))), "MacheteLinearKernel"
    if fmt in ("w4a16_marlin", "w8a16_marlin"):
        from vllm.model_executor.layers.quantization.utils.marlin_utils import (
            apply_gptq_marlin_linear,
            marlin_make_empty_g_idx,
            marlin_make_workspace_new,
        )
        from vllm.scalar_type import scalar_types

        bits = 4 if fmt.startswith("w4") else 8
        wt = scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128
        group = 128
        pack = 32 // bits
        q_w = torch.randint(-2**31, 2**31 - 1, (k // 16, n * 16 // pack), dtype=torch.int32,
                            device=DEVICE)
        s = randn(k // group, n, scale=0.01).abs() + 1e-3
        empty = marlin_make_empty_g_idx(torch.device(DEVICE))
        ws = marlin_make_workspace_new(torch.device(DEVICE))
        return (lambda m: (lambda: apply_gptq_marlin_linear(
            input=x[:m], weight=q_w, weight_scale=s, weight_zp=empty, g_idx=empty,
            g_idx_sort_indices=empty, workspace=ws, wtype=wt, output_size_per_partition=n,
            input_size_per_partition=k, is_k_full=True))), "MarlinLinearKernel"
    raise ValueError(f"unknown gemm format {fmt}")


def moe_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk

    e, topk, h, inter, fmt = (int(job["experts"]), int(job["topk"]), int(job["hidden"]),
                              int(job["inter"]), str(job["fmt"]))
    max_t = max(job["tokens"])
    x = randn(max_t, h)
    logits = randn(max_t, e, dtype=torch.float32)
    quant = None
    if fmt == "bf16":
        w1 = randn(e, 2 * inter, h, scale=0.02)
        w2 = randn(e, h, inter, scale=0.02)
        src = "vllm_unquantizedfusedmoe_triton_fused_experts"
    elif fmt == "fp8_block":
        w1 = randn(e, 2 * inter, h, scale=0.1).to(FP8)
        w2 = randn(e, h, inter, scale=0.1).to(FP8)
        s1 = torch.rand(e, math.ceil(2 * inter / 128), math.ceil(h / 128),
                        device=DEVICE) * 0.01 + 0.001
        s2 = torch.rand(e, math.ceil(h / 128), math.ceil(inter / 128),
                        device=DEVICE) * 0.01 + 0.001
        quant = fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, block_shape=[128, 128])
        src = "vllm_fp8moe_triton_fused_experts"
    else:
        raise ValueError(f"moe format {fmt} is not measured by this script")

    def point(t: int) -> Callable[[], Any]:
        tw, ti, _ = C(fused_topk, x[:t], logits[:t], topk, renormalize=True) if not CHECK \
            else (C(fused_topk, x[:t], logits[:t], topk, renormalize=True), None, None)
        return lambda: C(fused_experts, x[:t], w1, w2, tw, ti, quant_config=quant)

    return point, src


def router_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk

    e, topk = int(job["experts"]), int(job["topk"])
    max_t = max(job["tokens"])
    logits = randn(max_t, e, dtype=torch.float32)
    x = randn(max_t, 8)
    return (lambda t: (lambda: C(fused_topk, x[:t], logits[:t], topk, renormalize=True))), \
        "fused_topk"


class _Paged:
    """A paged KV cache (vLLM FLASH_ATTN layout: physical NHD blocks, logical (B,H,N,2D))."""

    def __init__(self, seqs: list[int], hkv: int, d: int, block: int = 16) -> None:
        torch = _t()
        per = [math.ceil(s / block) for s in seqs]
        total = sum(per) + 1
        phys = randn(total, block, hkv, 2 * d)
        kv = phys.permute(0, 2, 1, 3)
        self.key, self.value = kv.transpose(1, 2).split(d, dim=-1)
        perm = torch.randperm(total - 1, device=DEVICE).int() + 1
        width = max(per)
        self.block_table = torch.zeros(len(seqs), width, dtype=torch.int32, device=DEVICE)
        at = 0
        for i, p in enumerate(per):
            self.block_table[i, :p] = perm[at:at + p]
            at += p
        self.seqused = torch.tensor(seqs, dtype=torch.int32, device=DEVICE)
        self.block = block


def _window(w: int) -> tuple[int, int]:
    return (w - 1, 0) if w else (-1, -1)


def attn_setup(job: Mapping[str, Any], decode: bool
               ) -> tuple[Callable[[Any], Callable[[], Any]], str]:
    torch = _t()
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    hq, hkv, d, w = int(job["hq"]), int(job["hkv"]), int(job["d"]), int(job["window"])
    # vLLM's FA3 takes the learned sinks (s_aux) in BF16 ("We only support bf16 dtype for S
    # aux", seen 2026-12-05); float32 sinks failed every gpt-oss point of the first sitting
    sinks = randn(hq, dtype=BF16) if job.get("sinks") else None
    win = _window(w)

    def point(p: Any) -> Callable[[], Any]:
        if decode:
            b, ctx = int(p[0]), int(p[1])
            seqs, q_lens = [ctx + 1] * b, [1] * b
            splits = 32
        else:
            q_len, prefix = int(p[0]), int(p[1])
            seqs, q_lens = [prefix + q_len], [q_len]
            splits = 0
        kv = _Paged(seqs, hkv, d)
        tq = sum(q_lens)
        q = randn(tq, hq, d)
        out = torch.empty_like(q)
        cu = torch.tensor([0, *list(_cumsum(q_lens))], dtype=torch.int32, device=DEVICE)
        sched = C(get_scheduler_metadata, batch_size=len(seqs), max_seqlen_q=max(q_lens),
                  max_seqlen_k=max(seqs), num_heads_q=hq, num_heads_kv=hkv, headdim=d,
                  cache_seqlens=kv.seqused, qkv_dtype=BF16, cu_seqlens_q=cu,
                  page_size=kv.block, causal=True, window_size=win, num_splits=splits)
        return lambda: C(flash_attn_varlen_func, q=q, k=kv.key, v=kv.value, out=out,
                         cu_seqlens_q=cu, max_seqlen_q=max(q_lens), seqused_k=kv.seqused,
                         max_seqlen_k=max(seqs), softmax_scale=d ** -0.5, causal=True,
                         window_size=list(win), block_table=kv.block_table,
                         scheduler_metadata=sched, fa_version=3, num_splits=splits,
                         s_aux=sinks)

    return point, "vllm_flash_attn_fa3"


def _cumsum(xs: list[int]) -> Iterator[int]:
    s = 0
    for v in xs:
        s += v
        yield s


def kv_write_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm import _custom_ops as ops

    hkv, d = int(job["hkv"]), int(job["d"])
    max_t = max(job["tokens"])
    kv = _Paged([max_t + 64], hkv, d)
    k = randn(max_t, hkv, d)
    v = randn(max_t, hkv, d)
    slots = torch.randperm(max_t + 16, device=DEVICE)[:max_t].long()
    one = torch.ones(1, dtype=torch.float32, device=DEVICE)
    return (lambda t: (lambda: C(ops.reshape_and_cache_flash, k[:t], v[:t], kv.key, kv.value,
                                 slots[:t], "auto", one, one))), "reshape_and_cache_flash"


def rope_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm import _custom_ops as ops

    hq, hkv, d = int(job["hq"]), int(job["hkv"]), int(job["d"])
    max_t = max(job["tokens"])
    q = randn(max_t, hq * d)
    k = randn(max_t, hkv * d)
    pos = torch.randint(0, 32768, (max_t,), device=DEVICE)
    cache = randn(40960, d)
    return (lambda t: (lambda: C(ops.rotary_embedding, pos[:t], q[:t], k[:t], d, cache,
                                 True))), "rotary_embedding"


def rms_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    from vllm import _custom_ops as ops

    h = int(job["hidden"])
    max_t = max(job["tokens"])
    x = randn(max_t, h)
    r = randn(max_t, h)
    w = randn(h)
    return (lambda t: (lambda: C(ops.fused_add_rms_norm, x[:t], r[:t], w, 1e-6))), \
        "fused_add_rms_norm"


def qk_norm_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm import _custom_ops as ops

    heads, d = int(job["heads"]), int(job["d"])
    max_t = max(job["tokens"])
    x = randn(max_t * heads, d)
    out = torch.empty_like(x)
    w = randn(d)
    return (lambda t: (lambda: C(ops.rms_norm, out[:t * heads], x[:t * heads], w, 1e-6))), \
        "rms_norm"


def silu_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    import vllm._custom_ops  # noqa: F401  (loads torch.ops._C)

    width = int(job["width"])
    max_t = max(job["tokens"])
    x = randn(max_t, 2 * width)
    out = randn(max_t, width)
    op = None if CHECK else torch.ops._C.silu_and_mul
    return (lambda t: (lambda: op(out[:t], x[:t]) if op else None)), "silu_and_mul"


def embed_setup(job: Mapping[str, Any]) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    vocab, h = int(job["vocab"]), int(job["hidden"])
    max_t = max(job["tokens"])
    table = randn(vocab, h, scale=0.02)
    ids = torch.randint(0, vocab, (max_t,), device=DEVICE)
    f = torch.nn.functional.embedding
    return (lambda t: (lambda: f(ids[:t], table))), "torch.nn.functional.embedding"


def sampler_setup(job: Mapping[str, Any]) -> tuple[Callable[[Any], Callable[[], Any]], str]:
    torch = _t()
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p, random_sample

    vocab = int(job["vocab"])
    max_b = max(job["batch"])
    logits = randn(max_b, vocab, dtype=torch.float32)

    def point(p: Any) -> Callable[[], Any]:
        b, kind = int(p[0]), p[1]
        lg = logits[:b]
        if kind == "greedy":
            return lambda: lg.argmax(dim=-1)
        k = torch.full((b,), 50, dtype=torch.int64, device=DEVICE)
        top_p = torch.full((b,), 0.9, dtype=torch.float32, device=DEVICE)

        def fn() -> Any:
            x = C(apply_top_k_top_p, lg.clone(), k, top_p)
            probs = x.softmax(dim=-1, dtype=torch.float32) if not CHECK else lg
            return C(random_sample, probs, {})

        return fn

    return point, "vllm_sampler"


def gdn_setup(job: Mapping[str, Any], decode: bool, state_dtype: Any
              ) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import (
        causal_conv1d_fn,
        causal_conv1d_update,
    )
    from vllm.third_party.flash_linear_attention.ops import (
        chunk_gated_delta_rule,
        fused_post_conv_prep,
        fused_recurrent_gated_delta_rule_packed_decode,
    )

    hk, hv, dk, dv, conv = (int(job["hk"]), int(job["hv"]), int(job["dk"]), int(job["dv"]),
                            int(job["conv"]))
    key_dim, value_dim = hk * dk, hv * dv
    conv_dim = 2 * key_dim + value_dim
    ncache = (max(job["batch"]) if decode else 1) + 1
    conv_w = randn(conv_dim, conv, scale=0.1)
    conv_state = randn(ncache, conv - 1, conv_dim).transpose(-1, -2)  # SD layout, viewed DS
    ssm_state = randn(ncache, hv, dv, dk, dtype=state_dtype, scale=0.1)
    a_log = torch.rand(hv, device=DEVICE, dtype=torch.float32)
    dt_bias = randn(hv)

    def point(n: int) -> Callable[[], Any]:
        mixed = randn(n, conv_dim)
        a = randn(n, hv)
        b = randn(n, hv)
        if decode:
            idx = torch.arange(1, n + 1, dtype=torch.int32, device=DEVICE)
            out = torch.empty(n, 1, hv, dv, dtype=BF16, device=DEVICE)

            def fn() -> Any:
                x = C(causal_conv1d_update, mixed, conv_state, conv_w, None, "silu",
                      conv_state_indices=idx, validate_data=False)
                return C(fused_recurrent_gated_delta_rule_packed_decode, mixed_qkv=x, a=a, b=b,
                         A_log=a_log, dt_bias=dt_bias, scale=dk ** -0.5,
                         initial_state=ssm_state, out=out, ssm_state_indices=idx,
                         use_qk_l2norm_in_kernel=True)

            return fn
        idx = torch.tensor([1], dtype=torch.int32, device=DEVICE)
        has_init = torch.zeros(1, dtype=torch.bool, device=DEVICE)
        qsl = torch.tensor([0, n], dtype=torch.int32, device=DEVICE)

        def fn() -> Any:
            x = C(causal_conv1d_fn, mixed.transpose(0, 1), conv_w, None,
                  activation="silu", conv_states=conv_state, has_initial_state=has_init,
                  cache_indices=idx, query_start_loc=qsl, metadata=None)
            x = x.transpose(0, 1) if not CHECK else mixed
            q, k, v, g, beta = C(fused_post_conv_prep, conv_output=x, a=a, b=b, A_log=a_log,
                                 dt_bias=dt_bias, num_k_heads=hk, head_k_dim=dk,
                                 head_v_dim=dv, apply_l2norm=True, output_g_exp=False) \
                if not CHECK else (C(fused_post_conv_prep, conv_output=x, a=a, b=b,
                                     A_log=a_log, dt_bias=dt_bias, num_k_heads=hk,
                                     head_k_dim=dk, head_v_dim=dv, apply_l2norm=True,
                                     output_g_exp=False),) * 5
            init = ssm_state[idx]
            o, ht = C(chunk_gated_delta_rule, q=_u(q), k=_u(k), v=_u(v), g=_u(g),
                      beta=_u(beta), initial_state=init, output_final_state=True,
                      cu_seqlens=qsl, use_qk_l2norm_in_kernel=False) \
                if not CHECK else (C(chunk_gated_delta_rule, q=q, k=k, v=v, g=g, beta=beta,
                                     initial_state=init, output_final_state=True,
                                     cu_seqlens=qsl, use_qk_l2norm_in_kernel=False), None)
            if not CHECK:
                ssm_state[idx] = ht.to(ssm_state.dtype)
            return o

        return fn

    name = "gdn_decode_packed" if decode else "gdn_prefill_fla_chunk"
    return point, name


def _u(t: Any) -> Any:
    return t.unsqueeze(0)


def mamba_setup(job: Mapping[str, Any], decode: bool
                ) -> tuple[Callable[[int], Callable[[], Any]], str]:
    torch = _t()
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import (
        causal_conv1d_fn,
        causal_conv1d_update,
    )
    from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update
    from vllm.model_executor.layers.mamba.ops.ssd_combined import (
        mamba_chunk_scan_combined_varlen,
    )

    heads, hd, groups, state, conv, inter = (int(job["heads"]), int(job["hd"]),
                                             int(job["groups"]), int(job["state"]),
                                             int(job["conv"]), int(job["inter"]))
    conv_dim = inter + 2 * groups * state
    ncache = (max(job["batch"]) if decode else 1) + 1
    conv_w = randn(conv_dim, conv, scale=0.1)
    conv_b = randn(conv_dim, scale=0.1)
    conv_state = randn(ncache, conv - 1, conv_dim).transpose(-1, -2)
    ssm = randn(ncache, heads, hd, state, dtype=torch.float32, scale=0.1)
    a = -torch.rand(heads, device=DEVICE, dtype=torch.float32)
    dvec = randn(heads, dtype=torch.float32)
    dt_bias = randn(heads, dtype=torch.float32)
    chunk = 128

    def point(n: int) -> Callable[[], Any]:
        xbc = randn(n, conv_dim)
        dt = randn(n, heads)
        if decode:
            idx = torch.arange(1, n + 1, dtype=torch.int32, device=DEVICE)
            out = torch.empty(n, heads, hd, dtype=BF16, device=DEVICE)
            a_full = a[:, None, None].expand(heads, hd, state).to(torch.float32)
            dt_full = None

            def fn() -> Any:
                y = C(causal_conv1d_update, xbc, conv_state, conv_w, conv_b, "silu",
                      conv_state_indices=idx, validate_data=False)
                if CHECK:
                    y = xbc
                x, bb, cc = y.split([inter, groups * state, groups * state], dim=-1)
                dtf = dt[:, :, None].expand(n, heads, hd) if dt_full is None else dt_full
                return C(selective_state_update, ssm, x.reshape(n, heads, hd), dtf, a_full,
                         bb.reshape(n, groups, state), cc.reshape(n, groups, state),
                         dvec[:, None].expand(heads, hd),
                         dt_bias[:, None].expand(heads, hd), z=None, dt_softplus=True,
                         state_batch_indices=idx, out=out)

            return fn
        nchunks = math.ceil(n / chunk)
        idx = torch.tensor([1], dtype=torch.int32, device=DEVICE)
        has_init = torch.zeros(1, dtype=torch.bool, device=DEVICE)
        qsl = torch.tensor([0, n], dtype=torch.int32, device=DEVICE)
        cu_chunks = torch.tensor([min(i * chunk, n) for i in range(nchunks + 1)],
                                 dtype=torch.int32, device=DEVICE)
        last = torch.tensor([nchunks - 1], dtype=torch.int32, device=DEVICE)
        seq_idx = torch.zeros(nchunks, dtype=torch.int32, device=DEVICE)
        out = torch.empty(n, heads, hd, dtype=BF16, device=DEVICE)

        def fn() -> Any:
            y = C(causal_conv1d_fn, xbc.transpose(0, 1), conv_w, conv_b,
                  activation="silu", conv_states=conv_state, has_initial_state=has_init,
                  cache_indices=idx, query_start_loc=qsl, metadata=None)
            y = y.transpose(0, 1) if not CHECK else xbc
            x, bb, cc = y.split([inter, groups * state, groups * state], dim=-1)
            return C(mamba_chunk_scan_combined_varlen, x.reshape(n, heads, hd), dt, a,
                     bb.reshape(n, groups, state), cc.reshape(n, groups, state), chunk, qsl,
                     cu_chunks, last, seq_idx, out, D=dvec, z=None, dt_bias=dt_bias,
                     initial_states=None, dt_softplus=True, state_dtype=torch.float32)

        return fn

    return point, "mamba2_decode" if decode else "mamba2_prefill_ssd"


# --- running jobs ----------------------------------------------------------------------


def job_points(job: Mapping[str, Any]) -> list[Any]:
    op = job["op"]
    if op == "gemm":
        return list(job["ms"])
    if op in ("moe", "router", "kv_write", "rope", "rms_norm", "qk_norm", "silu_mul",
              "embed", "gdn_prefill", "mamba_prefill"):
        return list(job["tokens"])
    if op in ("attn_decode", "attn_prefill"):
        return [list(p) for p in job["points"]]
    if op in ("gdn_decode", "mamba_decode"):
        return list(job["batch"])
    if op == "sampler":
        return [[b, kind] for b in job["batch"] for kind in ("greedy", "top_k_top_p")]
    if op == "host":
        return [[n, mode] for n in job["kernels"] for mode in ("eager", "graph")]
    raise ValueError(op)


def setup(job: Mapping[str, Any], variant: str | None = None
          ) -> tuple[Callable[[Any], Callable[[], Any]], str]:
    torch = _t()
    op = job["op"]
    if op == "gemm":
        return gemm_setup(job)
    if op == "moe":
        return moe_setup(job)
    if op == "router":
        return router_setup(job)
    if op == "attn_decode":
        return attn_setup(job, decode=True)
    if op == "attn_prefill":
        return attn_setup(job, decode=False)
    if op == "kv_write":
        return kv_write_setup(job)
    if op == "rope":
        return rope_setup(job)
    if op == "rms_norm":
        return rms_setup(job)
    if op == "qk_norm":
        return qk_norm_setup(job)
    if op == "silu_mul":
        return silu_setup(job)
    if op == "embed":
        return embed_setup(job)
    if op == "sampler":
        return sampler_setup(job)
    if op in ("gdn_prefill", "gdn_decode"):
        dt = torch.float32 if variant == "float32" else BF16
        return gdn_setup(job, decode=op == "gdn_decode", state_dtype=dt)
    if op in ("mamba_prefill", "mamba_decode"):
        return mamba_setup(job, decode=op == "mamba_decode")
    raise ValueError(f"no setup for {op}")


def variants(job: Mapping[str, Any]) -> list[str | None]:
    """A job's measured variants (the recurrent state's dtype for Gated DeltaNet)."""
    if job["op"] in ("gdn_prefill", "gdn_decode"):
        return ["bfloat16", "float32"]
    return [None]


def host_rows(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-step host cost: N tiny kernels launched eagerly vs one graph of N replayed."""
    torch = _t()
    a = torch.ones(16, device=DEVICE)
    rows = []
    for n in job["kernels"]:
        def eager(n: int = n) -> None:
            for _ in range(n):
                a.add_(1e-6)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            eager()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            eager()
        for mode, fn in (("eager", eager), ("graph", g.replay)):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            walls = []
            for _ in range(15):
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                walls.append(((t1 - t0) * 1e3, (t2 - t0) * 1e3))
            launch = statistics.median(w[0] for w in walls)
            total = statistics.median(w[1] for w in walls)
            rows.append({"kernels": n, "mode": mode, "latency": total, "launch_ms": launch,
                         "kernel_source": "torch.add_ x N" if mode == "eager" else
                         "CUDAGraph.replay"})
        del g
    return rows


def run_job(job: Mapping[str, Any], timer: Timer | None, warm: bool,
            emit: Callable[[dict[str, Any]], None], deadline: float) -> None:
    torch = _t()
    if job["op"] == "host":
        if warm:
            return
        for r in host_rows(job):
            emit({"job": job["id"], "op": "host", **r})
        return
    for variant in variants(job):
        t0 = time.time()
        try:
            point_fn, source = setup(job, variant)
        except Exception as e:
            emit({"job": job["id"], "op": job["op"], "variant": variant,
                  "error": f"setup: {type(e).__name__}: {e}",
                  "trace": traceback.format_exc(limit=6)})
            continue
        for p in job_points(job):
            if time.time() > deadline:
                emit({"job": job["id"], "op": job["op"], "error": "deadline"})
                return
            try:
                fn = point_fn(p)
                if warm:
                    fn()
                    torch.cuda.synchronize()
                    continue
                assert timer is not None
                res = timer(fn, graph=job["op"] not in NO_GRAPH)
                emit({"job": job["id"], "op": job["op"], "variant": variant,
                      "point": p, "kernel_source": source, **res})
            except Exception as e:
                torch.cuda.synchronize()
                emit({"job": job["id"], "op": job["op"], "variant": variant, "point": p,
                      "error": f"{type(e).__name__}: {e}"[:500],
                      "trace": traceback.format_exc(limit=4)[-1500:]})
            finally:
                fn = None  # type: ignore[assignment]
        del point_fn
        torch.cuda.empty_cache()
        if warm:
            emit({"job": job["id"], "op": job["op"], "variant": variant, "warm_s":
                  round(time.time() - t0, 2)})


def select(jobs: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    out = [j for j in jobs if j["priority"] <= args.priority]
    if args.only:
        ops = set(args.only.split(","))
        out = [j for j in out if j["op"] in ops or
               f"{j['op']}/{j.get('fmt', '')}" in ops]
    if args.skip:
        skip = set(args.skip.split(","))
        out = [j for j in out if j["op"] not in skip and
               f"{j['op']}/{j.get('fmt', '')}" not in skip]
    if args.smoke:  # the first job of every op/format, at its first and middle point
        firsts: dict[str, dict[str, Any]] = {}
        for j in out:
            firsts.setdefault(f"{j['op']}/{j.get('fmt', '')}", j)
        out = []
        for j in firsts.values():
            j = dict(j)
            for key in ("ms", "tokens", "points", "batch", "kernels"):
                if key in j and len(j[key]) > 2:
                    j[key] = [j[key][0], j[key][len(j[key]) // 2]]
            out.append(j)
    if args.shard:
        i, n = (int(v) for v in args.shard.split("/"))
        out = [j for k, j in enumerate(out) if k % n == i]
    return out


def dry_run(jobs: list[dict[str, Any]]) -> None:
    from collections import Counter

    c: Counter[str] = Counter()
    for j in jobs:
        c[j["op"] + ("/" + j["fmt"] if "fmt" in j else "")] += len(job_points(j)) * \
            len(variants(j))
    for k in sorted(c):
        print(f"{k:28s} {c[k]:6d}")
    print(f"total points: {sum(c.values())}")


def check(jobs: list[dict[str, Any]]) -> int:
    """On a CPU: build every job's first point with vLLM's call signatures bound, not run."""
    global CHECK, DEVICE, BF16, FP8
    import torch

    CHECK, DEVICE = True, "cpu"
    import types

    # the FA3 extension is CUDA-only: a stand-in lets the interface module import here
    sys.modules.setdefault("vllm.vllm_flash_attn._vllm_fa3_C",
                           types.ModuleType("vllm.vllm_flash_attn._vllm_fa3_C"))
    BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
    fails = 0
    seen: set[str] = set()
    for job in jobs:
        key = job["op"] + "/" + str(job.get("fmt", ""))
        if key in seen or job["op"] == "host":
            continue
        seen.add(key)
        small = _shrink(job)
        try:
            if job["op"] == "gemm" and job["fmt"] != "bf16":
                _check_gemm_imports(job["fmt"])
                print(f"ok    {key} (imports; kernel classes need CUDA)")
                continue
            for variant in variants(small):
                point_fn, src = setup(small, variant)
                fn = point_fn(job_points(small)[0])
                fn()
            print(f"ok    {key} ({src})")
        except Exception as e:
            fails += 1
            print(f"FAIL  {key}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
    for line in sorted(set(CHECKED)):
        print("  bound", line)
    return 1 if fails else 0


def _check_gemm_imports(fmt: str) -> None:
    if fmt.startswith("fp8_block"):
        from vllm.model_executor.kernels.linear.scaled_mm.cutlass import (  # noqa: F401
            CutlassFp8BlockScaledMMKernel,
        )
        from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import (  # noqa: F401
            DeepGemmFp8BlockScaledMMKernel,
        )
        from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
            FP8ScaledMMLinearLayerConfig,
        )
        from vllm.model_executor.layers.quantization.utils.quant_utils import (
            kFp8Dynamic128Sym,
            kFp8Static128BlockSym,
        )
        from vllm.utils.deep_gemm import DeepGemmQuantScaleFMT  # noqa: F401

        FP8ScaledMMLinearLayerConfig(
            weight_quant_key=kFp8Static128BlockSym, activation_quant_key=kFp8Dynamic128Sym,
            weight_shape=(256, 256), input_dtype=BF16, out_dtype=BF16)
    elif fmt in ("fp8_tensor", "fp8_channel"):
        from vllm.model_executor.kernels.linear import init_fp8_linear_kernel
        from vllm.model_executor.layers.quantization.utils.quant_utils import (  # noqa: F401
            kFp8DynamicTensorSym,
            kFp8DynamicTokenSym,
            kFp8StaticChannelSym,
            kFp8StaticTensorSym,
        )

        inspect.signature(init_fp8_linear_kernel).bind(
            activation_quant_key=None, weight_quant_key=None, input_dtype=BF16,
            out_dtype=BF16, weight_shape=(1, 1))
    elif fmt == "w4a16_machete":
        from vllm import _custom_ops as ops
        from vllm.scalar_type import scalar_types

        inspect.signature(ops.machete_prepack_B).bind(None, a_type=BF16,
                                                      b_type=scalar_types.uint4b8,
                                                      group_scales_type=BF16)
        inspect.signature(ops.machete_mm).bind(a=None, b_q=None, b_type=scalar_types.uint4b8,
                                               b_group_scales=None, b_group_size=128)
    elif fmt.endswith("marlin"):
        from vllm.model_executor.layers.quantization.utils.marlin_utils import (
            apply_gptq_marlin_linear,
            marlin_make_empty_g_idx,  # noqa: F401
            marlin_make_workspace_new,  # noqa: F401
        )
        from vllm.scalar_type import scalar_types

        inspect.signature(apply_gptq_marlin_linear).bind(
            input=None, weight=None, weight_scale=None, weight_zp=None, g_idx=None,
            g_idx_sort_indices=None, workspace=None, wtype=scalar_types.uint8b128,
            output_size_per_partition=1, input_size_per_partition=1, is_k_full=True)


def _shrink(job: Mapping[str, Any]) -> dict[str, Any]:
    """A CPU-sized copy of a job (the same parameters, few small points)."""
    j = dict(job)
    for key in ("ms", "tokens", "batch"):
        if key in j:
            j[key] = [4]
    if "points" in j:
        j["points"] = [[2, 64]]
    if j["op"] == "moe":
        j["experts"], j["hidden"], j["inter"] = min(j["experts"], 8), 256, 128
    if j["op"] in ("embed", "sampler"):
        j["vocab"] = 512
    return j


def main(argv: list[str] | None = None) -> int:
    global BF16, FP8
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=Path, default=HERE / "jobs.json")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--phase", choices=("warm", "measure"), default="measure")
    ap.add_argument("--shard", help="I/N: every N-th job starting at I")
    ap.add_argument("--priority", type=int, default=9, help="highest priority number run")
    ap.add_argument("--only", help="comma list of ops or op/fmt")
    ap.add_argument("--skip", help="comma list of ops or op/fmt")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds, then stop")
    ap.add_argument("--smoke", action="store_true",
                    help="one job per op/format, two points each (a first look)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    jobs = json.loads(args.jobs.read_text())["jobs"]
    todo = select(jobs, args)
    if args.dry_run:
        dry_run(todo)
        return 0
    if args.check:
        return check(todo)
    import torch

    BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
    torch.manual_seed(0)
    deadline = time.time() + args.budget
    out = args.out.open("a") if args.out else sys.stdout
    prov = provenance(args.jobs)
    prov.update(phase=args.phase, shard=args.shard, priority=args.priority, only=args.only)
    out.write(json.dumps(prov) + "\n")
    out.flush()

    def emit(row: dict[str, Any]) -> None:
        out.write(json.dumps(row) + "\n")
        out.flush()

    timer = None if args.phase == "warm" else Timer()
    t0 = time.time()
    for i, job in enumerate(todo):
        tj = time.time()
        run_job(job, timer, args.phase == "warm", emit, deadline)
        print(f"[{time.time() - t0:6.0f} s] {i + 1}/{len(todo)} job {job['id']} {job['op']}"
              f" {job.get('fmt', '')} {time.time() - tj:.1f} s", flush=True)
        if time.time() > deadline:
            print("budget spent", flush=True)
            break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
