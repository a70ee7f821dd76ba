"""vLLM's linear-layer (GEMM) kernel selection, reproduced (vLLM 0.24.0-0.34.0).

``vllm/model_executor/kernels/linear/__init__.py`` walks a per-platform list of kernel
classes and takes the first whose ``is_supported`` and ``can_implement`` pass
(``choose_scaled_mm_linear_kernel`` for FP8, ``init_nvfp4_linear_kernel`` for NVFP4); from
0.32.0 ``_resolve_backend_kernels`` first moves Humming ahead of Marlin on sm_90. The engine
logs the choice as ``Selected <Kernel> for <Method>`` (FP8) or ``Using <Kernel> for NVFP4
GEMM``. Covered: FP8 per-tensor/per-channel and FP8 block 128x128 (W8A8), NVFP4 W4A4 and
W4A16, unquantized. The CUTLASS support tests are compiled ops; their rules are read in
vLLM's ``csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu`` (block FP8: sm_90 and newer;
grouped GEMM: sm_90 to below sm_110; FP4: sm_100 and newer) with a CUDA 13 wheel.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.engines.vllm.kernels.layout import (
    FAMILY_FP8,
    FAMILY_NVFP4,
    FP8_BLOCK,
    NVFP4_A,
    UNQUANTIZED,
)
from servelab.engines.vllm.kernels.moe import Backend, Ctx, Oracle, _humming, _humming_first

LIN = "vllm/model_executor/kernels/linear/"
_DEEPGEMM_EXCLUDED = ("qwen3_5_text", "qwen3_5_moe_text")


def _fp8_marlin(c: Ctx) -> str | None:
    """``scaled_mm/marlin.py`` MarlinFP8ScaledMMLinearKernel: refused on sm_89+ unless
    VLLM_TEST_FORCE_FP8_MARLIN."""
    if c.device.at_least(89):
        return "FP8 Marlin is refused on sm_89+ (the GPU has FP8 tensor cores)"
    return None if c.device.at_least(75) else "FP8 Marlin needs sm_75 or newer"


def _flashinfer_fp8(c: Ctx) -> str | None:
    """``scaled_mm/flashinfer.py`` FlashInferFP8ScaledMMLinearKernel: sm_100+, per-tensor
    weight and activation scales."""
    if not c.env.flashinfer:
        return "flashinfer is not installed"
    if not c.device.at_least(100):
        return "FlashInfer FP8 GEMM needs sm_100 or newer"
    if c.layout.weight_key != "kFp8StaticTensorSym" or c.layout.activation_key not in (
        "kFp8StaticTensorSym", "kFp8DynamicTensorSym"
    ):
        return "FlashInfer FP8 GEMM needs per-tensor weight and activation scales"
    return None


def _cutlass_fp8(c: Ctx) -> str | None:
    """``scaled_mm/cutlass.py`` CutlassFP8ScaledMMLinearKernel (``cutlass_fp8_supported``)."""
    return None if c.device.at_least(89) else "CUTLASS FP8 needs sm_89 or newer"


def _deep_gemm_usable(c: Ctx) -> str | None:
    d = c.device
    if not c.env.use_deep_gemm:
        return "VLLM_USE_DEEP_GEMM=0"
    if not (d.capability == 90 or d.family in (10, 12)):
        return "DeepGEMM runs on sm_90, sm_10x and sm_12x only"
    if d.family in (10, 12) and c.env.text_model_type in _DEEPGEMM_EXCLUDED:
        return (f"vLLM turns DeepGEMM off for {c.env.text_model_type} on Blackwell "
                "(should_auto_disable_deep_gemm)")
    return None


def _fi_deep_gemm(c: Ctx) -> str | None:
    """``scaled_mm/flashinfer.py`` FlashInferFp8DeepGEMMDynamicBlockScaledKernel: FlashInfer's
    sm_90 block-scale GEMM (VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER, default 1) and DeepGEMM."""
    if not c.env.flashinfer:
        return "flashinfer is not installed"
    if c.device.capability != 90:
        return "FlashInfer's block-scale FP8 GEMM is sm_90 only"
    return _deep_gemm_usable(c)


def _cutlass_block(c: Ctx) -> str | None:
    """``scaled_mm/cutlass.py`` CutlassFp8BlockScaledMMKernel (``cutlass_block_fp8_supported``:
    sm_90 and newer)."""
    return None if c.device.at_least(90) else "CUTLASS block FP8 needs sm_90 or newer"


def fp8_linear(c: Ctx) -> Oracle:
    """``_POSSIBLE_FP8_BLOCK_KERNELS`` (block keys) or ``_POSSIBLE_FP8_KERNELS`` (CUDA)."""
    s = f"{LIN}scaled_mm/"
    if c.layout.weight_key == FP8_BLOCK:
        order = [
            Backend("FlashInferFp8DeepGEMMDynamicBlockScaledKernel", "fp8", _fi_deep_gemm,
                    f"{s}flashinfer.py FlashInferFp8DeepGEMMDynamicBlockScaledKernel"),
            Backend("DeepGemmFp8BlockScaledMMKernel", "fp8", _deep_gemm_usable,
                    f"{s}deep_gemm.py DeepGemmFp8BlockScaledMMKernel.can_implement"),
            Backend("CutlassFp8BlockScaledMMKernel", "fp8", _cutlass_block,
                    f"{s}cutlass.py CutlassFp8BlockScaledMMKernel.is_supported"),
            Backend("MarlinFP8ScaledMMLinearKernel", "bf16", _fp8_marlin,
                    f"{s}marlin.py MarlinFP8ScaledMMLinearKernel.is_supported", True),
            Backend("TritonFp8BlockScaledMMKernel", "fp8", lambda _c: None,
                    f"{s}triton.py TritonFp8BlockScaledMMKernel"),
        ]
        return Oracle("Fp8LinearMethod", tuple(order),
                      f"{LIN}__init__.py init_fp8_linear_kernel (_POSSIBLE_FP8_BLOCK_KERNELS)")
    marlin = Backend("MarlinFP8ScaledMMLinearKernel", "bf16", _fp8_marlin,
                     f"{s}marlin.py MarlinFP8ScaledMMLinearKernel.is_supported", True)
    order = [
        Backend("FlashInferFP8ScaledMMLinearKernel", "fp8", _flashinfer_fp8,
                f"{s}flashinfer.py FlashInferFP8ScaledMMLinearKernel.is_supported"),
        Backend("CutlassFP8ScaledMMLinearKernel", "fp8", _cutlass_fp8,
                f"{s}cutlass.py CutlassFP8ScaledMMLinearKernel.is_supported"),
    ]
    # Marlin led the list to 0.28.0; from 0.29.0 it follows the CUTLASS and torch kernels
    order = [marlin, *order] if c.version < (0, 29, 0) else [*order, marlin]
    return Oracle("Fp8LinearMethod", tuple(order),
                  f"{LIN}__init__.py init_fp8_linear_kernel (_POSSIBLE_FP8_KERNELS)")


def _fp4_marlin(c: Ctx) -> str | None:
    return None if c.device.at_least(75) else "FP4 Marlin needs sm_75 or newer"


def nvfp4_linear(c: Ctx) -> Oracle:
    """``init_nvfp4_linear_kernel``: weight-only builds are forced to Marlin (to 0.29.0; from
    0.30.0 FlashInfer's CuTe-DSL W4A16 GEMM on sm_100/103, Marlin elsewhere, the automatic
    list on sm_90 from 0.32.0); W4A4 walks ``_POSSIBLE_NVFP4_KERNELS``: FlashInfer CuTe-DSL
    (sm_10x), FlashInfer CUTLASS (sm_100+), vLLM CUTLASS (sm_100+), Marlin."""
    n = f"{LIN}nvfp4/"
    marlin = Backend("MarlinNvFp4LinearKernel", "bf16", _fp4_marlin,
                     f"{n}marlin.py MarlinNvFp4LinearKernel.is_supported", True)
    src = f"{LIN}__init__.py init_nvfp4_linear_kernel"
    if c.layout.activation_key != NVFP4_A:
        d = c.device
        if c.version >= (0, 30, 0) and d.capability in (100, 103):
            cute = Backend("FlashInferCuteDslNvFp4W4A16LinearKernel", "bf16",
                           lambda x: None if x.env.flashinfer else "flashinfer is not installed",
                           f"{n}flashinfer.py FlashInferCuteDslNvFp4W4A16LinearKernel")
            return Oracle("NVFP4 GEMM", (cute, marlin), src)
        if c.version >= (0, 32, 0) and d.capability == 90:
            return Oracle("NVFP4 GEMM", (), src)  # the automatic a16 list: not reproduced
        return Oracle("NVFP4 GEMM", (marlin,), src)
    order = [
        Backend("FlashInferCuteDslNvFp4LinearKernel", "fp4",
                lambda x: None if x.device.family == 10 and x.env.flashinfer
                else "FlashInfer CuTe-DSL NVFP4 GEMM needs sm_10x and flashinfer",
                f"{n}flashinfer.py FlashInferCuteDslNvFp4LinearKernel.is_supported"),
        Backend("FlashInferCutlassNvFp4LinearKernel", "fp4",
                lambda x: None if x.device.at_least(100) and x.env.flashinfer
                else "FlashInfer CUTLASS NVFP4 GEMM needs sm_100+ and flashinfer",
                f"{n}flashinfer.py FlashInferCutlassNvFp4LinearKernel.is_supported"),
        Backend("CutlassNvFp4LinearKernel", "fp4",
                lambda x: None if x.device.at_least(100)
                else "CUTLASS FP4 GEMM needs sm_100 or newer (cutlass_fp4_supported)",
                f"{n}cutlass.py CutlassNvFp4LinearKernel.is_supported"),
        marlin,
    ]
    if c.version >= (0, 32, 0) and c.device.capability == 90:
        order.append(Backend("HummingNvFp4LinearKernel", None, _humming, f"{n}humming.py"))
        order = _humming_first(order)
    return Oracle("NVFP4 GEMM", tuple(order), src)


def unquantized_linear(c: Ctx) -> Oracle:
    """No selection: ``UnquantizedLinearMethod`` calls ``torch.nn.functional.linear``."""
    return Oracle("UnquantizedLinearMethod", (
        Backend("UnquantizedLinearMethod", "bf16", lambda _c: None,
                "vllm/model_executor/layers/linear.py UnquantizedLinearMethod.apply"),
    ), "vllm/model_executor/layers/linear.py")


LINEAR: dict[str, Callable[[Ctx], Oracle]] = {
    FAMILY_FP8: fp8_linear,
    FAMILY_NVFP4: nvfp4_linear,
    UNQUANTIZED: unquantized_linear,
}
