"""Pre-registration of servelab's predictions for builds it has not seen (issue 30).

Each :data:`POINTS` row is one published single-stream measurement of a build: llama.cpp's
llama-bench figures (its Apple-silicon scoreboard, the DGX Spark page) and vLLM figures for
gpt-oss on the DGX Spark, each with its URL. ``role`` says what the row is for once the data
enter servelab: ``calibration`` rows go into the priors table (src/servelab/predict/priors.toml);
``check`` rows never do: they are the held-out set whose errors RESULTS.md reports.

    .venv/bin/python benchmarks/prereg/builds.py predict OUT.json [--set S]  # plan every build now
    .venv/bin/python benchmarks/prereg/builds.py errors  OUT.json            # measured vs predicted
    .venv/bin/python benchmarks/prereg/builds.py rows VERSION [--set S]      # calibration rows

``--set`` picks a dated set of points (:data:`SETS`; default the first, 2026-12-04): each set
is pre-registered on its own, its predictions committed before its calibration rows enter.

``predict`` plans every build with the servelab of the working tree (``servelab plan --json
--no-store``: the shipped priors only, as a new user has them) from full-dimension header
replicas (servelab.synth.gguf_replica for the GGUF builds, ``servelab synth replica``'s
presets for the safetensors ones), and writes the predictions with the servelab commit, the
date and the command. The file is committed before the data enter the calibration.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

APPLE = (
    "https://github.com/ggml-org/llama.cpp/discussions/4167 (llama-bench, Llama-2-7B, -ngl 99; "
    "rows as quoted at https://openllmbenchmarks.com/8-key-factors-to-consider-when-choosing-"
    "between-apple-m1-ultra-800gb-48cores-and-apple-m2-max-400gb-30cores-for-ai.html)"
)
SPARK_LLAMACPP = (
    "https://jetsonhacks.com/wp-content/uploads/2025/10/spark-llamacpp-bench.html (llama.cpp "
    "b6767 5acd45546 on a DGX Spark, llama-bench -fa 1 -p 2048 -n 32 -ub 2048; the numbers of "
    "ggml-org/llama.cpp discussion #16578)"
)
SPARK_NVIDIA = (
    "https://site-one-liart-13.vercel.app/en/benchmarks/2026-05-24-dgx-spark-model-throughput "
    "(NVIDIA's 'How DGX Spark Performance Enables Intensive AI Tasks', ISL/OSL 2048/128, BS=1)"
)
SPARK_ARENA = (
    "https://github.com/spark-arena/recipe-registry/issues/17 (gpt-oss-120b on one DGX Spark: "
    "58.82 tok/s verified figure, 59.5 reproduced, vLLM TPOT)"
)
LMSYS_VIA = (
    "https://github.com/triton-inference-server/server/issues/8691 (quotes LMSYS: gpt-oss 20B "
    "on the Spark 2,053 tok/s prefill and 49.7 tok/s decode; second-hand)"
)
RTX4090_LLAMACPP = (
    "https://github.com/ggml-org/llama.cpp/pull/4766 (ggerganov's comment of 2024-01-10: "
    "llama-bench -ngl 99 on one GeForce RTX 4090, CodeLlama-7B F16 / Q8_0 / Q4_0 GGUF, sizes "
    "12.55 / 6.67 / 3.56 GiB; pp 512, tg 128)"
)
PRO6000_LLAMACPP = (
    "https://github.com/ggml-org/llama.cpp/pull/19053 (perf table, 'master' column: "
    "llama-bench on an RTX PRO 6000 Blackwell Max-Q Workstation Edition, gpt-oss 20B MXFP4 "
    "MoE, tg128; the 300 W Max-Q edition has the 600 W card's 96 GB and 1,792 GB/s)"
)
PRO6000_VLLM = (
    "https://www.millstoneai.com/inference-benchmark/gpt-oss-20b-mxfp4-1x-rtx-pro-6000-"
    "blackwell (Millstone AI, 2026-01-28: vLLM, openai/gpt-oss-20b MXFP4, 1x RTX Pro 6000 "
    "Blackwell 96GB, single request, 1,024 output tokens, no prompt caching or speculative "
    "decoding, full-precision KV cache: 'Generation Speed Single Request 250.0 tok/s (1K "
    "context) -> 105.5 tok/s (128K context)')"
)
CUDA_STREAMK = (
    "https://github.com/ggml-org/llama.cpp/pull/20586 (JohannesGaessler's perf table, "
    "'master' column: llama-bench on an RTX 4090 and an RTX 5090, llama 8B Q4_0 (4.33 GiB), "
    "pp512 at micro-batch sizes 1-512; micro-batch 1 is 512 single-token steps from an empty "
    "context, micro-batch 512 one 512-token prefill)"
)


@dataclass(frozen=True)
class Point:
    """One published measurement and what it is for."""

    build: str  # replica key (see replica())
    engine: str  # llamacpp | vllm
    hardware: str
    kind: str  # decode | prefill
    length: int  # decode: mean context of the timed tokens; prefill: prompt tokens
    measured_tok_s: float
    source: str
    role: str  # calibration | check


POINTS: tuple[Point, ...] = (
    # Apple M1 Ultra (48-core GPU): F16 and Q8_0 calibrate, Q4_0 is held out
    Point("llama2-7b-F16", "llamacpp", "m1-ultra", "decode", 64, 33.92, APPLE, "calibration"),
    Point("llama2-7b-F16", "llamacpp", "m1-ultra", "prefill", 512, 875.81, APPLE, "calibration"),
    Point("llama2-7b-Q8_0", "llamacpp", "m1-ultra", "decode", 64, 55.69, APPLE, "calibration"),
    Point("llama2-7b-Q8_0", "llamacpp", "m1-ultra", "prefill", 512, 783.45, APPLE, "calibration"),
    Point("llama2-7b-Q4_0", "llamacpp", "m1-ultra", "decode", 64, 74.93, APPLE, "check"),
    Point("llama2-7b-Q4_0", "llamacpp", "m1-ultra", "prefill", 512, 772.24, APPLE, "check"),
    # Apple M2 Max (30-core GPU): F16 and Q8_0 calibrate, Q4_0's prefill is held out
    Point("llama2-7b-F16", "llamacpp", "m2-max", "decode", 64, 24.16, APPLE, "calibration"),
    Point("llama2-7b-F16", "llamacpp", "m2-max", "prefill", 512, 600.46, APPLE, "calibration"),
    Point("llama2-7b-Q8_0", "llamacpp", "m2-max", "decode", 64, 39.97, APPLE, "calibration"),
    Point("llama2-7b-Q8_0", "llamacpp", "m2-max", "prefill", 512, 540.15, APPLE, "calibration"),
    Point("llama2-7b-Q4_0", "llamacpp", "m2-max", "prefill", 512, 537.6, APPLE, "check"),
    # DGX Spark, llama.cpp: gpt-oss-20b at three depths calibrates; the fourth depth and
    # NVIDIA's own figure for the same build are held out
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "decode", 16, 79.74,
          SPARK_LLAMACPP, "calibration"),
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "decode", 4112, 74.63,
          SPARK_LLAMACPP, "calibration"),
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "decode", 16400, 64.02,
          SPARK_LLAMACPP, "calibration"),
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "prefill", 2048, 3610.56,
          SPARK_LLAMACPP, "calibration"),
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "decode", 8208, 69.49,
          SPARK_LLAMACPP, "check"),
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "decode", 2112, 82.74,
          SPARK_NVIDIA, "check"),
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "dgx-spark", "prefill", 2048, 3670.42,
          SPARK_NVIDIA, "check"),
    # DGX Spark, vLLM: builds the shipped priors (three Qwen3.6 builds) have not seen
    Point("gpt-oss-120b", "vllm", "dgx-spark", "decode", 512, 58.82, SPARK_ARENA, "check"),
    Point("gpt-oss-20b", "vllm", "dgx-spark", "decode", 512, 49.7, LMSYS_VIA, "check"),
)

#: 2026-12-05: the GPUs people own (issue 30). Lengths as the 2026-12-04 set: a llama-bench
#: tg128 is decode at a mean context of 64 tokens, pp512 a 512-token prefill; a vLLM
#: single-request generation speed over 1,024 output tokens after a prompt of P tokens is
#: decode at a mean context of P + 512 (1K: 1,024 + 512; 128K: 128,000 + 512).
POINTS_2026_12_05: tuple[Point, ...] = (
    # RTX 4090, llama.cpp: CodeLlama-7B F16 and Q8_0 calibrate, Q4_0's prefill is held out
    # (a GGUF type with no row on that hardware, as on the Apple chips); Q4_0's tg128 is not
    # in the published table
    Point("codellama-7b-F16", "llamacpp", "rtx-4090", "decode", 64, 61.03,
          RTX4090_LLAMACPP, "calibration"),
    Point("codellama-7b-F16", "llamacpp", "rtx-4090", "prefill", 512, 11048.22,
          RTX4090_LLAMACPP, "calibration"),
    Point("codellama-7b-Q8_0", "llamacpp", "rtx-4090", "decode", 64, 98.13,
          RTX4090_LLAMACPP, "calibration"),
    Point("codellama-7b-Q8_0", "llamacpp", "rtx-4090", "prefill", 512, 7664.00,
          RTX4090_LLAMACPP, "calibration"),
    Point("codellama-7b-Q4_0", "llamacpp", "rtx-4090", "prefill", 512, 7979.85,
          RTX4090_LLAMACPP, "check"),
    # RTX PRO 6000, vLLM: gpt-oss-20b at a 1K prompt calibrates; the 128K prompt is held out
    # (what the depth term carries: the KV read of 12 full-attention layers at 128K)
    Point("gpt-oss-20b", "vllm", "rtx-pro-6000", "decode", 1536, 250.0,
          PRO6000_VLLM, "calibration"),
    Point("gpt-oss-20b", "vllm", "rtx-pro-6000", "decode", 128512, 105.5,
          PRO6000_VLLM, "check"),
    # RTX PRO 6000, llama.cpp: the same model's MXFP4_MOE GGUF (llama.cpp's own kernels)
    Point("gpt-oss-20b-MXFP4_MOE", "llamacpp", "rtx-pro-6000", "decode", 64, 352.58,
          PRO6000_LLAMACPP, "calibration"),
)

#: 2026-12-05b: two more points found after the first set's rows went in (pre-registered on
#: their own, against the priors table with those rows). The RTX 4090's Q4_0 decode is of a
#: model and a GGUF type the 4090's rows do not have (llama.cpp micro-batch 1 over 512
#: tokens: decode at a mean context of 256; llama-bench asks for logits of the last token
#: only, so 511 of those 512 steps skip the output matrix, 9 % of the file's bytes, which
#: servelab's decode counts); the RTX 5090's figure is its first.
POINTS_2026_12_05B: tuple[Point, ...] = (
    Point("llama3-8b-Q4_0", "llamacpp", "rtx-4090", "decode", 256, 193.09,
          CUDA_STREAMK, "check"),
    Point("llama3-8b-Q4_0", "llamacpp", "rtx-5090", "prefill", 512, 16136.64,
          CUDA_STREAMK, "calibration"),
)

#: servelab's own H200 runs of Qwen2.5-7B-shaped GGUFs (benchmarks/prereg/llamacpp_sets.py set
#: "h200", pre-registered in the calibration role): their run records were lost with the
#: device machine, so the figures are the ones `servelab run` printed (95 % CIs in the file).
H200_QWEN = ("servelab run on one H200, llama-server CUDA build (sm_90) of llama-cpp-python "
             "0.3.36's llama.cpp, 2026-12-05: the printed figures of "
             "benchmarks/gpu/results/llamacpp-h200-2026-12-05/call-2-output-qwen.txt "
             "(run records lost with the machine)")
POINTS_2026_12_05_H200: tuple[Point, ...] = tuple(
    Point(f"qwen2.5-coder-7b-{t}", "llamacpp", "h200", kind, n, v, H200_QWEN, "calibration")
    for t, kind, n, v in (
        ("F16", "decode", 512, 175.9), ("F16", "decode", 4096, 168.9),
        ("F16", "prefill", 512, 9785.0), ("F16", "prefill", 4096, 11659.0),
        ("Q4_K_M", "decode", 512, 235.2), ("Q4_K_M", "decode", 4096, 232.6),
        ("Q4_K_M", "prefill", 512, 6013.0), ("Q4_K_M", "prefill", 4096, 7150.0),
    )
)

#: The engine build each source names, where it names one (``rows`` takes the rest from
#: its VERSION argument).
ENGINE_VERSIONS = {
    RTX4090_LLAMACPP: "PR #4766 branch (2024-01-10)",
    PRO6000_LLAMACPP: "master of 2026-01-23 (PR #19053)",
    PRO6000_VLLM: "not stated (Millstone AI report of 2026-01-28)",
    CUDA_STREAMK: "master of PR #20586",
    H200_QWEN: "b0-llama-cpp-python-0.3.36",
}

#: Each dated set of pre-registered points (``--set``), the first the default.
SETS: dict[str, tuple[Point, ...]] = {"2026-12-04": POINTS, "2026-12-05": POINTS_2026_12_05,
                                      "2026-12-05b": POINTS_2026_12_05B,
                                      "2026-12-05-h200": POINTS_2026_12_05_H200}

#: The model family of each base model (the priors rows' ``family``).
FAMILIES = {"llama2-7b": "llama", "codellama-7b": "llama", "llama3-8b": "llama",
            "gpt-oss-20b": "gpt_oss", "qwen2.5-coder-7b": "qwen2"}


def base_model(build: str) -> str:
    """The base model of a build: a GGUF build's name less its file type
    (``gpt-oss-20b-MXFP4_MOE`` -> ``gpt-oss-20b``), a safetensors preset's name itself.
    Leave-one-model-out leaves out every build of a base model together."""
    from servelab.synth.gguf_replica import BUILDS

    for model in BUILDS:
        if build.startswith(model + "-"):
            return model
    return build


def replica(build: str, root: Path) -> Path:
    """Write the header replica of ``build`` under ``root`` (once) and return its path."""
    out = root / build
    if out.exists():
        return out
    model = base_model(build)
    if model != build:
        from servelab.synth.gguf_replica import BUILDS, write_replica

        ftype = build.removeprefix(model + "-")
        path = root / f"{build}.gguf"
        if not path.exists():
            write_replica(BUILDS[model][0], ftype, path)
        return path
    from servelab.synth.replica import write_replica
    from servelab.synth.replica_presets import preset_config, preset_layout

    write_replica(out, preset_config(build), preset_layout(build, None, ()))
    return out


def plan(p: Point, root: Path, priors: str | None) -> dict[str, Any]:
    """``servelab plan --json`` of ``p``'s build at its length; the matching point."""
    path = replica(p.build, root)
    cmd = [sys.executable, "-m", "servelab", "plan", str(path), "-H", p.hardware, "--json",
           "--no-store", "--prompt-lens", str(p.length), "--engine", p.engine]
    if p.engine == "llamacpp":
        cmd += ["-c", str(max(4096, p.length + 64))]
    else:
        cmd += ["--max-model-len", str(max(4096, p.length + 64))]
    if priors:
        cmd += ["--priors", priors]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode not in (0, 1):
        return {"error": (res.stderr or res.stdout).strip().splitlines()[-1:]}
    doc = json.loads(res.stdout)
    speed = doc["speed"]
    rows = speed["decode"] if p.kind == "decode" else speed["prefill"]
    key = "context_len" if p.kind == "decode" else "prompt_len"
    [row] = [r for r in rows if r[key] == p.length]
    fit = speed.get("decode_fit" if p.kind == "decode" else "prefill_fit") or {}
    return {
        "fitted_tok_s": fitted(p, doc, row, fit),
        "predicted_tok_s": row.get("predicted_tok_s"),
        "low": row.get("predicted_low"),
        "high": row.get("predicted_high"),
        "roofline_tok_s": row.get("roofline_tok_s"),
        "label": fit.get("label"),
        "kernel_path": (speed.get("kernel_path") or {}).get("name"),
    }


