"""Pre-registration (issue 39): servelab's operator composition over AIConfigurator's tables
for vLLM builds on GPUs servelab has never run (H100, B200; GB200, RTX PRO 6000 server and
L40S where the build fits), committed BEFORE any published end-to-end measurement of these
builds on these GPUs is looked up. AIConfigurator's own predictions for the same points are
written beside (both tools' numbers fixed before the comparison).

    .venv/bin/python benchmarks/prereg/ops_aic_gpus.py predict OUT.json
    .venv/bin/python benchmarks/prereg/ops_aic_gpus.py read OUT.json BUILD GPU KIND X
    .venv/bin/python benchmarks/prereg/ops_aic_gpus.py at BUILD GPU KIND X [X ...]

``predict`` writes, per (build, GPU) with one GPU holding the weights (TP = 1):

* ``decode``: single-stream time per output token at a context of C tokens (one decode step,
  batch 1), C in :data:`DECODE_CTX`, with its interval;
* ``prefill``: single-request time to first token for a P-token prompt (vLLM's 8,192-token
  step budget: a longer prompt is prefilled in chunks, each over the ones before), P in
  :data:`PREFILL`, with its interval;
* ``batch``: one decode step of B sequences at context 1,024 (:data:`BATCH`);
* ``serving``: a closed loop of N clients at (prompt, output) tokens (servelab.ops.serving:
  TPOT, TTFT, request latency, output tok/s), N in :data:`CONCURRENCY`, for :data:`SHAPES`;
* ``aiconfigurator``: AIConfigurator 0.12.0's own ``predict_decode_latency(1, C, 2)`` /
  ``predict_prefill_latency(1, P)`` for the same build (benchmarks/ops/aic_predict.py);
* ``refused``: what the tables lack (named), where servelab gives no prediction.

A published point between grid values is read from the committed file by ``read``
(log-log interpolation between the two bracketing grid points, said as such), or computed
exactly by ``at`` run in a worktree of the pre-registration commit (the same code and
interval widths; the serving model at a published prompt / output / concurrency).
The serving interval: TPOT and throughput take the decode width, TTFT the prefill width.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

from gen_checkpoint import ARCHS  # noqa: E402

from servelab.errors import ServelabError  # noqa: E402
from servelab.ops import aic  # noqa: E402
from servelab.ops.aicgpu import costs_for, predict, transfer  # noqa: E402
from servelab.ops.costs import Costs  # noqa: E402
from servelab.ops.model import StepModel, step_model  # noqa: E402
from servelab.ops.serving import BUDGET, chunks, closed_loop  # noqa: E402
from servelab.ops.step import StepShape  # noqa: E402
from servelab.synth.replica import (  # noqa: E402
    LINEARS,
    TEXT_LINEARS,
    QuantLayout,
    replica_tensors,
)
from servelab.synth.replica_presets import preset_config  # noqa: E402

GPUS = ("h100", "b200", "gb200", "rtx-pro-6000", "l40s")
DECODE_CTX = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
PREFILL = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
BATCH = (1, 8, 16, 32, 64, 128, 256)
BATCH_CTX = 1024
CONCURRENCY = (1, 4, 8, 16, 32, 64, 128, 256)
SHAPES = ((128, 128), (1024, 128), (1024, 1024), (2048, 2048), (8192, 1024))

#: Qwen3-8B's published config (huggingface.co/Qwen/Qwen3-8B: 36 layers, hidden 4,096,
#: intermediate 12,288, 32 heads, 8 KV heads of 128, vocabulary 151,936, untied), the
#: qwen3-4b ARCHS entry's keys at those dimensions.
QWEN3_8B = {**ARCHS["qwen3-4b"], "hidden_size": 4096, "intermediate_size": 12288,
            "tie_word_embeddings": False}


@dataclass(frozen=True)
class Build:
    """A published checkpoint as an operator model."""

    name: str
    hf: str
    config: Callable[[], Mapping[str, Any]]
    layout: QuantLayout | None
    aic_gemm: str | None  # AIConfigurator's quant modes for its own prediction
    aic_moe: str | None

    def model(self) -> StepModel:
        return step_model(dict(self.config()), self.layout, name=self.name)

    def weight_bytes(self) -> int:
        plan = replica_tensors(dict(self.config()), self.layout or QuantLayout())
        return sum(t.nbytes for t in plan.tensors
                   if ".mtp." not in t.name and not t.name.startswith(("mtp.", "model.visual",
                                                                       "visual.")))


def _arch(name: str) -> Callable[[], Mapping[str, Any]]:
    return lambda: json.loads(json.dumps(ARCHS[name]))


FP8_BLOCK = QuantLayout("fp8-block", TEXT_LINEARS)
FP8_CHANNEL = QuantLayout("fp8-channel", LINEARS)

BUILDS: tuple[Build, ...] = (
    Build("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", _arch("llama-3.1-8b"), None,
          None, None),
    Build("llama-3.1-8b-fp8", "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8 (FP8 per-channel "
          "weights, dynamic per-token activations)", _arch("llama-3.1-8b"), FP8_CHANNEL,
          "fp8", None),
    Build("llama-3.1-70b-fp8", "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 / "
          "Llama-3.3-70B-Instruct FP8-dynamic (same dimensions)", _arch("llama-3.1-70b"),
          FP8_CHANNEL, "fp8", None),
    Build("qwen3-8b", "Qwen/Qwen3-8B", lambda: dict(QWEN3_8B), None, None, None),
    Build("qwen3-8b-fp8", "Qwen/Qwen3-8B-FP8 (128x128 block)", lambda: dict(QWEN3_8B),
          FP8_BLOCK, "fp8_block", None),
    Build("qwen3-32b", "Qwen/Qwen3-32B", _arch("qwen3-32b"), None, None, None),
    Build("qwen3-32b-fp8", "Qwen/Qwen3-32B-FP8 (128x128 block)", _arch("qwen3-32b"),
          FP8_BLOCK, "fp8_block", None),
    Build("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", _arch("qwen3-30b-a3b"), None, None, None),
    Build("qwen3-30b-a3b-fp8", "Qwen/Qwen3-30B-A3B-FP8 (128x128 block)",
          _arch("qwen3-30b-a3b"), FP8_BLOCK, "fp8_block", "fp8_block"),
    Build("gpt-oss-20b", "openai/gpt-oss-20b (MXFP4 experts)",
          lambda: dict(preset_config("gpt-oss-20b")), None, None, "w4a16_mxfp4"),
    Build("gpt-oss-120b", "openai/gpt-oss-120b (MXFP4 experts)",
          lambda: dict(preset_config("gpt-oss-120b")), None, None, "w4a16_mxfp4"),
    Build("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", lambda: dict(preset_config("qwen2.5-7b")),
          None, None, None),
    Build("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3",
          lambda: dict(preset_config("mistral-7b")), None, None, None),
    Build("gemma-3-27b", "google/gemma-3-27b-it", lambda: dict(preset_config("gemma-3-27b")),
          None, None, None),
)


def memory_bytes(gpu: str) -> float:
    """The GPU's memory as AIConfigurator's system file states it."""
    import yaml  # a dependency of the aiconfigurator extra

    f = aic.data_root().parent / f"{aic.SYSTEMS[gpu]}.yaml"
    return float(yaml.safe_load(f.read_text())["gpu"]["mem_capacity"])


def _pred(ms: float, lo: float, hi: float) -> dict[str, float]:
    return {"ms": round(ms, 4), "low_ms": round(lo, 4), "high_ms": round(hi, 4),
            "tok_s": round(1e3 / ms, 3)}


def one(b: Build, gpu: str, costs: Costs) -> dict[str, Any]:
    tr = transfer()
    model = b.model()
    out: dict[str, Any] = {"build": b.name, "checkpoint": b.hf, "gpu": gpu,
                           "weights_gib": round(b.weight_bytes() / 2**30, 2)}
    wdec, wpre = tr.half_width_log["decode"], tr.half_width_log["prefill"]

    def step_ms(shape: StepShape) -> float:  # a loaded server's step: the per-step overhead
        return predict(model, gpu, shape, costs, tr, overhead="decode").ms

    try:
        dec = {}
        for c in DECODE_CTX:
            p = predict(model, gpu, StepShape.decode(1, c), costs, tr)
            dec[str(c)] = _pred(p.ms, p.low_ms, p.high_ms)
        out["decode"] = dec
        out["decode_notes"] = list(predict(model, gpu, StepShape.decode(1, 1024), costs,
                                           tr).notes)
        pre = {}
        for n in PREFILL:
            ms = sum(predict(model, gpu, StepShape.prefill(t, prefix), costs, tr).ms
                     for t, prefix in chunks(n, BUDGET))
            # the per-request overhead once, not once per chunk
            ms -= (len(chunks(n, BUDGET)) - 1) * tr.overhead_ms["prefill"]
            pre[str(n)] = {**_pred(ms, ms * math.exp(-wpre), ms * math.exp(wpre)),
                           "tok_s": round(n / ms * 1e3, 1)}
        out["prefill"] = pre
        out["batch"] = {str(bb): _pred(*(lambda p: (p.ms, p.low_ms, p.high_ms))(
            predict(model, gpu, StepShape.decode(bb, BATCH_CTX), costs, tr)))
            for bb in BATCH}
        serving = []
        for prompt, outp in SHAPES:
            for n in CONCURRENCY:
                s = closed_loop(step_ms, n, prompt, outp,
                                request_ms=tr.overhead_ms["prefill"])
                serving.append({
                    "concurrency": n, "prompt": prompt, "output": outp,
                    "tpot_ms": round(s.tpot_ms, 3), "ttft_ms": round(s.ttft_ms, 2),
                    "latency_ms": round(s.latency_ms, 1),
                    "output_tok_s": round(s.output_tok_s, 1),
                    "tpot_low_ms": round(s.tpot_ms * math.exp(-wdec), 3),
                    "tpot_high_ms": round(s.tpot_ms * math.exp(wdec), 3),
                    "kv_tokens": s.kv_tokens})
        out["serving"] = serving
        out["serving_notes"] = [
            *s.notes[1:], "per-request host time: the H200-fitted prefill overhead "
            f"({tr.overhead_ms['prefill']:.1f} ms), once per request; the decode step's "
            f"engine overhead ({tr.overhead_ms['decode']:+.3f} ms) is a batch-1 figure"]
    except (ServelabError, NotImplementedError) as e:
        out["refused"] = str(e).split(" in aiconfigurator")[0]
    return out


def aic_own(gpu: str, builds: list[Build]) -> dict[str, Any]:
    req: dict[str, Any] = {"system": aic.SYSTEMS[gpu], "backend": "vllm", "builds": []}
    for b in builds:
        pts = [{"kind": "decode", "length": c} for c in DECODE_CTX] + \
            [{"kind": "prefill", "length": n} for n in PREFILL]
        req["builds"].append({"name": b.name, "config": dict(b.config()),
                              "gemm_quant": b.aic_gemm, "moe_quant": b.aic_moe, "points": pts})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ops" / "aic_predict.py")],
                          input=json.dumps(req), capture_output=True, text=True, timeout=3600,
                          check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-400:]}
    res = json.loads(proc.stdout)
    out: dict[str, Any] = {"version": res.get("aiconfigurator_core")}
    for r in res["results"]:
        if "error" in r:
            out[r["name"]] = {"error": r["error"][:300]}
            continue
        d: dict[str, dict[str, float]] = {"decode": {}, "prefill": {}}
        for q in r["points"]:
            d[q["kind"]][str(q["length"])] = round(float(q["ms"]), 4)
        out[r["name"]] = d
    return out


def predict_all(path: Path) -> int:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                           capture_output=True, text=True, check=True).stdout.strip()
    tr = transfer()
    doc: dict[str, Any] = {
        "schema": "servelab.prereg.ops/1",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "servelab_commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "command": f".venv/bin/python benchmarks/prereg/ops_aic_gpus.py predict {path.name}",
        "engine": "vLLM (AIConfigurator 0.12.0's vLLM 0.24.0 tables)",
        "transfer": {"overhead_ms": tr.overhead_ms, "host_floor_ms": tr.host_floor_ms,
                     "half_width_log": tr.half_width_log, "source": tr.source},
        "grids": {"decode_ctx": DECODE_CTX, "prefill": PREFILL, "batch": BATCH,
                  "batch_ctx": BATCH_CTX, "concurrency": CONCURRENCY, "shapes": SHAPES,
                  "budget": BUDGET},
        "predictions": [],
        "aiconfigurator": {},
        "not_fitting": [],
    }
    for gpu in GPUS:
        costs = costs_for(gpu)
        mem = memory_bytes(gpu)
        fits = []
        for b in BUILDS:
            w = b.weight_bytes()
            if w > 0.92 * mem:
                doc["not_fitting"].append({"build": b.name, "gpu": gpu,
                                           "weights_gib": round(w / 2**30, 1),
                                           "memory_gib": round(mem / 2**30, 1)})
                continue
            fits.append(b)
            r = one(b, gpu, costs)
            doc["predictions"].append(r)
            d = r.get("decode", {}).get("1024")
            print(f"{gpu:13s} {b.name:20s} " + (f"decode@1K {d['tok_s']:.1f} tok/s" if d else
                                               f"refused: {r.get('refused', '')[:100]}"),
                  flush=True)
        doc["aiconfigurator"][gpu] = aic_own(gpu, fits)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def _interp(grid: Mapping[str, Any], x: float, key: str) -> tuple[float, str]:
    xs = sorted((float(k), v) for k, v in grid.items())
    for (x0, v0), (x1, v1) in itertools.pairwise(xs):
        if x0 <= x <= x1:
            y0, y1 = float(v0[key] if isinstance(v0, dict) else v0), \
                float(v1[key] if isinstance(v1, dict) else v1)
            if x0 == x1 or x == x0:
                return y0, "grid point"
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0))), \
                f"log-log between {x0:g} and {x1:g}"
    raise SystemExit(f"{x} is outside the pre-registered grid {xs[0][0]:g}-{xs[-1][0]:g}")


def read(path: Path, build: str, gpu: str, kind: str, x: float) -> dict[str, Any]:
    """The pre-registered prediction for (build, gpu) of ``kind`` at ``x`` (decode context /
    prefill prompt / batch size)."""
    doc = json.loads(path.read_text())
    [r] = [r for r in doc["predictions"] if r["build"] == build and r["gpu"] == gpu]
    if "refused" in r:
        return {"refused": r["refused"]}
    ms, how = _interp(r[kind], x, "ms")
    lo, _ = _interp(r[kind], x, "low_ms")
    hi, _ = _interp(r[kind], x, "high_ms")
    out = {"ms": ms, "low_ms": lo, "high_ms": hi, "how": how}
    own = doc["aiconfigurator"].get(gpu, {}).get(build, {})
    if own.get(kind):
        out["aic_ms"], _ = _interp(own[kind], x, "")
    return out


def at(build: str, gpu: str, kind: str, xs: list[float]) -> dict[str, Any]:
    """The pre-registered model at a point off the grid, computed by the code of the
    checkout it runs in (run it in a worktree of the pre-registration commit):
    ``decode C``, ``prefill P``, ``batch B C`` or ``serving N P O``."""
    [b] = [b for b in BUILDS if b.name == build]
    costs = costs_for(gpu)
    tr = transfer()
    model = b.model()
    try:
        if kind == "decode":
            p = predict(model, gpu, StepShape.decode(1, int(xs[0])), costs, tr)
            return {"ms": p.ms, "low_ms": p.low_ms, "high_ms": p.high_ms}
        if kind == "batch":
            p = predict(model, gpu, StepShape.decode(int(xs[0]), int(xs[1])), costs, tr)
            return {"ms": p.ms, "low_ms": p.low_ms, "high_ms": p.high_ms}
        if kind == "prefill":
            n = int(xs[0])
            parts = chunks(n, BUDGET)
            ms = sum(predict(model, gpu, StepShape.prefill(t, prefix), costs, tr).ms
                     for t, prefix in parts) - (len(parts) - 1) * tr.overhead_ms["prefill"]
            w = tr.half_width_log["prefill"]
            return {"ms": ms, "low_ms": ms * math.exp(-w), "high_ms": ms * math.exp(w)}
        if kind == "serving":
            def step_ms(shape: StepShape) -> float:
                return predict(model, gpu, shape, costs, tr, overhead="decode").ms

            sv = closed_loop(step_ms, int(xs[0]), int(xs[1]), int(xs[2]),
                             request_ms=tr.overhead_ms["prefill"])
            wd, wp = tr.half_width_log["decode"], tr.half_width_log["prefill"]
            return {"tpot_ms": sv.tpot_ms, "ttft_ms": sv.ttft_ms,
                    "output_tok_s": sv.output_tok_s, "latency_ms": sv.latency_ms,
                    "tpot_low_ms": sv.tpot_ms * math.exp(-wd),
                    "tpot_high_ms": sv.tpot_ms * math.exp(wd),
                    "ttft_low_ms": sv.ttft_ms * math.exp(-wp),
                    "ttft_high_ms": sv.ttft_ms * math.exp(wp),
                    "output_tok_s_low": sv.output_tok_s * math.exp(-wd),
                    "output_tok_s_high": sv.output_tok_s * math.exp(wd)}
    except (ServelabError, NotImplementedError) as e:
        return {"refused": str(e).split(" in aiconfigurator")[0]}
    raise SystemExit(f"unknown kind {kind!r}")


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "predict":
        sys.exit(predict_all(Path(a[1])))
    if len(a) >= 5 and a[0] == "at":
        print(json.dumps(at(a[1], a[2], a[3], [float(x) for x in a[4:]])))
        sys.exit(0)
    if len(a) == 6 and a[0] == "read":
        print(json.dumps(read(Path(a[1]), a[2], a[3], a[4], float(a[5])), indent=1))
        sys.exit(0)
    sys.exit(__doc__)
