# ruff: noqa: E501  (one published measurement per line)
"""Published end-to-end measurements of the builds pre-registered in
benchmarks/prereg/2026-12-05-ops-aic-before.json (benchmarks/prereg/ops_aic_gpus.py), on the
GPUs they were pre-registered for, collected AFTER that file was committed (commit f2ebc2a).
Nothing here was used to build or tune the predictions it is scored against.

Two sources:

* NVIDIA's measured silicon samples shipped in aiconfigurator-core 0.12.0 (Apache-2.0),
  ``aiconfigurator_core/systems/silicon_sample.csv`` (github.com/ai-dynamo/aiconfigurator):
  one row per measured serving configuration with the engine image, the date measured, ISL /
  OSL, concurrency, tensor-parallel size and the measured mean TTFT and TPOT. Kept: vLLM,
  aggregated serving, TP = 1, on a pre-registered GPU, of a pre-registered build (the rows'
  ``id`` below; a row repeated in two of its source files is kept once). AIConfigurator
  ships these as its own validation data: its own predictions may have been checked against
  them; servelab's were not.
* GPUStack's performance lab (github.com/gpustack/gpustack, docs/performance-lab/qwen3-8b/
  h100-latency.md, committed 2026-03-20): ``vllm serve Qwen/Qwen3-8B`` (vLLM v0.11.0, default
  flags) on one H100 SXM, ``vllm bench serve --dataset-name sharegpt --num-prompts 100
  --max-concurrency 4``: 23,260 input and 22,061 output tokens over 100 requests (mean 233 /
  221 per request).

Not used: GPUStack's throughput pages (all prompts at once: the concurrency the server ran
is not stated), AIConfigurator's Qwen3-32B FP8 row on the H100 (per-tensor FP8; the
pre-registered Qwen3-32B-FP8 build is 128x128 block FP8), rows with TP > 1 (servelab's
composition has no communication yet).
"""

from __future__ import annotations

from dataclasses import dataclass

AIC_SILICON = ("aiconfigurator-core 0.12.0 systems/silicon_sample.csv (NVIDIA; "
               "github.com/ai-dynamo/aiconfigurator)")
GPUSTACK_QWEN3_8B = ("https://github.com/gpustack/gpustack/blob/main/docs/performance-lab/"
                     "qwen3-8b/h100-latency.md (vLLM v0.11.0 baseline, ShareGPT, "
                     "--max-concurrency 4, 2026-03-20)")


@dataclass(frozen=True)
class Measured:
    """One published serving measurement: mean TPOT and / or TTFT at a concurrency."""

    gpu: str
    build: str
    concurrency: int
    prompt: int
    output: int
    ttft_ms: float | None
    tpot_ms: float | None
    engine: str
    date: str
    source: str
    ident: str
    note: str = ""


