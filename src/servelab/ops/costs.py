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
from dataclasses import dataclass, field
from typing import Any, Protocol

from servelab.errors import UsageError
from servelab.ops.interp import Read, Rows, grid_rows, interp1, interp2, series
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
class KernelChoice:
    """Which measured kernel each operator reads on one GPU with one engine version, in the
    engine's order of preference (the first kernel the tables measured wins).

    ``gemm``: weight format -> (table dtype, kernels); ``moe``: expert format -> (table dtype,
    kernels; empty: whichever the table has); ``attention``: the decode/prefill attention
    ``kernel_source`` in order (empty: whichever the table has first). ``strict``: refuse a
    GEMM or MoE read below the smallest token count its series measured (a table whose
    small-m rows were dropped as unusable must not be held at its first kept row), a GEMM
    shape the measured grid does not bracket, a MoE expert shape not measured (no scaling
    from a neighbour), and an attention head dimension not measured (head counts are
    scaled: decode by KV heads, prefill by query heads). ``source``: where the order comes
    from."""

    gemm: Mapping[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=lambda: dict(GEMM_KERNELS))
    moe: Mapping[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=lambda: {k: (v, ()) for k, v in MOE_DTYPES.items()})
    attention: tuple[str, ...] = ()
    moe_balanced: bool = False
    """The MoE table's rows spread each step's tokens evenly over the experts
    (AIConfigurator's ``balanced``: every expert touched as soon as tokens x top-k reach the
    expert count), where servelab assumes uniform random routing (fewer distinct experts:
    ``expected_experts``): a row is then read at the token count whose even spread touches
    as many experts as the step's tokens do at random (the weights read are the same; the
    compute, small at those counts, is that of fewer tokens)."""
    attention_sinks: tuple[str, ...] = ()
    """The attention kernels for a model with attention sinks (gpt-oss), where the engine
    picks another backend for them; empty: ``attention``."""
    strict: bool = False
    source: str = "vLLM 0.26.0 on Hopper (servelab.ops.costs)"


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


class CostSource(Protocol):
    """What :func:`servelab.ops.step.step_time` reads: one latency per operator call, each
    naming where it came from (measured tables, or a roofline times a fitted efficiency)."""

    @property
    def label(self) -> str: ...

    def gemm(self, m: int, n: int, k: int, fmt: str) -> Lookup: ...

    def moe(self, tokens: int, experts: int, topk: int, hidden: int, inter: int,
            fmt: str) -> Lookup: ...

    def attn_decode(self, batch: int, context: int, hq: int, hkv: int, d: int,
                    window: int = 0, sinks: bool = False) -> Lookup: ...

    def attn_prefill(self, new: int, prefix: int, hq: int, hkv: int, d: int,
                     window: int = 0, sinks: bool = False) -> Lookup: ...

    def gdn(self, phase: str, x: int, hk: int, dk: int, hv: int, dv: int, conv: int,
            state_dtype: str) -> Lookup: ...

    def mamba(self, phase: str, x: int, heads: int, hd: int, groups: int, state: int,
              conv: int) -> Lookup: ...

    def elementwise(self, op: str, tokens: int, *, width: int | None = None,
                    heads: int | None = None, head_dim: int | None = None,
                    experts: int | None = None, topk: int | None = None) -> Lookup: ...

    def sampler(self, batch: int, vocab: int, mode: str = "greedy") -> Lookup: ...

    def host(self, kernels: int, mode: str) -> Lookup: ...