def plan_json(p: Point, root: Path, priors: str | None = None) -> dict[str, Any]:
    """The whole ``servelab plan --json`` document of ``p``'s build at its length."""
    path = replica(p.build, root)
    cmd = [sys.executable, "-m", "servelab", "plan", str(path), "-H", p.hardware, "--json",
           "--no-store", "--prompt-lens", str(p.length), "--engine", p.engine]
    cmd += (["-c", str(max(4096, p.length + 64))] if p.engine == "llamacpp"
            else ["--max-model-len", str(max(4096, p.length + 64))])
    if priors:
        cmd += ["--priors", priors]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def rows(version: str, points: tuple[Point, ...] = POINTS) -> int:
    """The calibration points as ``[[sample]]`` rows of the priors table, their costs from
    servelab's plan of each build's replica (tests/plan recompute them)."""
    from servelab.hardware.lookup import get_profile

    with tempfile.TemporaryDirectory() as tmp:
        for p in points:
            if p.role != "calibration":
                continue
            doc = plan_json(p, Path(tmp))
            speed, dims = doc["speed"], doc["dims"]
            layers = int(dims["num_layers"])
            base = base_model(p.build)  # "gpt-oss-20b-MXFP4_MOE" -> "gpt-oss-20b"
            row: dict[str, Any] = {
                # the base model: leave-one-model-out leaves out every GGUF type of it
                "model": base, "family": FAMILIES[base], "engine": p.engine,
                "engine_version": ENGINE_VERSIONS.get(p.source, version),
                "kernel_path": speed["kernel_path"]["name"],
                "compute": speed["compute_precision"], "hardware": p.hardware,
                "kind": p.kind, "length": p.length, "layers": layers,
                "expert_slots": layers * int(dims.get("num_experts") or 0),
                "platform": get_profile(p.hardware).platform,
            }
            if p.kind == "decode":
                [d] = [r for r in speed["decode"] if r["context_len"] == p.length]
                row |= {"bytes_read": int(d["bytes_per_token"]), "flops": 0.0}
            else:
                [f] = [r for r in speed["prefill"] if r["prompt_len"] == p.length]
                row |= {"bytes_read": int(f["bytes_read"]), "flops": float(f["flops"])}
                if f.get("expert_flops"):
                    row["expert_flops"] = float(f["expert_flops"])
            row |= {"tok_s": p.measured_tok_s, "source": p.source}
            print("\n[[sample]]")
            for k, v in row.items():
                print(f"{k} = {json.dumps(v)}")
    return 0


