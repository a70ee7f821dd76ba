"""vLLM's fused-MoE backend selection, reproduced from its oracles (vLLM 0.24.0-0.34.0).

Each oracle (``vllm/model_executor/layers/fused_moe/oracle/<name>.py``) walks an ordered list
of backends and takes the first whose experts class accepts the device, the quantization keys
and the configuration (``FusedMoEExperts.is_supported_config``:
``_supports_current_device``, ``_supports_quant_scheme``, activation, parallel config,
routing). What servelab reproduces, per oracle, is that order and, per backend, the device
and key tests (the experts classes under ``fused_moe/experts/``), read in the wheels of
every release from 0.24.0 to 0.34.0 (function by function; where a release changed one, the
rule says from which release). Assumed throughout: tensor parallel only (no expert or data
parallel, so the standard activation format), no LoRA, ``--moe-backend auto``, a gated SiLU
MoE (gpt-oss's SwiGLU-OAI for MXFP4) with softmax top-k routing (``Renormalize``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servelab.engines.vllm.kernels.device import Device, KernelEnv
from servelab.engines.vllm.kernels.layout import (
    FAMILY_FP8,
    FAMILY_INT4,
    FAMILY_MXFP4,
    FAMILY_NVFP4,
    FP8_BLOCK,
    FP8_CHANNEL,
    FP8_DYN_GROUP128,
    FP8_DYN_TENSOR,
    FP8_DYN_TOKEN,
    FP8_TENSOR,
    INT4_ASYM,
    INT4_SYM,
    INT4_SYM32,
    MXFP4_W,
    NVFP4_A,
    NVFP4_W,
    UNQUANTIZED,
    Layout,
)

FUSED = "vllm/model_executor/layers/fused_moe/"
V = tuple[int, int, int]


@dataclass(frozen=True)
class Ctx:
    """Everything one selection reads."""

    device: Device
    layout: Layout
    env: KernelEnv
    version: V


@dataclass(frozen=True)
class Backend:
    """One backend as an oracle tries it: its name (the enum value the engine logs), what it
    computes in, and the test that accepts or refuses it (None: accepted; else why not)."""

    name: str
    compute: str | None
    test: Callable[[Ctx], str | None]
    source: str
    weight_only: bool = False  # dequantizes weights and multiplies in 16 bits (Marlin)


@dataclass(frozen=True)
class Oracle:
    """An oracle's walk for one context: the backends in the order tried, and where the order
    and any forced choice come from."""

    name: str  # as the engine's log line names it: "Fp8", "NvFp4", "Mxfp4", "Unquantized", ...
    order: tuple[Backend, ...]
    source: str
    forced: str | None = None  # a backend the flags or environment force
    forced_by: str = ""  # "--moe-backend marlin", "VLLM_USE_DEEP_GEMM=1"
    requestable: tuple[Backend, ...] = ()  # backends only an explicit --moe-backend selects


def _requested(c: Ctx, mapping: dict[str, str], oracle: Oracle) -> Oracle:
    """``--moe-backend NAME`` (``map_nvfp4_backend`` / ``map_fp8_backend``): vLLM takes that
    backend or refuses; a name this oracle does not map is refused too (forced to a name no
    candidate has, which the walk reports as not reproduced)."""
    name = c.env.moe_backend
    if not name or name == "auto":
        return oracle
    forced = mapping.get(name, f"--moe-backend {name} (no {oracle.name} backend of that name)")
    return Oracle(oracle.name, oracle.order, oracle.source, forced, f"--moe-backend {name}",
                  oracle.requestable)


def _fp4_capable(c: Ctx) -> bool:
    return c.device.family in (10, 12)


# -- shared experts classes -------------------------------------------------------------

def _flashinfer_cutlass(c: Ctx) -> str | None:
    """``experts/flashinfer_cutlass_moe.py`` FlashInferExperts (unchanged 0.24.0-0.34.0)."""
    d = c.device
    if not (d.capability == 90 or d.family in (10, 12)):
        return "FlashInfer CUTLASS MoE runs on sm_90, sm_10x and sm_12x only"
    if not c.env.flashinfer:
        return "flashinfer is not installed"
    w, a = c.layout.weight_key, c.layout.activation_key
    if (w, a) in ((None, None), (FP8_TENSOR, FP8_TENSOR)) and d.at_least(90):
        return None
    if (w, a) == (FP8_BLOCK, FP8_DYN_GROUP128) and d.capability == 90:
        return None
    if (w, a) == (MXFP4_W, None) and d.capability == 90:
        return None
    if (w, a) == (NVFP4_W, NVFP4_A) and d.at_least(100):
        return None
    return f"it does not take {c.layout.label} on {d.arch}"


def _marlin(keys: tuple[str, ...]) -> Callable[[Ctx], str | None]:
    def test(c: Ctx) -> str | None:
        """``experts/marlin_moe.py`` MarlinExpertsBase: sm_75 or newer, weight key only."""
        if not c.device.at_least(75):
            return "Marlin needs sm_75 or newer"
        if c.layout.weight_key not in keys:
            return f"Marlin MoE does not take {c.layout.weight_key}"
        return None
    return test


def _humming(c: Ctx) -> str | None:
    """``experts/fused_humming_moe.py`` HummingExpertsBase (a Requires-Dist since 0.24)."""
    if not c.env.humming:
        return "humming-kernels is not installed"
    if not c.device.at_least(75):
        return "Humming needs sm_75 or newer"
    return None


def _not_cuda(name: str) -> Callable[[Ctx], str | None]:
    def test(c: Ctx) -> str | None:
        return f"{name} runs on ROCm/XPU/CPU only"
    return test


def _batched(c: Ctx) -> str | None:
    return "the batched activation format comes with expert parallelism only"


def _family10_flashinfer(what: str) -> Callable[[Ctx], str | None]:
    def test(c: Ctx) -> str | None:
        if c.device.family != 10:
            return f"{what} runs on sm_10x (B200/GB200) only"
        if not c.env.flashinfer:
            return "flashinfer is not installed"
        return None
    return test


# -- NvFp4 ----------------------------------------------------------------------------------

def _nvfp4_w4a4(test: Callable[[Ctx], str | None]) -> Callable[[Ctx], str | None]:
    def both(c: Ctx) -> str | None:
        if c.layout.activation_key != NVFP4_A:
            return "it needs NVFP4 activations (W4A4); this build is weight-only (W4A16)"
        return test(c)
    return both


def _vllm_cutlass_fp4(c: Ctx) -> str | None:
    """``experts/cutlass_moe.py`` CutlassExpertsFp4: sm_10x or sm_12x (sm_11x to 0.33)."""
    fams = (10, 11, 12) if c.version < (0, 34, 0) else (10, 12)
    if c.device.family not in fams:
        return "vLLM's CUTLASS FP4 MoE runs on sm_10x/sm_12x only"
    if c.layout.activation_key != NVFP4_A:
        return "it needs NVFP4 activations (W4A4); this build is weight-only (W4A16)"
    return None


def nvfp4_oracle(c: Ctx) -> Oracle:
    """``oracle/nvfp4.py`` ``select_nvfp4_moe_backend``: TRTLLM, CuteDSL, CuteDSL batched,
    FlashInfer CUTLASS, vLLM CUTLASS, Marlin, Humming (from 0.25.0), emulation; from 0.32.0
    ``prioritize_humming`` puts Humming before Marlin on sm_90. FLASHINFER_B12X is left out of
    the automatic order ("until the upstream CUTLASS SM121 MMA op guard is resolved")."""
    e = f"{FUSED}experts/"
    order = [
        Backend("FLASHINFER_TRTLLM", "fp4", _nvfp4_w4a4(_family10_flashinfer("TRT-LLM NVFP4 MoE")),
                f"{e}trtllm_nvfp4_moe.py TrtLlmNvFp4ExpertsBase._supports_current_device"),
        Backend("FLASHINFER_CUTEDSL", "fp4", _nvfp4_w4a4(_family10_flashinfer("CuteDSL NVFP4 MoE")),
                f"{e}flashinfer_cutedsl_moe.py FlashInferCuteDSLExperts._supports_current_device"),
        Backend("FLASHINFER_CUTEDSL_BATCHED", "fp4", _batched,
                f"{e}flashinfer_cutedsl_batched_moe.py activation_format"),
        Backend("FLASHINFER_CUTLASS", "fp4", _flashinfer_cutlass,
                f"{e}flashinfer_cutlass_moe.py FlashInferExperts._supports_quant_scheme"),
        Backend("VLLM_CUTLASS", "fp4", _vllm_cutlass_fp4,
                f"{e}cutlass_moe.py CutlassExpertsFp4._supports_current_device"),
        Backend("MARLIN", "bf16", _marlin((NVFP4_W,)),
                f"{e}marlin_moe.py MarlinExpertsBase._supports_quant_scheme", True),
    ]
    if c.version >= (0, 25, 0):
        order.append(Backend("HUMMING", None, _humming,
                             f"{e}fused_humming_moe.py HummingExpertsBase"))
    order.append(Backend("EMULATION", "bf16", lambda _c: None,
                         f"{e}nvfp4_emulation_moe.py"))
    if c.version >= (0, 32, 0) and c.device.capability == 90:
        order = _humming_first(order)
    b12x = Backend("FLASHINFER_B12X", None, _flashinfer_b12x,
                   f"{e}flashinfer_b12x_moe.py FlashInferB12xExperts._supports_current_device")
    mapping = {"cutlass": "VLLM_CUTLASS", "flashinfer_trtllm": "FLASHINFER_TRTLLM",
               "flashinfer_cutlass": "FLASHINFER_CUTLASS", "flashinfer_cutedsl":
               "FLASHINFER_CUTEDSL", "flashinfer_b12x": "FLASHINFER_B12X", "marlin": "MARLIN",
               "emulation": "EMULATION"}
    if c.version >= (0, 25, 0):
        mapping["humming"] = "HUMMING"
    return _requested(c, mapping, Oracle(
        "NvFp4", tuple(order), f"{FUSED}oracle/nvfp4.py select_nvfp4_moe_backend",
        requestable=(b12x,)))


def _flashinfer_b12x(c: Ctx) -> str | None:
    """``experts/flashinfer_b12x_moe.py`` FlashInferB12xExperts (0.24.0-0.34.0): sm_12x,
    FlashInfer's b12x MoE, NVFP4 weights with NVFP4 or no activations; never chosen by
    ``auto`` ("until the upstream CUTLASS SM121 MMA op guard is resolved")."""
    if c.device.family != 12:
        return "FlashInfer b12x MoE runs on sm_12x only"
    return None if c.env.flashinfer else "flashinfer is not installed"


def _humming_first(order: list[Backend]) -> list[Backend]:
    """``quantization/utils/humming/priority.py`` ``prioritize_humming``: Humming directly
    ahead of Marlin on sm_90 (from 0.32.0), names matched as vLLM matches them."""
    names = [b.name.lower() for b in order]
    h = next((i for i, n in enumerate(names) if "humming" in n), None)
    m = next((i for i, n in enumerate(names) if "marlin" in n), None)
    if h is None or m is None or h < m:
        return order
    out = list(order)
    out.insert(m, out.pop(h))
    return out


# -- Fp8 ------------------------------------------------------------------------------------

_TRITON_FP8 = {
    (FP8_BLOCK, FP8_DYN_GROUP128), (FP8_CHANNEL, FP8_DYN_TOKEN), (FP8_TENSOR, FP8_DYN_TOKEN),
    (FP8_TENSOR, FP8_TENSOR), (FP8_TENSOR, FP8_DYN_TENSOR),
}
_CUTLASS_FP8 = {
    (FP8_CHANNEL, FP8_DYN_TOKEN), (FP8_TENSOR, FP8_DYN_TENSOR), (FP8_TENSOR, FP8_TENSOR),
}
_DEEPGEMM_EXCLUDED = ("qwen3_5_text", "qwen3_5_moe_text")


def _triton_fp8(c: Ctx) -> str | None:
    """``experts/triton_moe.py`` TritonExperts: FP8 keys where ``supports_fp8`` (sm_89+)."""
    if (c.layout.weight_key, c.layout.activation_key) not in _TRITON_FP8:
        return f"Triton MoE does not take {c.layout.label}"
    if not c.device.at_least(89):
        return "FP8 Triton MoE needs sm_89 or newer (supports_fp8)"
    return None


def _deep_gemm(c: Ctx) -> str | None:
    """``experts/triton_deep_gemm_moe.py`` TritonOrDeepGemmExperts: DeepGemmExperts
    (``is_deep_gemm_supported``: VLLM_USE_DEEP_GEMM, vendored deep_gemm, sm_90/10x/12x;
    block keys) and its Triton fallback."""
    if (c.layout.weight_key, c.layout.activation_key) != (FP8_BLOCK, FP8_DYN_GROUP128):
        return "DeepGEMM MoE takes FP8 block 128x128 only"
    if not c.env.use_deep_gemm:
        return "VLLM_USE_DEEP_GEMM=0"
    d = c.device
    if not (d.capability == 90 or d.family in (10, 12)):
        return "DeepGEMM runs on sm_90, sm_10x and sm_12x only (support_deep_gemm)"
    return _triton_fp8(c)


def _vllm_cutlass_fp8(c: Ctx) -> str | None:
    """``experts/triton_cutlass_moe.py`` TritonOrCutlassExperts: CutlassExpertsFp8 needs
    ``cutlass_group_gemm_supported`` (``_custom_ops.py``: sm_90 to below sm_110) and its keys,
    and the Triton fallback."""
    if (c.layout.weight_key, c.layout.activation_key) not in _CUTLASS_FP8:
        return f"vLLM's CUTLASS FP8 MoE does not take {c.layout.label}"
    if not 90 <= c.device.capability < 110:
        return "CUTLASS grouped GEMM runs on sm_90 to sm_10x only (cutlass_group_gemm_supported)"
    return _triton_fp8(c)


def _trtllm_fp8(c: Ctx) -> str | None:
    """``experts/trtllm_fp8_moe.py`` TrtLlmFp8Experts: sm_10x, block or per-tensor static."""
    if c.device.family != 10:
        return "TRT-LLM FP8 MoE runs on sm_10x (B200/GB200) only"
    if not c.env.flashinfer:
        return "flashinfer is not installed"
    if (c.layout.weight_key, c.layout.activation_key) not in (
        (FP8_BLOCK, FP8_DYN_GROUP128), (FP8_TENSOR, FP8_TENSOR)
    ):
        return f"TRT-LLM FP8 MoE does not take {c.layout.label}"
    return None


def fp8_oracle(c: Ctx) -> Oracle:
    """``oracle/fp8.py`` ``_get_priority_backends`` and ``select_fp8_moe_backend``: AITER,
    FlashInfer TRTLLM, FlashInfer CUTLASS, DeepGEMM, vLLM CUTLASS, Triton, Marlin, Humming
    (from 0.25.0); on sm_90 with block keys Triton moves to the front (tensor parallel); an
    explicit VLLM_USE_DEEP_GEMM=1 forces DeepGEMM and =0 removes it; from 0.34.0 DeepGEMM is
    also removed for the model types ``should_auto_disable_deep_gemm`` names on Blackwell;
    vLLM CUTLASS stays only where the method allows it (compressed-tensors does, ``fp8`` and
    ModelOpt do not)."""
    e = f"{FUSED}experts/"
    marlin_keys = (FP8_BLOCK, FP8_CHANNEL, FP8_TENSOR)
    order = [
        Backend("AITER", "fp8", _not_cuda("AITER"), f"{e}rocm_aiter_moe.py"),
        Backend("FLASHINFER_TRTLLM", "fp8", _trtllm_fp8,
                f"{e}trtllm_fp8_moe.py TrtLlmFp8ExpertsMonolithic._supports_current_device"),
        Backend("FLASHINFER_CUTLASS", "fp8", _flashinfer_cutlass,
                f"{e}flashinfer_cutlass_moe.py FlashInferExperts._supports_quant_scheme"),
        Backend("DEEPGEMM", "fp8", _deep_gemm,
                f"{e}deep_gemm_moe.py DeepGemmExperts._supports_current_device"),
        Backend("VLLM_CUTLASS", "fp8", _vllm_cutlass_fp8,
                f"{e}cutlass_moe.py CutlassExpertsFp8Base._supports_current_device"),
        Backend("TRITON", "fp8", _triton_fp8,
                f"{e}triton_moe.py TritonExperts._supports_quant_scheme"),
        Backend("MARLIN", "bf16", _marlin(marlin_keys),
                f"{e}marlin_moe.py MarlinExpertsBase._supports_quant_scheme", True),
    ]
    if c.version >= (0, 25, 0):
        order.append(Backend("HUMMING", None, _humming, f"{e}fused_humming_moe.py"))
    lay, d, env = c.layout, c.device, c.env
    if d.capability == 90 and (lay.weight_key, lay.activation_key) == (FP8_BLOCK,
                                                                       FP8_DYN_GROUP128):
        order.insert(0, order.pop([b.name for b in order].index("TRITON")))
    forced = None
    if env.deep_gemm_env_set:
        if env.use_deep_gemm:
            forced = "DEEPGEMM"
        else:
            order = [b for b in order if b.name != "DEEPGEMM"]
    elif (c.version >= (0, 34, 0) and d.family in (10, 12)
          and env.text_model_type in _DEEPGEMM_EXCLUDED):
        order = [b for b in order if b.name != "DEEPGEMM"]
    if not lay.allow_vllm_cutlass:
        order = [b for b in order if b.name != "VLLM_CUTLASS"]
    if c.version >= (0, 32, 0) and d.capability == 90:
        order = _humming_first(order)
    oracle = Oracle("Fp8", tuple(order), f"{FUSED}oracle/fp8.py select_fp8_moe_backend",
                    forced, "VLLM_USE_DEEP_GEMM=1" if forced else "")
    mapping = {"triton": "TRITON", "deep_gemm": "DEEPGEMM", "flashinfer_trtllm":
               "FLASHINFER_TRTLLM", "flashinfer_cutlass": "FLASHINFER_CUTLASS",
               "marlin": "MARLIN", "aiter": "AITER"}
    if lay.allow_vllm_cutlass:  # requested without it, vLLM raises "disabled"
        mapping["cutlass"] = "VLLM_CUTLASS"
    if c.version >= (0, 25, 0):
        mapping["humming"] = "HUMMING"
    # the explicit --moe-backend is handled before the DeepGEMM environment variable
    return _requested(c, mapping, oracle)


# -- Unquantized ----------------------------------------------------------------------------

def _trtllm_bf16(c: Ctx) -> str | None:
    if c.device.family != 10:
        return "TRT-LLM BF16 MoE runs on sm_10x (B200/GB200) only"
    return None if c.env.flashinfer else "flashinfer is not installed"


def unquantized_oracle(c: Ctx) -> Oracle:
    """``oracle/unquantized.py`` ``_get_priority_backends`` (CUDA): FlashInfer TRTLLM,
    FlashInfer CUTLASS, Triton; both FlashInfer backends move behind Triton on sm_9x."""
    e = f"{FUSED}experts/"
    order = [
        Backend("FlashInfer TRTLLM", "bf16", _trtllm_bf16,
                f"{e}trtllm_bf16_moe.py TrtLlmBf16Experts._supports_current_device"),
        Backend("FlashInfer CUTLASS", "bf16", _flashinfer_cutlass,
                f"{e}flashinfer_cutlass_moe.py FlashInferExperts._supports_quant_scheme"),
        Backend("TRITON", "bf16", lambda _c: None, f"{e}triton_moe.py TritonExperts"),
    ]
    if c.device.family == 9:
        order = [order[2], order[0], order[1]]
    return Oracle("Unquantized", tuple(order),
                  f"{FUSED}oracle/unquantized.py select_unquantized_moe_backend")


# -- Mxfp4 (gpt-oss) ------------------------------------------------------------------------

def _oai_triton(c: Ctx) -> str | None:
    """``experts/gpt_oss_triton_kernels_moe.py`` ``_triton_kernel_moe_supports_current_device``:
    sm_90 up to below sm_110 to 0.31.0, below sm_130 from 0.32.0; triton_kernels is vendored."""
    top = 130 if c.version >= (0, 32, 0) else 110
    if not 90 <= c.device.capability < top:
        return f"the OAI Triton MoE runs on sm_90 to below sm_{top} in this version"
    return None


def mxfp4_oracle(c: Ctx) -> Oracle:
    """``oracle/mxfp4.py`` ``select_mxfp4_moe_backend`` over
    ``_get_priority_backends_for_gpt_oss``, filtered to BF16-activation variants (the
    checkpoint asks for none): FlashInfer TRTLLM MXFP4xBF16, AITER, Triton, FlashInfer
    CUTLASS MXFP4xBF16, Marlin."""
    e = f"{FUSED}experts/"
    order = (
        Backend("FLASHINFER_TRTLLM_MXFP4_BF16", "bf16",
                _family10_flashinfer("TRT-LLM MXFP4 MoE"),
                f"{e}trtllm_mxfp4_moe.py TrtLlmMxfp4ExpertsMonolithic._supports_current_device"),
        Backend("AITER_MXFP4_BF16", "bf16", _not_cuda("AITER"), f"{e}rocm_aiter_moe.py"),
        Backend("TRITON", "bf16", _oai_triton,
                f"{e}gpt_oss_triton_kernels_moe.py _triton_kernel_moe_supports_current_device"),
        Backend("FLASHINFER_CUTLASS_MXFP4_BF16", "bf16", _flashinfer_cutlass,
                f"{e}flashinfer_cutlass_moe.py FlashInferExperts._supports_quant_scheme"),
        Backend("MARLIN", "bf16", _marlin((MXFP4_W,)),
                f"{e}marlin_moe.py MarlinExpertsBase._supports_quant_scheme"),
    )
    return Oracle("Mxfp4", order, f"{FUSED}oracle/mxfp4.py select_mxfp4_moe_backend")


# -- WNA16 (GPTQ / AWQ / compressed-tensors pack-quantized int4) ----------------------------

def _trtllm_mxint4(c: Ctx) -> str | None:
    """``experts/trtllm_mxint4_moe.py`` TrtLlmMxint4ExpertsMonolithic: sm_10x, int4 group 32
    symmetric only."""
    if c.device.family != 10:
        return "TRT-LLM int4 MoE runs on sm_10x (B200/GB200) only"
    if c.layout.weight_key != INT4_SYM32:
        return "TRT-LLM int4 MoE takes symmetric int4 in groups of 32 only"
    return None if c.env.flashinfer else "flashinfer is not installed"


def wna16_oracle(c: Ctx) -> Oracle:
    """``oracle/int_wna16.py`` ``select_wna16_moe_backend``: FlashInfer TRTLLM (mxint4),
    Marlin, then Triton (from 0.27.0) and Humming; Humming before Marlin on sm_90 from
    0.32.0."""
    e = f"{FUSED}experts/"
    order = [
        Backend("FLASHINFER_TRTLLM", "bf16", _trtllm_mxint4, f"{e}trtllm_mxint4_moe.py"),
        Backend("MARLIN", "bf16", _marlin((INT4_SYM, INT4_ASYM, INT4_SYM32)),
                f"{e}marlin_moe.py MarlinExpertsBase._supports_quant_scheme"),
    ]
    if c.version >= (0, 25, 0):
        order.append(Backend("HUMMING", None, _humming, f"{e}fused_humming_moe.py"))
    if c.version >= (0, 32, 0) and c.device.capability == 90:
        order = _humming_first(order)
    return Oracle("WNA16", tuple(order), f"{FUSED}oracle/int_wna16.py select_wna16_moe_backend")


ORACLES: dict[str, Callable[[Ctx], Oracle]] = {
    FAMILY_FP8: fp8_oracle,
    FAMILY_NVFP4: nvfp4_oracle,
    FAMILY_MXFP4: mxfp4_oracle,
    FAMILY_INT4: wna16_oracle,
    UNQUANTIZED: unquantized_oracle,
}
