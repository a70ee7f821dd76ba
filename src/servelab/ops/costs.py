"""Operator latencies read from table sets: each lookup names its table, kernel and how the
number was read (measured shape, interpolated, scaled from a neighbouring shape, or
extrapolated).

Which kernel an op runs is vLLM 0.26.0's choice on Hopper, read from its source:

* BF16 linear: ``torch.nn.functional.linear`` (``UnquantizedLinearMethod``);
* FP8 128x128 block: ``DeepGemmFp8BlockScaledMMKernel`` first when FlashInfer is absent
  (``vllm/model_executor/kernels/linear/__init__.py``, ``_POSSIBLE_FP8_BLOCK_KERNELS``:
  FlashInferFp8DeepGEMMDynamicBlockScaledKernel, DeepGemmFp8BlockScaledMMKernel,
  CutlassFp8BlockScaledMMKernel, ...), CUTLASS where DeepGEMM was not measured;
* FP8 per-tensor / per-channel: the kernel ``init_fp8_linear_kernel`` picked on the device
  (CUTLASS on Hopper: Marlin FP8 needs ``VLLM_TEST_FORCE_FP8_MARLIN`` at capability >= 89);
* W4A16 (GPTQ/compressed-tensors int4): ``MacheteLinearKernel`` (``_POSSIBLE_KERNELS``:
  CutlassW4A8, Machete, AllSpark, Marlin, ...; Machete needs capability 90), Marlin beside;
* fused MoE: vLLM's Triton ``fused_experts`` (BF16; FP8 128x128 block), uniform routing;
* attention: FlashAttention 3 (``vllm_flash_attn``), paged KV.

Pure: table sets in, :class:`Lookup` values out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.errors import UsageError
from servelab.ops.interp import Read, interp1, interp2, series
from servelab.ops.tables import TableSet

#: servelab's weight formats -> (table dtype, kernels in vLLM 0.26's order of preference).
GEMM_KERNELS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "bf16": ("bfloat16", ("torch.nn.functional.linear",)),
    "fp8-block": ("fp8_block", ("DeepGemmFp8BlockScaledMMKernel",
                                "CutlassFp8BlockScaledMMKernel")),
    "fp8-channel": ("fp8_channel", ("CutlassFP8ScaledMMLinearKernel",)),
    "fp8-tensor": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
    "w4a16": ("w4a16", ("MacheteLinearKernel", "MarlinLinearKernel")),
    "w8a16": ("w8a16", ("MarlinLinearKernel",)),
}
#: MoE formats -> table dtype (kernel: the first row's kernel_source of that dtype).
MOE_DTYPES: Mapping[str, str] = {"bf16": "bfloat16", "fp8-block": "fp8_block"}


@dataclass(frozen=True)
class Lookup:
    """One operator's latency (ms) and where it came from."""

    ms: float
    table: str
    kernel: str
    how: str  # "measured", "interpolated", "scaled", "extrapolated"
    note: str = ""

    @property
    def extrapolated(self) -> bool:
        return self.how == "extrapolated"