def fitted(p: Point, doc: dict[str, Any], row: dict[str, Any], fit: dict[str, Any]) -> float | None:
    """The fit's own point estimate for ``row``, printed by servelab or not: where a level
    holds one model, servelab prints no prediction (no interval), but its fit still says a
    speed, and the errors of that number say how far the level's form carries."""
    from servelab.predict.form import CONTEXT_ENGINES, TERMS, context_layers, features, row_seconds

    if not fit or fit.get("level") == "roofline":
        return None
    theta = [fit["coefficients"].get(t, 0.0) for t in TERMS[p.kind]]
    dims = doc["dims"]
    slots = int(dims["num_layers"]) * int(dims.get("num_experts") or 0)
    platform = doc["hardware"]["platform"]
    linear = int(dims.get("linear_attention_layers") or 0)
    if p.kind == "decode":
        # the decode context term is llama.cpp's (a fit from before it has no such coefficient)
        ctx = (context_layers(p.length, row["layers"], linear)
               if p.engine in CONTEXT_ENGINES and "s_per_context_layer" in fit["coefficients"]
               else 0.0)
        x = features("decode", row["bytes_per_token"], row["layers"], expert_slots=slots,
                     platform=platform, context_layers=ctx)
        return 1.0 / row_seconds(theta, x)
    x = features("prefill", row["bytes_read"], row["layers"], row["flops"],
                 expert_flops=row.get("expert_flops") or 0.0, expert_slots=slots,
                 platform=platform, eager=bool(row.get("eager")),
                 linear_layers=linear, prompt_tokens=p.length)
    return p.length / row_seconds(theta, x)


