"""Page models built in the tests: two builds of one model, history, an experiment, runs."""

from __future__ import annotations

from servelab.site.fmt import relative_change
from servelab.site.model import (
    BuildRow,
    ChangePoint,
    EngineObservation,
    ExperimentMetric,
    ExperimentPage,
    HistoryPoint,
    HistorySeries,
    Measured,
    MeasuredRow,
    MemoryPart,
    MemorySplit,
    ModelIndexPage,
    Predicted,
    RecipePage,
    RunPage,
    SiblingBuild,
    Site,
    Software,
    Verification,
)

HOSTILE = "<script>alert(1)</script>"
HOSTILE_LOG = (
    "WARNING </code></pre><img src=x onerror=alert(2)> `` | *boom* [x](javascript:alert(3))"
)
SECRET = "hf_abcdefghijklmnopqrstuvwxyz012345"
GIB = 1024**3


def _dec(run: str, version: str, prompt: int, value: float, pred: float | None) -> MeasuredRow:
    basis = "fitted from stored runs (vllm / TRITON / spark); ±15% (leave-one-model-out)"
    p = Predicted(pred, "tok/s", basis, run, pred / 1.15, pred / 0.85) if pred else None
    m = Measured(value, "tok/s", run, value * 0.98, value * 1.02, 5)
    return MeasuredRow(version, prompt, m, p)


