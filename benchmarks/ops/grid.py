"""The shape grid servelab measures operator costs over, built HERE from servelab's own model
knowledge (no GPU, no vLLM): every GEMM, fused-MoE, attention, Gated DeltaNet and Mamba2
shape of the families servelab reads, at the published dimensions of its presets and of the
builds it has run on the H200 (benchmarks/gpu/gen_checkpoint.py's ARCHS).

    .venv/bin/python benchmarks/ops/grid.py -o benchmarks/ops/jobs.json [--summary]

Each job is one operator at one shape over a list of token counts (or batch x context
points); ``priority`` 0 marks the shapes of builds with stored H200 runs (measured first),
1 the other presets. benchmarks/ops/measure.py runs the jobs on the device.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "gpu"))

from gen_checkpoint import ARCHS  # noqa: E402

from servelab.ops.model import StepModel, step_model  # noqa: E402
from servelab.synth.replica import TEXT_LINEARS, QuantLayout  # noqa: E402
from servelab.synth.replica_presets import preset_config, preset_names  # noqa: E402

#: GEMM token counts (M): decode batches, chunked-prefill chunks, whole prompts.
GEMM_M = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
          2048, 3072, 4096, 6144, 8192, 12288, 16384)
#: lm_head runs only on the tokens that sample (one per sequence in a step).
LM_HEAD_M = tuple(m for m in GEMM_M if m <= 1024)
#: Fused-MoE token counts.
MOE_T = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: Decode attention: batch x context (tokens already cached per sequence).
DEC_B = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEC_CTX = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
DEC_MAX_TOKENS = 1 << 21  # batch x context cap: KV of one layer stays a few GiB
#: Prefill attention: new tokens x cached prefix (chunked prefill), one sequence.
PRE_Q = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PRE_PREFIX = (0, 2048, 8192, 32768)
#: Elementwise ops: tokens.
ELT_T = (1, 4, 16, 64, 256, 1024, 4096, 16384)
#: Gated DeltaNet / Mamba2: prefill tokens (one sequence) and decode batches.
SSM_PRE_T = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384)
SSM_DEC_B = (1, 2, 4, 8, 16, 32, 64, 128, 256)

#: Formats measured for every GEMM shape, and those for the run builds' shapes only.
GEMM_FMTS_ALL = ("bf16", "fp8_block_cutlass", "fp8_tensor")
GEMM_FMTS_RUNS = ("fp8_block_deepgemm", "fp8_channel", "w4a16_machete", "w4a16_marlin",
                  "w8a16_marlin")


def models() -> list[tuple[str, int, Mapping[str, Any]]]:
    """(name, priority, config): the run builds' architectures first, then the presets."""
    out: list[tuple[str, int, Mapping[str, Any]]] = []
    for name, cfg in ARCHS.items():
        out.append((name, 0, json.loads(json.dumps(cfg))))
    for name in preset_names():
        if name in ARCHS:
            continue
        out.append((name, 1, json.loads(json.dumps(preset_config(name)))))
    return out


def _step(name: str, cfg: Mapping[str, Any]) -> StepModel:
    return step_model(cfg, QuantLayout("fp8-block", TEXT_LINEARS), name=name)