#: (build, ISL, OSL, concurrency, TTFT ms, TPOT ms, date measured, vLLM version, row id)
_B200 = (
    ("gpt-oss-120b", 1024, 8192, 128, 133.18, 12.509, "2026-02-25", "0.15.1", "2026_03_25_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c128_tp1_0_ep1_0_616"),
    ("gpt-oss-120b", 8192, 1024, 8, 141.78, 4.905, "2026-02-25", "0.15.1", "2026_03_25_gpt_oss_120b_b200_sxm_vllm_fp4_agg_8192x1024_c8_tp1_0_ep1_0_617"),
    ("gpt-oss-120b", 8192, 1024, 64, 380.79, 14.241, "2026-02-25", "0.15.1", "2026_03_25_gpt_oss_120b_b200_sxm_vllm_fp4_agg_8192x1024_c64_tp1_0_ep1_0_624"),
    ("gpt-oss-120b", 8192, 1024, 128, 646.91, 21.375, "2026-02-25", "0.15.1", "2026_03_25_gpt_oss_120b_b200_sxm_vllm_fp4_agg_8192x1024_c128_tp1_0_ep1_0_626"),
    ("gpt-oss-120b", 8192, 1024, 16, 179.48, 6.607, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_8192x1024_c16_tp1_ep1_141"),
    ("gpt-oss-120b", 1024, 8192, 32, 70.90, 7.327, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c32_tp1_ep1_169"),
    ("gpt-oss-120b", 1024, 8192, 64, 94.05, 9.816, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c64_tp1_ep1_173"),
    ("gpt-oss-120b", 1024, 8192, 16, 60.12, 5.399, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c16_tp1_ep1_203"),
    ("gpt-oss-120b", 1024, 8192, 8, 50.83, 4.269, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c8_tp1_ep1_214"),
    ("gpt-oss-120b", 1024, 8192, 4, 47.12, 3.478, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c4_tp1_ep1_228"),
    ("gpt-oss-120b", 1024, 1024, 32, 73.85, 7.933, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c32_tp1_ep1_247"),
    ("gpt-oss-120b", 1024, 1024, 4, 46.33, 3.487, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp1_ep1_302"),
    ("gpt-oss-120b", 1024, 1024, 8, 53.02, 4.410, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c8_tp1_ep1_329"),
    ("gpt-oss-120b", 1024, 1024, 16, 60.78, 5.843, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c16_tp1_ep1_391"),
    ("gpt-oss-120b", 1024, 1024, 64, 99.44, 10.498, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c64_tp1_ep1_434"),
    ("gpt-oss-120b", 8192, 1024, 32, 252.47, 9.698, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_8192x1024_c32_tp1_ep1_515"),
    ("gpt-oss-120b", 8192, 1024, 4, 115.82, 3.734, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_8192x1024_c4_tp1_ep1_550"),
    ("gpt-oss-120b", 1024, 1024, 128, 180.73, 13.445, "2026-02-25", "0.15.1", "2026_04_06_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x1024_c128_tp1_ep1_1059"),
    ("llama-3.1-70b-fp8", 1024, 8192, 64, 381.90, 24.667, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x8192_c64_tp1_ep1_362"),
    ("llama-3.1-70b-fp8", 1024, 8192, 8, 148.07, 16.932, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x8192_c8_tp1_ep1_412"),
    ("llama-3.1-70b-fp8", 1024, 8192, 16, 179.99, 17.893, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x8192_c16_tp1_ep1_471"),
    ("llama-3.1-70b-fp8", 8192, 1024, 64, 7813.81, 70.687, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_8192x1024_c64_tp1_ep1_486"),
    ("llama-3.1-70b-fp8", 8192, 1024, 32, 1740.92, 40.882, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_8192x1024_c32_tp1_ep1_487"),
    ("llama-3.1-70b-fp8", 1024, 8192, 4, 137.47, 16.671, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x8192_c4_tp1_ep1_516"),
    ("llama-3.1-70b-fp8", 1024, 8192, 32, 242.67, 20.466, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x8192_c32_tp1_ep1_586"),
    ("llama-3.1-70b-fp8", 1024, 1024, 64, 385.24, 23.102, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c64_tp1_ep1_635"),
    ("llama-3.1-70b-fp8", 1024, 1024, 32, 262.36, 19.565, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c32_tp1_ep1_664"),
    ("llama-3.1-70b-fp8", 8192, 1024, 16, 1485.95, 27.707, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_8192x1024_c16_tp1_ep1_718"),
    ("llama-3.1-70b-fp8", 1024, 1024, 8, 152.58, 16.629, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c8_tp1_ep1_765"),
    ("llama-3.1-70b-fp8", 1024, 1024, 16, 199.09, 17.673, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp1_ep1_768"),
    ("llama-3.1-70b-fp8", 8192, 1024, 8, 940.45, 21.084, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_8192x1024_c8_tp1_ep1_793"),
    ("llama-3.1-70b-fp8", 1024, 1024, 4, 122.39, 16.337, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c4_tp1_ep1_805"),
    ("llama-3.1-70b-fp8", 8192, 1024, 4, 744.86, 18.341, "2025-10-29", "not stated", "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_8192x1024_c4_tp1_ep1_841"),
)

_LLAMA_NOTE = ("AIConfigurator's FP8 mode (per-tensor FP8, e.g. nvidia/Llama-3.1-70B-Instruct-FP8); "
               "the pre-registered build is per-channel FP8 read from the same FP8 GEMM table")

POINTS: tuple[Measured, ...] = (
    *(Measured("b200", b, n, isl, osl, ttft, tpot, f"vLLM {v}", d, AIC_SILICON, i,
               _LLAMA_NOTE if b.startswith("llama") else "")
      for b, isl, osl, n, ttft, tpot, d, v, i in _B200),
    Measured("h100", "qwen3-8b", 4, 233, 221, 64.00, 7.38, "vLLM 0.11.0", "2026-03-20",
             GPUSTACK_QWEN3_8B, "gpustack qwen3-8b h100-latency vllm baseline",
             "ShareGPT: variable lengths, mean 233 in / 221 out; output 496.88 tok/s"),
)