def build_site(model_name: str = "Tiny-MoE 1B", log_line: str | None = None,
               hardware: str = "DGX Spark") -> Site:
    """A complete site in which every section of a recipe page has something to show."""
    fallback = log_line or "Using MARLIN Fp8 MoE backend: weight-only FP8 via Marlin"
    bf16_decode = (
        _dec("r1", "0.31.0", 512, 40.1, 61.0),
        _dec("r1", "0.31.0", 2048, 38.27, 60.0),
        _dec("r1", "0.31.0", 8192, 37.42, 55.0),
        _dec("r2", "0.32.0", 512, 40.5, None),
        _dec("r2", "0.32.0", 2048, 38.70, None),
        _dec("r2", "0.32.0", 8192, 37.76, None),
    )
    prefill = (
        MeasuredRow("0.32.0", 2048, Measured(5122.0, "tok/s", "r2", 5000.0, 5200.0, 5)),
        MeasuredRow("0.32.0", 8192, Measured(6081.0, "tok/s", "r2")),
    )
    hist_points = (
        HistoryPoint("2026-07-06", Measured(52.3, "tok/s", "r0")),
        HistoryPoint("2026-07-20", Measured(51.9, "tok/s", "r0b")),
        HistoryPoint("2026-07-28", Measured(38.27, "tok/s", "r1")),
        HistoryPoint("2026-07-29", Measured(38.70, "tok/s", "r2")),
    )
    cp = ChangePoint(2, hist_points[1].value, hist_points[2].value,
                     relative_change(hist_points[2].value, hist_points[1].value))
    memory = MemorySplit(
        "r2",
        by_dtype=(MemoryPart("F8_E4M3", int(30.37 * GIB)), MemoryPart("BF16", int(4.71 * GIB))),
        by_role=(MemoryPart("routed experts", int(30.06 * GIB)),
                 MemoryPart("attention", int(3.0 * GIB)),
                 MemoryPart("embeddings + lm_head", int(2.02 * GIB))),
        tensor_count=62546,
    )
    obs = (
        EngineObservation("r1", "0.31.0", "FLASH_ATTN", "MARLIN", Measured(35.28, "GiB", "r1"),
                          Measured(6.0, "GiB", "r1"), Measured(308955, "tokens", "r1"),
                          Measured(1.18, "x", "r1"), fallback_line=fallback),
        EngineObservation("r2", "0.32.0", "FLASH_ATTN", "TRITON", Measured(35.28, "GiB", "r2"),
                          Measured(6.0, "GiB", "r2"), Measured(308955, "tokens", "r2"),
                          Measured(1.18, "x", "r2"),
                          profiling_skipped_line="WARNING --kv-cache-memory-bytes is set; "
                          "skipping memory profiling, gpu_memory_utilization is ignored"),
    )
    sibling_decode = Measured(42.57, "tok/s", "r9")
    exp = ExperimentPage(
        slug="fp8-vs-nvfp4", title=f"Does {model_name} FP8 beat NVFP4?",
        question="Is the FP8 build faster than the NVFP4 build on one box?",
        verdict="rejected", baseline_label="NVFP4", candidate_label="FP8",
        baseline_recipe="tiny-nvfp4", candidate_recipe="tiny-fp8",
        metrics=(ExperimentMetric("decode tok/s @ 2048", "tok/s", sibling_decode,
                                  bf16_decode[4].measured,
                                  relative_change(bf16_decode[4].measured, sibling_decode),
                                  True),),
        conclusion="FP8 decodes slower: more bytes per token.",
    )
    verifications = (
        Verification("r1", "2026-07-28", "spark-1", "0.31.0", "ok"),
        Verification("r2", "2026-07-29", "spark-1", "0.32.0", "ok", "same flags"),
        Verification("r3", "2026-07-30", "spark-1", "0.32.0", "failed", "engine exited"),
    )
    fp8 = RecipePage(
        slug="tiny-fp8", model_name=model_name, model_slug="tiny-moe", build_name="FP8",
        checkpoint="org/Tiny-MoE-FP8", served_model_name=model_name, hardware=hardware,
        host="spark-1", context_tokens=262144,
        software=Software("vLLM", ("0.31.0", "0.32.0"), torch="2.11.0+cu130", driver="580.1"),
        command=("vllm", "serve", "org/Tiny-MoE-FP8", "--max-model-len", "262144",
                 "--kv-cache-memory-bytes", "6442450944", "--api-key", SECRET,
                 f"--hf-token={SECRET}"),
        key_params=(("max-model-len", "262144"), ("kv-cache-memory-bytes", "6442450944")),
        decode=bf16_decode, prefill=prefill, engine=obs, verifications=verifications,
        memory=memory, quantization="FP8", mtp_declared_layers=1, mtp_tensors=0,
        history=(HistorySeries("decode tok/s @ 2048", "tok/s", hist_points, (cp,)),),
        experiments=(exp,),
        siblings=(SiblingBuild("tiny-nvfp4", "NVFP4", sibling_decode),),
    )
    nvfp4 = RecipePage(
        slug="tiny-nvfp4", model_name=model_name, model_slug="tiny-moe", build_name="NVFP4",
        checkpoint="org/Tiny-MoE-NVFP4", served_model_name="tiny-nvfp4", hardware=hardware,
        host="spark-1", context_tokens=262144, software=Software("vLLM", ("0.32.0",)),
        command=("vllm", "serve", "org/Tiny-MoE-NVFP4"), key_params=(),
        decode=(MeasuredRow("0.32.0", 2048, sibling_decode),), prefill=(), engine=(),
        verifications=(Verification("r9", "2026-07-29", "spark-1", "0.32.0", "ok"),),
        siblings=(SiblingBuild("tiny-fp8", "FP8", bf16_decode[4].measured),),
    )
    builds = (
        BuildRow("tiny-fp8", "FP8", "FP8", hardware, ("0.31.0", "0.32.0"),
                 ((512, bf16_decode[3].measured), (2048, bf16_decode[4].measured)),
                 ((2048, prefill[0].measured),), Measured(35.28, "GiB", "r2"),
                 memory.total_bytes, verifications[1]),
        BuildRow("tiny-nvfp4", "NVFP4", None, hardware, ("0.32.0",),
                 ((2048, sibling_decode),), (), None, None, None),
    )
    ok_runs = [
        RunPage(rid, "tiny-fp8", "tiny-fp8", "ok", "2026-07-29T10:00:00+00:00", "spark-1",
                "0.32.0", metrics=(("decode tok/s @ 2048", Measured(38.7, "tok/s", rid)),),
                log_excerpt=(fallback, f"HF_TOKEN={SECRET}"))
        for rid in ("r0", "r0b", "r1", "r2", "r9")
    ]
    failed = RunPage("r3", "tiny-fp8", "tiny-fp8", "failed", "2026-07-30T10:00:00+00:00",
                     "spark-1", "0.32.0", failure=f"engine exited: {fallback}")
    runs = (*ok_runs, failed)
    return Site(
        title="servelab recipes", recipes=(fp8, nvfp4),
        models=(ModelIndexPage("tiny-moe", model_name, builds),), experiments=(exp,), runs=runs,
    )