class SmallOpSource(Protocol):
    """Where :class:`Costs` reads the ops its tables lack (norms, rotary, activation, cache
    write, router, embedding; the sampler; the host's launches)."""

    @property
    def label(self) -> str: ...

    def elementwise(self, op: str, tokens: int, *, width: int | None = None,
                    heads: int | None = None, head_dim: int | None = None,
                    experts: int | None = None, topk: int | None = None) -> Lookup: ...

    def sampler(self, batch: int, vocab: int, mode: str = "greedy") -> Lookup: ...

    def host(self, kernels: int, mode: str) -> Lookup: ...


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
    """Latency lookups over one or more table sets (the first that has an op wins).

    ``kernels``: which kernel each op reads (default: vLLM 0.26.0 on Hopper, servelab's H200
    tables). ``small_ops``: where the norms, rotary, activation, KV write, router, embedding,
    sampler and host launches come from when no table set measured them (AIConfigurator
    times none of them): another cost source, named in each lookup. Without it, an op no
    table measured is refused."""

    def __init__(self, sets: Sequence[TableSet], kernels: KernelChoice | None = None,
                 small_ops: SmallOpSource | None = None) -> None:
        if not sets:
            raise UsageError("no operator table set to read costs from")
        self.sets = tuple(sets)
        self.kernels = kernels or KernelChoice()
        self.small_ops = small_ops
        self._cache: dict[tuple[Any, ...], Any] = {}

    @property
    def label(self) -> str:
        out = "; ".join(s.provenance.label() for s in self.sets)
        if self.small_ops is not None:
            out += f"; small ops: {self.small_ops.label}"
        return out

    def _read(self, xs: list[float], ys: list[float], x: float, what: str) -> Read:
        """``interp1``, refusing a read below the first point when ``strict``."""
        if self.kernels.strict and x < xs[0]:
            raise UsageError(f"{what}: no usable measurement at {x:g} tokens in "
                             f"{self.label} (its smallest is {xs[0]:g}); not extrapolated")
        return interp1(xs, ys, x)

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
        """A linear layer of weight ``[n, k]`` over ``m`` tokens, stored as ``fmt``: the
        measured shape; else a shape inside a measured (n, k) grid, interpolated; else (not
        ``strict``) the nearest measured shape scaled by n*k."""
        if fmt not in self.kernels.gemm:
            raise UsageError(f"no GEMM kernel known for weight format {fmt!r} "
                             f"({self.kernels.source})")
        dtype, kernels = self.kernels.gemm[fmt]
        idx = self._index("gemm", ("gemm_dtype", "kernel_source", "n", "k"), "m")
        hits = [(kernel, idx[(dtype, kernel, n, k)]) for kernel in kernels
                if (dtype, kernel, n, k) in idx]
        # the most preferred kernel whose measured tokens cover m; else one measured below
        # m (read above its largest, linearly); else (not strict) the most preferred
        covering = [h for h in hits if min(h[1][1]) <= m <= max(h[1][1])] or \
            [h for h in hits if m > max(h[1][1])] or \
            ([] if self.kernels.strict else hits[:1])
        if covering:
            kernel, (src, pts) = covering[0]
            xs, ys = series(pts)
            r = interp1(xs, ys, m)
            return Lookup(r.ms, f"{src}/gemm", kernel, _how(r, m in pts), r.note)
        for kernel in kernels:
            grid = self._gemm_grid(idx, dtype, kernel, m, n, k)
            if grid is not None:
                return grid
        if self.kernels.strict:
            raise UsageError(f"no {dtype} GEMM measurement of {n}x{k} at {m} tokens "
                             f"({', '.join(kernels)}) in {self.label}")
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

    def _gemm_grid(self, idx: Mapping[tuple[Any, ...], tuple[str, dict[float, float]]],
                   dtype: str, kernel: str, m: int, n: int, k: int) -> Lookup | None:
        """A shape inside a measured (n, k) grid (AIConfigurator's tables are one): the
        bracketing shapes read at ``m``, interpolated in (log n, log k, log latency); beyond
        the grid's largest n or k, the edge read scaled by n or k (extrapolated). None: the
        grid does not bracket the shape with every corner measured."""
        memo = ("gemm-grid", id(idx), dtype, kernel)  # the grid's axes, read once per kernel
        if memo not in self._cache:
            self._cache[memo] = (
                sorted({int(kk[2]) for kk in idx if kk[0] == dtype and kk[1] == kernel}),
                sorted({int(kk[3]) for kk in idx if kk[0] == dtype and kk[1] == kernel}))
        ns, ks = self._cache[memo]
        if len(ns) < 2 or len(ks) < 2:
            return None
        below = n < ns[0] or k < ks[0]

        def bracket(v: int, grid: list[int]) -> tuple[int, int, float]:
            if v >= grid[-1]:
                return grid[-1], grid[-1], v / grid[-1]
            if v <= grid[0]:  # a smaller GEMM is read at the grid's smallest: an upper bound
                return grid[0], grid[0], 1.0
            return max(g for g in grid if g <= v), min(g for g in grid if g >= v), 1.0

        n0, n1, sn = bracket(n, ns)
        k0, k1, sk = bracket(k, ks)
        reads: dict[tuple[int, int], Read] = {}
        src = ""
        for nn in (n0, n1):
            for kk in (k0, k1):
                hit = idx.get((dtype, kernel, nn, kk))
                if hit is None or (self.kernels.strict and m < min(hit[1])):
                    return None
                src = hit[0]
                xs, ys = series(hit[1])
                reads[(nn, kk)] = interp1(xs, ys, m)

        def lerp(v: float, lo: int, hi: int, a: float, b: float) -> float:
            if hi == lo:
                return a
            t = (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return math.exp(math.log(a) + t * (math.log(b) - math.log(a)))

        nv, kv = min(max(n, n0), n1), min(max(k, k0), k1)
        at_k0 = lerp(nv, n0, n1, reads[(n0, k0)].ms, reads[(n1, k0)].ms)
        at_k1 = lerp(nv, n0, n1, reads[(n0, k1)].ms, reads[(n1, k1)].ms)
        ms = lerp(kv, k0, k1, at_k0, at_k1) * sn * sk
        beyond = sn > 1 or sk > 1
        ext = beyond or any(r.extrapolated for r in reads.values())
        note = f"interpolated over the measured (n, k) grid {n0}-{n1} x {k0}-{k1}"
        if beyond:
            note += f"; scaled by n*k beyond the grid's largest {ns[-1]}x{ks[-1]}"
        if below:
            note += f"; below the grid's smallest {ns[0]}x{ks[0]}: read there (an upper bound)"
        return Lookup(ms, f"{src}/gemm", kernel, "extrapolated" if ext else "interpolated",
                      note)

    # --- fused MoE -------------------------------------------------------------------

    def moe(self, tokens: int, experts: int, topk: int, hidden: int, inter: int,
            fmt: str) -> Lookup:
        """Routed experts of one layer over ``tokens`` tokens, uniform routing."""
        choice = self.kernels.moe.get(fmt)
        if choice is None:
            measured = ", ".join(sorted({d for d, _ in self.kernels.moe.values()}))
            raise UsageError(f"no fused-MoE table for {fmt} experts in {self.label} (measured: "
                             f"{measured})")
        dtype, prefer = choice
        idx = self._index("moe", ("moe_dtype", "num_experts", "topk", "hidden_size",
                                  "inter_size", "kernel_source"), "num_tokens")
        cands = [(kk, v) for kk, v in idx.items() if kk[0] == dtype and
                 (not prefer or kk[5] in prefer)]
        if not cands:
            raise UsageError(f"no {dtype} fused-MoE measurement"
                             f"{' of ' + ', '.join(prefer) if prefer else ''} in {self.label}")
        if prefer:  # the most preferred kernel that was measured, its shapes only
            first = min(prefer.index(str(c[0][5])) for c in cands)
            cands = [c for c in cands if prefer.index(str(c[0][5])) == first]
        exact = [(kk, v) for kk, v in cands if kk[1:5] == (experts, topk, hidden, inter)]
        if exact:
            kk, (src, pts) = exact[0]
            xs, ys = series(pts)
            read_at: float = tokens
            note = ""
            if self.kernels.moe_balanced and tokens * topk < 4 * experts:
                # the evenly spread rows at the token count touching as many experts
                read_at = max(1.0, expected_experts(experts, topk, tokens) / topk)
                note = (f"balanced-routing rows read at {read_at:.1f} tokens (as many experts "
                        f"touched as {tokens} tokens at random)")
            r = self._read(xs, ys, read_at, f"{dtype} fused MoE ({kk[5]})")
            return Lookup(r.ms, f"{src}/moe", str(kk[5]),
                          _how(r, read_at in pts) if not note else "interpolated",
                          "; ".join(x for x in (r.note, note) if x))
        if self.kernels.strict:
            raise UsageError(f"no {dtype} fused-MoE measurement of E={experts} top-{topk} "
                             f"{hidden}x{inter} in {self.label}; a neighbouring expert shape "
                             "is not scaled")
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

    def _attn(self, table: str, a_col: str, b_col: str, a: float, b: float, hq: int,
              hkv: int, d: int, window: int, sinks: bool) -> Lookup:
        kk, src, grid, rows, scale, note, sink_note = self._attn_series(
            table, a_col, b_col, hq, hkv, d, window, sinks)
        prefixes = {bj for _, bj in grid}
        if table == "context_attention" and b > 0 and prefixes == {0.0}:
            # a chunk of a new tokens over b cached, from a table that timed prefills with no
            # prefix: causal attention over b + a tokens less that over the first b (the same
            # query-key pairs: a b + a^2 / 2), never less than the chunk alone
            whole = interp2(grid, a + b, 0.0, rows=rows)
            first = interp2(grid, b, 0.0, rows=rows)
            alone = interp2(grid, a, 0.0, rows=rows)
            rd = Read(max(whole.ms - first.ms, alone.ms),
                      whole.extrapolated or first.extrapolated,
                      "; ".join(x for x in (f"{a:g} tokens over {b:g} cached: the prefill of "
                                            f"{a + b:g} less that of {b:g}", whole.note)
                                if x))
        else:
            rd = interp2(grid, a, b, rows=rows)
        exact_pt = (float(a), float(b)) in grid
        how = "extrapolated" if rd.extrapolated else (
            "scaled" if note else ("measured" if exact_pt else "interpolated"))
        return Lookup(rd.ms * scale, f"{src}/{table}", str(kk[6]), how,
                      "; ".join(x for x in (note, rd.note, sink_note) if x))

    def _attn_series(self, table: str, a_col: str, b_col: str, hq: int, hkv: int, d: int,
                     window: int, sinks: bool
                     ) -> tuple[tuple[Any, ...], str, dict[tuple[float, float], float], Rows,
                                float, str, str]:
        """The measured series an attention call of this shape is read from (its key,
        source, grid and the grid split into rows, scale and notes), chosen once per shape:
        a simulation reads the same shape at thousands of points."""
        memo = ("attn-series", table, a_col, b_col, hq, hkv, d, window, sinks)
        if memo in self._cache:
            return self._cache[memo]  # type: ignore[no-any-return]
        ck = ("attn", table, a_col, b_col)
        if ck not in self._cache:
            built: dict[tuple[Any, ...], tuple[str, dict[tuple[float, float], float]]] = {}
            for s, row in self._rows(table):
                kk = (row.get("num_heads"), row.get("num_key_value_heads"),
                      row.get("head_dim"), row.get("window_size") or 0,
                      bool(row.get("sinks")), row.get("kv_cache_dtype") or "bfloat16",
                      row.get("kernel_source"))
                e = built.setdefault(kk, (s.key, {}))
                if e[0] == s.key and row.get("batch_size") is not None:
                    e[1].setdefault((float(row[a_col]), float(row[b_col])),
                                    float(row["latency"]))
            self._cache[ck] = built
        keyed: dict[tuple[Any, ...], tuple[str, dict[tuple[float, float], float]]] = \
            self._cache[ck]
        prefer = (self.kernels.attention_sinks or self.kernels.attention) if sinks else \
            self.kernels.attention
        if prefer:
            chosen = next((kern for kern in prefer if any(kk[6] == kern for kk in keyed)),
                          None)
            if chosen is None:
                raise UsageError(f"no {table} measurement of {', '.join(prefer)} in "
                                 f"{self.label}")
            keyed = {kk: v for kk, v in keyed.items() if kk[6] == chosen}
        sink_note = ""
        if sinks and not any(kk[4] for kk in keyed):
            # AIConfigurator's attention tables have no sinks column: read them without
            # (a sink adds one logit per head and query; servelab's H200 tables measured
            # both: benchmarks/ops/aic_h200.py reports the ratio)
            sinks, sink_note = False, "attention sinks not in these tables: read without"
        want = (hq, hkv, d, window or 0, sinks, "bfloat16")
        exact = [(kk, v) for kk, v in keyed.items() if kk[:6] == want]
        scale, note = 1.0, ""
        if exact:
            kk, (src, grid) = exact[0]
        else:
            cands = [(kk, v) for kk, v in keyed.items() if kk[5] == "bfloat16" and
                     bool(kk[4]) == sinks and (kk[3] > 0) == (window > 0)] or \
                [(kk, v) for kk, v in keyed.items() if kk[5] == "bfloat16"]
            if self.kernels.strict:
                cands = [c for c in cands if c[0][2] == d]
            if not cands:
                raise UsageError(f"no {table} measurement"
                                 f"{f' at head dim {d}' if self.kernels.strict else ''} "
                                 f"in {self.label}")
            kk, (src, grid) = min(cands, key=lambda c: (math.log(
                int(c[0][0] or 1) * int(c[0][2] or 1) / (hq * d))) ** 2 + (math.log(
                    int(c[0][1] or 1) * int(c[0][2] or 1) / (hkv * d))) ** 2)
            nq, nkv, hd = int(kk[0] or 1), int(kk[1] or 1), int(kk[2] or 1)
            # decode reads the KV (kv heads x head dim); prefill computes over q heads
            scale = (hkv * d) / (nkv * hd) if table == "generation_attention" else \
                (hq * d) / (nq * hd)
            note = f"scaled from the measured {kk[0]}/{kk[1]} heads x {kk[2]}"
        out = (kk, src, grid, grid_rows(grid), scale, note, sink_note)
        self._cache[memo] = out
        return out

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
        note = ""
        if hit is None and key.get("state_dtype") is not None:
            # a table that does not say its state dtype (AIConfigurator's)
            hit = idx.get((phase, *(None if k == "state_dtype" else v
                                    for k, v in key.items())))
            note = "state dtype not stated by the table"
        if hit is None:
            raise UsageError(f"no {table} {phase} measurement for {dict(key)} in "
                             f"{self.label}")
        xs, ys = series(hit[1])
        r = interp1(xs, ys, x)
        src = str(next((rw.get("kernel_source") for s, rw in self._rows(table)
                        if s.key == hit[0] and rw.get("phase") == phase), table))
        return Lookup(r.ms, f"{hit[0]}/{table}", src, _how(r, x in hit[1]),
                      "; ".join(n for n in (r.note, note) if n))

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
        if not rows and self.small_ops is not None:
            return self.small_ops.elementwise(op, tokens, width=width, heads=heads,
                                              head_dim=head_dim, experts=experts, topk=topk)
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
        if not cands and self.small_ops is not None:
            return self.small_ops.sampler(batch, vocab, mode)
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
        if not pts and self.small_ops is not None:
            return self.small_ops.host(kernels, mode)
        if not pts:
            raise UsageError(f"no {mode} host-launch measurement in {self.label}")
        xs, ys = series(pts)
        rd = interp1(xs, ys, kernels)
        return Lookup(rd.ms, f"{src}/host", mode, _how(rd, kernels in pts), rd.note)