def predict(out: Path, priors: str | None, set_name: str = "2026-12-04") -> int:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in SETS[set_name]:
            rows.append({**asdict(p), **plan(p, Path(tmp), priors)})
            print(json.dumps(rows[-1])[:300], flush=True)
    doc = {
        "schema": "servelab.prereg/1",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "servelab_commit": commit,
        "set": set_name,
        "command": " ".join(["benchmarks/prereg/builds.py", "predict", str(out)]
                            + (["--set", set_name] if set_name != "2026-12-04" else [])
                            + (["--priors", priors] if priors else [])),
        "points": rows,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def errors(path: Path) -> int:
    """A markdown table: measured / predicted - 1, inside the interval, measured / bound."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    print(f"servelab {doc['servelab_commit'][:10]}, {doc['date']}\n")
    print("| build | engine | hardware | kind | len | role | measured | predicted (interval) "
          "| error | inside | measured / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["points"]:
        m, pr, roof = r["measured_tok_s"], r.get("predicted_tok_s"), r.get("roofline_tok_s")
        fit = r.get("fitted_tok_s")
        pred = "no prediction" if pr is None else f"{pr:,.1f} ({r['low']:,.1f}-{r['high']:,.1f})"
        if pr is None and fit:
            pred += f"; fit says {fit:,.1f} ({m / fit - 1:+.1%})"
        err = "" if pr is None else f"{m / pr - 1:+.1%}"
        inside = "" if pr is None else ("yes" if r["low"] <= m <= r["high"] else "no")
        bound = f"{m / roof:.2f}" if roof else ""
        print(f"| {r['build']} | {r['engine']} | {r['hardware']} | {r['kind']} | {r['length']} "
              f"| {r['role']} | {m:,.2f} | {pred} | {err} | {inside} | {bound} |")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = args[args.index("--set") + 1] if "--set" in args else "2026-12-04"
    if chosen not in SETS:
        sys.exit(f"builds.py: unknown --set {chosen!r}; choose one of {', '.join(SETS)}")
    if len(args) >= 2 and args[0] == "predict":
        pri = args[args.index("--priors") + 1] if "--priors" in args else None
        sys.exit(predict(Path(args[1]), pri, chosen))
    if len(args) >= 2 and args[0] == "rows":
        sys.exit(rows(args[1], SETS[chosen]))
    if len(args) == 2 and args[0] == "errors":
        sys.exit(errors(Path(args[1])))
    sys.exit(__doc__)