def expected_experts(experts: int, topk: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens touch when each picks ``topk`` of ``experts``
    uniformly at random: ``E * (1 - (1 - k/E)^T)``."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


def _how(r: Read, exact: bool) -> str:
    if r.extrapolated:
        return "extrapolated"
    return "measured" if exact else "interpolated"


class Costs:
    """Latency lookups over one or more table sets (the first that has an op wins)."""

    def __init__(self, sets: Sequence[TableSet]) -> None:
        if not sets:
            raise UsageError("no operator table set to read costs from")
        self.sets = tuple(sets)
        self._cache: dict[tuple[Any, ...], Any] = {}

    @property
    def label(self) -> str:
        return "; ".join(s.provenance.label() for s in self.sets)

    def _rows(self, table: str) -> list[tuple[TableSet, Mapping[str, Any]]]:
        key = ("rows", table)
        if key not in self._cache:
            self._cache[key] = [(s, r) for s in self.sets for r in s.table(table).rows
                                if r.get("latency") is not None]
        return self._cache[key]  # type: ignore[no-any-return]

    def _index(self, table: str, key_cols: tuple[str, ...], x_col: str
               ) -> dict[tuple[Any, ...], tuple[str, dict[float, float]]]:
        """``{key values: (set key, {x: latency})}``, the first set per key."""
        ck = ("index", table, key_cols, x_col)
        if ck not in self._cache:
            idx: dict[tuple[Any, ...], tuple[str, dict[float, float]]] = {}
            for s, r in self._rows(table):
                k = tuple(r.get(c) for c in key_cols)
                entry = idx.setdefault(k, (s.key, {}))
                if entry[0] == s.key:
                    entry[1].setdefault(float(r[x_col]), float(r["latency"]))
            self._cache[ck] = idx
        return self._cache[ck]  # type: ignore[no-any-return]

    # --- GEMM ------------------------------------------------------------------------

    def gemm(self, m: int, n: int, k: int, fmt: str) -> Lookup:
        """A linear layer of weight ``[n, k]`` over ``m`` tokens, stored as ``fmt``."""
        if fmt not in GEMM_KERNELS:
            raise UsageError(f"no GEMM kernel known for weight format {fmt!r}")
        dtype, kernels = GEMM_KERNELS[fmt]
        idx = self._index("gemm", ("gemm_dtype", "kernel_source", "n", "k"), "m")
        for kernel in kernels:
            hit = idx.get((dtype, kernel, n, k))
            if hit:
                xs, ys = series(hit[1])
                r = interp1(xs, ys, m)
                return Lookup(r.ms, f"{hit[0]}/gemm", kernel, _how(r, m in hit[1]), r.note)
        for kernel in kernels:
            shapes = [(kk[2], kk[3]) for kk in idx if kk[0] == dtype and kk[1] == kernel]
            if not shapes:
                continue
            n0, k0 = min(shapes, key=lambda s: (math.log(s[0] / n)) ** 2 +
                         (math.log(s[1] / k)) ** 2)
            src, pts = idx[(dtype, kernel, n0, k0)]
            xs, ys = series(pts)
            r = interp1(xs, ys, m)
            return Lookup(r.ms * (n * k) / (n0 * k0), f"{src}/gemm", kernel,
                          "extrapolated" if r.extrapolated else "scaled",
                          f"scaled from the measured {n0}x{k0} by n*k" +
                          (f"; {r.note}" if r.note else ""))
        raise UsageError(f"no {dtype} GEMM measurement in {self.label}")

    # --- fused MoE -------------------------------------------------------------------

    def moe(self, tokens: int, experts: int, topk: int, hidden: int, inter: int,
            fmt: str) -> Lookup:
        """Routed experts of one layer over ``tokens`` tokens, uniform routing."""
        dtype = MOE_DTYPES.get(fmt)
        if dtype is None:
            raise UsageError(f"no fused-MoE table for {fmt} experts in {self.label} (measured: "
                             f"{', '.join(sorted(MOE_DTYPES.values()))})")
        idx = self._index("moe", ("moe_dtype", "num_experts", "topk", "hidden_size",
                                  "inter_size", "kernel_source"), "num_tokens")
        cands = [(kk, v) for kk, v in idx.items() if kk[0] == dtype]
        if not cands:
            raise UsageError(f"no {dtype} fused-MoE measurement in {self.label}")
        exact = [(kk, v) for kk, v in cands if kk[1:5] == (experts, topk, hidden, inter)]
        if exact:
            kk, (src, pts) = exact[0]
            xs, ys = series(pts)
            r = interp1(xs, ys, tokens)
            return Lookup(r.ms, f"{src}/moe", str(kk[5]), _how(r, tokens in pts), r.note)
        # nearest expert shape; scale by the weights the step touches (decode) or its work
        kk, (src, pts) = min(cands, key=lambda c: (math.log(c[0][3] * c[0][4] /
                                                            (hidden * inter))) ** 2 +
                             (math.log(c[0][1] / experts)) ** 2 +
                             (math.log(c[0][2] / topk)) ** 2)
        xs, ys = series(pts)
        r = interp1(xs, ys, tokens)
        e0, k0, h0, i0 = kk[1], kk[2], kk[3], kk[4]
        touched = expected_experts(experts, topk, tokens) / max(
            expected_experts(e0, k0, tokens), 1e-9)
        ratio = (hidden * inter) / (h0 * i0) * touched
        return Lookup(r.ms * ratio, f"{src}/moe", str(kk[5]),
                      "extrapolated" if r.extrapolated else "scaled",
                      f"scaled from the measured E={e0} top-{k0} {h0}x{i0} by weights "
                      "touched")

    # --- attention -------------------------------------------------------------------

    def _attn_grids(self, table: str, a_col: str, b_col: str
                    ) -> dict[tuple[Any, ...], tuple[str, dict[tuple[float, float], float]]]:
        """``{(heads, kv heads, head dim, window, sinks, kv dtype, kernel): (set key,
        {(a, b): latency})}`` of an attention table (built once per table)."""
        ck = ("attn", table, a_col, b_col)
        if ck not in self._cache:
            keyed: dict[tuple[Any, ...], tuple[str, dict[tuple[float, float], float]]] = {}
            for s, row in self._rows(table):
                kk = (row.get("num_heads"), row.get("num_key_value_heads"),
                      row.get("head_dim"), row.get("window_size") or 0, bool(row.get("sinks")),
                      row.get("kv_cache_dtype") or "bfloat16", row.get("kernel_source"))
                e = keyed.setdefault(kk, (s.key, {}))
                if e[0] == s.key and row.get("batch_size") is not None:
                    e[1].setdefault((float(row[a_col]), float(row[b_col])),
                                    float(row["latency"]))
            self._cache[ck] = keyed
        return self._cache[ck]  # type: ignore[no-any-return]

    def _attn(self, table: str, a_col: str, b_col: str, a: float, b: float, hq: int,
              hkv: int, d: int, window: int, sinks: bool) -> Lookup:
        keyed = self._attn_grids(table, a_col, b_col)
        want = (hq, hkv, d, window or 0, sinks, "bfloat16")
        exact = [(kk, v) for kk, v in keyed.items() if kk[:6] == want]
        scale, note = 1.0, ""
        if exact:
            kk, (src, grid) = exact[0]
        else:
            cands = [(kk, v) for kk, v in keyed.items() if kk[5] == "bfloat16" and
                     bool(kk[4]) == sinks and (kk[3] > 0) == (window > 0)] or \
                [(kk, v) for kk, v in keyed.items() if kk[5] == "bfloat16"]
            if not cands:
                raise UsageError(f"no {table} measurement in {self.label}")
            kk, (src, grid) = min(cands, key=lambda c: (math.log(
                int(c[0][0] or 1) * int(c[0][2] or 1) / (hq * d))) ** 2 + (math.log(
                    int(c[0][1] or 1) * int(c[0][2] or 1) / (hkv * d))) ** 2)
            nq, nkv, hd = int(kk[0] or 1), int(kk[1] or 1), int(kk[2] or 1)
            # decode reads the KV (kv heads x head dim); prefill computes over q heads
            scale = (hkv * d) / (nkv * hd) if table == "generation_attention" else \
                (hq * d) / (nq * hd)
            note = f"scaled from the measured {kk[0]}/{kk[1]} heads x {kk[2]}"
        rd = interp2(grid, a, b)
        exact_pt = (float(a), float(b)) in grid
        how = "extrapolated" if rd.extrapolated else (
            "scaled" if note else ("measured" if exact_pt else "interpolated"))
        return Lookup(rd.ms * scale, f"{src}/{table}", str(kk[6]), how,
                      "; ".join(x for x in (note, rd.note) if x))

    def attn_decode(self, batch: int, context: int, hq: int, hkv: int, d: int,
                    window: int = 0, sinks: bool = False) -> Lookup:
        """One decode attention call: ``batch`` sequences of ``context`` cached tokens."""
        return self._attn("generation_attention", "batch_size", "step", batch, context, hq,
                          hkv, d, window, sinks)

    def attn_prefill(self, new: int, prefix: int, hq: int, hkv: int, d: int,
                     window: int = 0, sinks: bool = False) -> Lookup:
        """Prefill attention of one sequence: ``new`` tokens over ``prefix`` cached."""
        return self._attn("context_attention", "isl", "prefix", new, prefix, hq, hkv, d,
                          window, sinks)

    # --- linear attention, Mamba2 ----------------------------------------------------

    def _ssm(self, table: str, key: Mapping[str, Any], phase: str, x: int) -> Lookup:
        x_col = "batch_size" if phase == "generation" else "num_tokens"
        cols = ("phase", *key.keys())
        idx = self._index(table, cols, x_col)
        want = (phase, *key.values())
        hit = idx.get(want)
        if hit is None:
            raise UsageError(f"no {table} {phase} measurement for {dict(key)} in "
                             f"{self.label}")
        xs, ys = series(hit[1])
        r = interp1(xs, ys, x)
        src = str(next((rw.get("kernel_source") for s, rw in self._rows(table)
                        if s.key == hit[0] and rw.get("phase") == phase), table))
        return Lookup(r.ms, f"{hit[0]}/{table}", src, _how(r, x in hit[1]), r.note)

    def gdn(self, phase: str, x: int, hk: int, dk: int, hv: int, dv: int, conv: int,
            state_dtype: str) -> Lookup:
        """Gated DeltaNet core: ``generation`` over a batch, ``context`` over tokens."""
        return self._ssm("gdn", {"num_k_heads": hk, "head_k_dim": dk, "num_v_heads": hv,
                                 "head_v_dim": dv, "d_conv": conv,
                                 "state_dtype": state_dtype}, phase, x)

    def mamba(self, phase: str, x: int, heads: int, hd: int, groups: int, state: int,
              conv: int) -> Lookup:
        """Mamba2 mixer core (conv + SSM)."""
        return self._ssm("mamba", {"num_heads": heads, "head_dim": hd, "n_groups": groups,
                                   "d_state": state, "d_conv": conv}, phase, x)

    # --- small ops -------------------------------------------------------------------

    def elementwise(self, op: str, tokens: int, *, width: int | None = None,
                    heads: int | None = None, head_dim: int | None = None,
                    experts: int | None = None, topk: int | None = None) -> Lookup:
        """A memory-bound op over ``tokens`` rows; the nearest measured row width, scaled
        by width when not measured."""
        ck = ("elementwise", op)
        if ck not in self._cache:
            self._cache[ck] = [(s, r) for s, r in self._rows("elementwise")
                               if r.get("op_name") == op]
        rows: list[tuple[TableSet, Mapping[str, Any]]] = self._cache[ck]
        if not rows:
            raise UsageError(f"no {op} measurement in {self.label}")

        def size(r: Mapping[str, Any]) -> float:
            if op in ("rope", "kv_write", "qk_norm"):
                return float((r.get("heads") or 1) * (r.get("head_dim") or 1))
            if op == "router":
                return float(r.get("num_experts") or 1)
            return float(r.get("width") or 1)

        want = float((heads or 1) * (head_dim or 1)) if op in ("rope", "kv_write",
                                                               "qk_norm") else \
            float(experts or 1) if op == "router" else float(width or 1)
        shapes: dict[float, tuple[str, dict[float, float]]] = {}
        for s, row in rows:
            e = shapes.setdefault(size(row), (s.key, {}))
            if e[0] == s.key:
                e[1].setdefault(float(row["num_tokens"]), float(row["latency"]))
        w0 = min(shapes, key=lambda w: abs(math.log(w / want)))
        src, pts = shapes[w0]
        xs, ys = series(pts)
        rd = interp1(xs, ys, tokens)
        kernel = str(rows[0][1].get("kernel_source"))
        if w0 == want:
            return Lookup(rd.ms, f"{src}/elementwise", kernel, _how(rd, tokens in pts),
                          rd.note)
        return Lookup(rd.ms * want / w0, f"{src}/elementwise", kernel,
                      "extrapolated" if rd.extrapolated else "scaled",
                      f"scaled by row width from the measured {w0:g}")

    def sampler(self, batch: int, vocab: int, mode: str = "greedy") -> Lookup:
        """Sampling ``batch`` tokens over ``vocab`` logits."""
        idx = self._index("sampler", ("mode", "vocab"), "batch_size")
        cands = [kk for kk in idx if kk[0] == mode]
        if not cands:
            raise UsageError(f"no {mode} sampler measurement in {self.label}")
        kk = min(cands, key=lambda c: abs(math.log(c[1] / vocab)))
        src, pts = idx[kk]
        xs, ys = series(pts)
        r = interp1(xs, ys, batch)
        scale = vocab / kk[1]
        return Lookup(r.ms * scale, f"{src}/sampler", "vllm_sampler",
                      _how(r, batch in pts) if scale == 1 else "scaled", r.note)

    def host(self, kernels: int, mode: str) -> Lookup:
        """Host time to issue ``kernels`` launches eagerly, or one replay of a graph of
        them (``launch_ms``: the host's time until the call returns, not the device's)."""
        pts: dict[float, float] = {}
        src = ""
        for s, row in self._rows("host"):
            if row.get("mode") == mode and row.get("launch_ms") is not None:
                if not src:
                    src = s.key
                if s.key == src:
                    pts.setdefault(float(row["kernels"]), float(row["launch_ms"]))
        if not pts:
            raise UsageError(f"no {mode} host-launch measurement in {self.label}")
        xs, ys = series(pts)
        rd = interp1(xs, ys, kernels)
        return Lookup(rd.ms, f"{src}/host", mode, _how(rd, kernels in pts), rd.note)