def jobs() -> list[dict[str, Any]]:
    """Every job, deduplicated, lowest priority number first."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(key: tuple[Any, ...], job: dict[str, Any]) -> None:
        old = seen.get(key)
        if old is None:
            seen[key] = job
        else:
            old["priority"] = min(old["priority"], job["priority"])
            old["models"] = sorted(set(old["models"]) | set(job["models"]))

    for name, prio, cfg in models():
        m = _step(name, cfg)
        gemms: set[tuple[int, int, str]] = set()
        for layer in m.layers:
            for g in layer.gemms:
                gemms.add((g.n, g.k, "router" if g.role == "router" else "linear"))
        for n, k, kind in sorted(gemms):
            fmts = ("bf16",) if kind == "router" else GEMM_FMTS_ALL + (
                GEMM_FMTS_RUNS if prio == 0 else ())
            for fmt in fmts:
                add(("gemm", n, k, fmt), dict(op="gemm", n=n, k=k, fmt=fmt, ms=list(GEMM_M),
                                             priority=prio, models=[name]))
        lm = m.lm_head
        for fmt in ("bf16",):
            add(("gemm", lm.n, lm.k, fmt, "lm"),
                dict(op="gemm", n=lm.n, k=lm.k, fmt=fmt, ms=list(LM_HEAD_M), priority=prio,
                     models=[name]))
        for layer in m.layers:
            if layer.moe is not None:
                e = layer.moe
                # MXFP4 experts (gpt-oss) run vLLM's OAI Triton kernels on Hopper, whose
                # swizzled weight layout this grid does not build: not measured
                fmts = ["bf16", "fp8_block"] if e.fmt != "mxfp4" else []
                for fmt in fmts:
                    add(("moe", e.experts, e.topk, e.hidden, e.inter, fmt),
                        dict(op="moe", experts=e.experts, topk=e.topk, hidden=e.hidden,
                             inter=e.inter, fmt=fmt, tokens=list(MOE_T), priority=prio,
                             models=[name]))
                add(("router", e.experts, e.topk),
                    dict(op="router", experts=e.experts, topk=e.topk, tokens=list(ELT_T),
                         priority=prio, models=[name]))
            a = layer.attention
            if a is not None:
                window = a.window or a.chunk or 0
                key = (layer.num_heads, a.num_kv_heads, a.head_dim, window, a.sinks)
                dec = [[b, c] for b in DEC_B for c in DEC_CTX if b * c <= DEC_MAX_TOKENS]
                pre = [[q, p] for q in PRE_Q for p in PRE_PREFIX if q + p <= 40960]
                base = dict(hq=layer.num_heads, hkv=a.num_kv_heads, d=a.head_dim,
                            window=window, sinks=a.sinks, priority=prio, models=[name])
                add(("attn_decode", *key), dict(op="attn_decode", points=dec, **base))
                add(("attn_prefill", *key), dict(op="attn_prefill", points=pre, **base))
                add(("kv_write", a.num_kv_heads, a.head_dim),
                    dict(op="kv_write", hkv=a.num_kv_heads, d=a.head_dim, tokens=list(ELT_T),
                         priority=prio, models=[name]))
                add(("rope", layer.num_heads, a.num_kv_heads, a.head_dim),
                    dict(op="rope", hq=layer.num_heads, hkv=a.num_kv_heads, d=a.head_dim,
                         tokens=list(ELT_T), priority=prio, models=[name]))
                if layer.qk_norm:
                    add(("qk_norm", layer.num_heads + a.num_kv_heads, a.head_dim),
                        dict(op="qk_norm", heads=layer.num_heads + a.num_kv_heads,
                             d=a.head_dim, tokens=list(ELT_T), priority=prio,
                             models=[name]))
            if layer.gdn is not None:
                g = layer.gdn
                key2 = (g.num_key_heads, g.num_value_heads, g.key_head_dim, g.value_head_dim,
                        g.conv_kernel)
                base2 = dict(hk=g.num_key_heads, hv=g.num_value_heads, dk=g.key_head_dim,
                             dv=g.value_head_dim, conv=g.conv_kernel, priority=prio,
                             models=[name])
                add(("gdn_prefill", *key2),
                    dict(op="gdn_prefill", tokens=list(SSM_PRE_T), **base2))
                add(("gdn_decode", *key2), dict(op="gdn_decode", batch=list(SSM_DEC_B), **base2))
            if layer.mamba is not None:
                mb = layer.mamba
                key3 = (mb.num_heads, mb.head_dim, mb.n_groups, mb.state_size, mb.conv_kernel)
                base3 = dict(heads=mb.num_heads, hd=mb.head_dim, groups=mb.n_groups,
                             state=mb.state_size, conv=mb.conv_kernel,
                             inter=mb.intermediate_size, priority=prio, models=[name])
                add(("mamba_prefill", *key3),
                    dict(op="mamba_prefill", tokens=list(SSM_PRE_T), **base3))
                add(("mamba_decode", *key3),
                    dict(op="mamba_decode", batch=list(SSM_DEC_B), **base3))
            for g in layer.gemms:
                if g.name.endswith("gate_up_proj"):
                    add(("act", g.n // 2), dict(op="silu_mul", width=g.n // 2,
                                                tokens=list(ELT_T), priority=prio,
                                                models=[name]))
        add(("norm", m.hidden), dict(op="rms_norm", hidden=m.hidden, tokens=list(ELT_T),
                                     priority=prio, models=[name]))
        add(("sampler", m.vocab), dict(op="sampler", vocab=m.vocab,
                                       batch=[1, 4, 16, 64, 256], priority=prio,
                                       models=[name]))
        add(("embed", m.vocab, m.hidden), dict(op="embed", vocab=m.vocab, hidden=m.hidden,
                                               tokens=list(ELT_T), priority=prio,
                                               models=[name]))
    seen[("host",)] = dict(op="host", kernels=[1, 10, 100, 1000], priority=0, models=[])
    out = sorted(seen.values(), key=lambda j: (j["priority"], j["op"]))
    for i, j in enumerate(out):
        j["id"] = i
    return out


def points(job: Mapping[str, Any]) -> int:
    """How many measurements a job makes."""
    for key in ("ms", "tokens", "points", "batch", "kernels"):
        if key in job:
            n = len(job[key])
            return n * (2 if job["op"] == "host" else 1)
    raise KeyError(job["op"])


def summary(js: Iterable[Mapping[str, Any]]) -> str:
    from collections import Counter

    c: Counter[tuple[str, int]] = Counter()
    p: Counter[tuple[str, int]] = Counter()
    for j in js:
        c[(j["op"] + ("/" + j["fmt"] if "fmt" in j else ""), j["priority"])] += 1
        p[(j["op"] + ("/" + j["fmt"] if "fmt" in j else ""), j["priority"])] += points(j)
    lines = [f"{'op':32s} prio jobs points"]
    for key in sorted(c):
        lines.append(f"{key[0]:32s} {key[1]:4d} {c[key]:4d} {p[key]:6d}")
    lines.append(f"total: {sum(c.values())} jobs, {sum(p.values())} points")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-o", "--out", type=Path, default=HERE / "jobs.json")
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args(argv)
    js = jobs()
    args.out.write_text(json.dumps({"schema": "servelab.ops-jobs/1", "jobs": js}, indent=0))
    print(summary(js) if args.summary else f"{len(js)} jobs -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
