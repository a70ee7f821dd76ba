"""Quantized and MTP variants of real tiny checkpoints, with the real tensor layouts.

Starting from a tiny checkpoint written by :func:`servelab.synth.tiny.make_tiny_model`:

* ``fp8-channel`` — compressed-tensors ``float-quantized`` (FP8_DYNAMIC: channel-wise
  F8_E4M3 ``weight`` + ``weight_scale`` [out, 1], dynamic per-token activations);
* ``nvfp4`` — compressed-tensors ``nvfp4-pack-quantized`` (NVFP4A16: ``weight_packed``
  U8 [out, in/2] + ``weight_scale`` F8_E4M3 [out, in/16] + ``weight_global_scale`` F32);
* ``fp8-block`` — fine-grained FP8 (``quant_method: fp8``, ``weight_block_size``):
  ``weight`` F8_E4M3 + ``weight_scale_inv`` F32 per block;
* ``modelopt-nvfp4`` — ModelOpt NVFP4: ``weight`` U8 [out, in/2] + ``weight_scale``
  F8_E4M3 [out, in/16] + ``weight_scale_2`` F32 [] + ``input_scale`` F32 [] and an
  ``hf_quant_config.json``.

The two compressed-tensors variants are produced by the ``compressed-tensors`` library
itself (its scale computation, its compressors, its config model); the other two follow
the layouts of ``shared/facts.md`` by hand. The quantized values are real quantizations
of the tiny model's random weights.

MTP variants: :func:`declare_mtp` (config declares an MTP head, none ships) and
:func:`add_mtp_head` (ships Qwen3.5-layout ``mtp.*`` tensors, declared or not).

``torch``, ``safetensors`` and ``compressed-tensors`` are imported lazily (``synth``).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servelab.errors import InputError, UsageError
from servelab.outfile import atomic_dir
from servelab.synth.replica import EXPERTS_AND_ATTENTION, replica_tensors

VARIANTS = ("fp8-channel", "nvfp4", "fp8-block", "modelopt-nvfp4")
_NEVER = re.compile(r"(\.mlp\.gate$|shared_expert_gate$|in_proj_(a|b|ba)$|lm_head$|embed)")
_FP8_MAX = 448.0
_FP4_MAX = 6.0


def _need(what: str) -> None:
    raise InputError(f"{what} needs the 'synth' extra: pip install 'servelab[synth]'")


def _load(src: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        from safetensors.torch import load_file
    except ImportError:  # pragma: no cover
        _need("quantizing a checkpoint")
    single = src / "model.safetensors"
    if not single.is_file():
        raise InputError("expected a single-file tiny checkpoint (model.safetensors)", path=src)
    cfg_path = src / "config.json"
    if not cfg_path.is_file():
        raise InputError("no config.json", path=src)
    return dict(load_file(str(single))), json.loads(cfg_path.read_text())


def _write(
    dst: Path,
    src: Path,
    tensors: Mapping[str, Any],
    config: Mapping[str, Any],
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write a complete checkpoint directory atomically (temp dir, then rename)."""
    from safetensors.torch import save_file

    if dst.exists():
        raise UsageError(f"{dst} already exists; choose a new output directory")
    with atomic_dir(dst) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.name not in ("model.safetensors", "config.json"):
                shutil.copy2(f, tmp / f.name)
        save_file(
            {k: v.contiguous() for k, v in tensors.items()},
            str(tmp / "model.safetensors"),
            metadata={"format": "pt"},
        )
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, doc in (extra or {}).items():
            (tmp / name).write_text(json.dumps(doc, indent=2) + "\n")
    return dst


def _targets(tensors: Mapping[str, Any], patterns: Sequence[str]) -> list[str]:
    """Linear modules (2D ``.weight``) selected by ``patterns``."""
    out = []
    for name, t in tensors.items():
        if not name.endswith(".weight") or t.dim() != 2:
            continue
        mod = name[: -len(".weight")]
        if _NEVER.search(mod) or "norm" in mod.rsplit(".", 1)[-1]:
            continue
        if any(re.search(p, mod) for p in patterns):
            out.append(mod)
    return out


def _ignored(tensors: Mapping[str, Any], quantized: Sequence[str]) -> list[str]:
    q = set(quantized)
    return sorted(
        n[: -len(".weight")]
        for n, t in tensors.items()
        if n.endswith(".weight")
        and t.dim() == 2
        and n[: -len(".weight")] not in q
        and "norm" not in n
        and "embed" not in n
    )


def _ct(tensors: dict[str, Any], mods: Sequence[str], preset: str, fmt: str) -> dict[str, Any]:
    import torch
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    from compressed_tensors.quantization.utils.helpers import (
        calculate_qparams,
        generate_gparam,
    )

    scheme = QuantizationScheme(targets=["Linear"], **PRESET_SCHEMES[preset])
    compressor = BaseCompressor.get_value_from_registry(fmt)
    args = scheme.weights
    assert args is not None
    for mod in mods:
        w = tensors.pop(f"{mod}.weight").to(torch.float32)
        state: dict[str, Any] = {"weight": w}
        if args.strategy == "channel":
            lo, hi = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
            scale, zp = calculate_qparams(lo, hi, args)
        else:  # tensor_group (NVFP4): global scale over the tensor, local per 16
            gscale = generate_gparam(w.amin(), w.amax())
            groups = w.unflatten(-1, (w.shape[-1] // args.group_size, args.group_size))
            scale, zp = calculate_qparams(
                groups.amin(-1), groups.amax(-1), args, global_scale=gscale
            )
            state["weight_global_scale"] = gscale
        state["weight_scale"] = scale
        state["weight_zero_point"] = zp
        out = compressor.compress(state, scheme)
        for k, v in out.items():
            if k == "weight_scale" and v.dtype == torch.float32:
                v = v.to(torch.bfloat16)  # llm-compressor stores FP8 channel scales in BF16
            tensors[f"{mod}.{k}"] = v
    dumped: dict[str, Any] = scheme.model_dump(mode="json", exclude_none=False)
    return dumped


def _fp8_block(tensors: dict[str, Any], mods: Sequence[str], block: tuple[int, int]) -> None:
    import torch

    bo, bi = block
    for mod in mods:
        w = tensors.pop(f"{mod}.weight").to(torch.float32)
        out_f, in_f = w.shape
        no, ni = math.ceil(out_f / bo), math.ceil(in_f / bi)
        padded = torch.zeros(no * bo, ni * bi)
        padded[:out_f, :in_f] = w
        blocks = padded.reshape(no, bo, ni, bi)
        amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
        scale_inv = amax / _FP8_MAX  # dequant: w ≈ fp8 × scale_inv
        q = (blocks / scale_inv[:, None, :, None]).reshape(no * bo, ni * bi)[:out_f, :in_f]
        tensors[f"{mod}.weight"] = q.clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
        tensors[f"{mod}.weight_scale_inv"] = scale_inv.to(torch.float32)


def _modelopt_nvfp4(tensors: dict[str, Any], mods: Sequence[str], input_amax: float) -> None:
    import torch
    from compressed_tensors.compressors.nvfp4.helpers import (
        pack_fp4_to_uint8,
    )

    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    for mod in mods:
        w = tensors.pop(f"{mod}.weight").to(torch.float32)
        out_f, in_f = w.shape
        scale_2 = w.abs().amax().clamp(min=1e-12) / (_FP4_MAX * _FP8_MAX)
        g = w.reshape(out_f, in_f // 16, 16)
        block_scale = (g.abs().amax(-1) / _FP4_MAX / scale_2).clamp(max=_FP8_MAX)
        block_scale = block_scale.to(torch.float8_e4m3fn)
        eff = (block_scale.to(torch.float32) * scale_2).clamp(min=1e-12)
        x = (g / eff[..., None]).clamp(-_FP4_MAX, _FP4_MAX)
        idx = (x.abs()[..., None] - grid).abs().argmin(-1)
        q = (grid[idx] * torch.sign(x)).reshape(out_f, in_f)
        tensors[f"{mod}.weight"] = pack_fp4_to_uint8(q)
        tensors[f"{mod}.weight_scale"] = block_scale
        tensors[f"{mod}.weight_scale_2"] = scale_2.reshape(())
        tensors[f"{mod}.input_scale"] = torch.tensor(input_amax / (_FP4_MAX * _FP8_MAX))


def quantize_checkpoint(
    src: Path,
    dst: Path,
    variant: str,
    *,
    targets: Sequence[str] = EXPERTS_AND_ATTENTION,
    block: tuple[int, int] = (128, 128),
) -> Path:
    """Write a quantized copy of the tiny checkpoint ``src`` to ``dst``.

    ``targets``: regexes over module paths choosing the linear layers to quantize
    (default: routed + shared experts and full-attention projections); every other linear
    layer is written to the format's ignore list.
    """
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    tensors, config = _load(src)
    mods = _targets(tensors, targets)
    if not mods:
        raise UsageError(f"no linear layer of {src} matches the quantization targets")
    ignore = _ignored(tensors, mods)
    extra: dict[str, dict[str, Any]] = {}
    if variant in ("fp8-channel", "nvfp4"):
        preset, fmt = (
            ("FP8_DYNAMIC", "float-quantized")
            if variant == "fp8-channel"
            else ("NVFP4A16", "nvfp4-pack-quantized")
        )
        from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme
        from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

        _ct(tensors, mods, preset, fmt)
        qc = QuantizationConfig(
            config_groups={
                "group_0": QuantizationScheme(targets=["Linear"], **PRESET_SCHEMES[preset])
            },
            format=fmt,
            ignore=ignore,
            quantization_status="compressed",
        )
        config["quantization_config"] = qc.model_dump(mode="json")
        config["quantization_config"]["quant_method"] = "compressed-tensors"
    elif variant == "fp8-block":
        _fp8_block(tensors, mods, block)
        config["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": list(block),
            "modules_to_not_convert": ignore,
        }
    else:
        emb = next((v for k, v in tensors.items() if "embed_tokens" in k), None)
        amax = float(emb.abs().max()) if emb is not None else 1.0
        _modelopt_nvfp4(tensors, mods, amax)
        q = {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "exclude_modules": ignore,
        }
        config["quantization_config"] = {"quant_method": "modelopt", **q}
        extra["hf_quant_config.json"] = {
            "producer": {"name": "modelopt", "version": "servelab-synth"},
            "quantization": q,
        }
    return _write(dst, src, tensors, config, extra)


def declare_mtp(
    src: Path, dst: Path, *, layers: int = 1, key: str = "mtp_num_hidden_layers"
) -> Path:
    """Copy ``src`` with a config that declares ``layers`` MTP layers; no MTP tensor ships."""
    tensors, config = _load(src)
    config[key] = layers
    return _write(dst, src, tensors, config)


#: The config key that declares MTP layers, per model type add_mtp_head supports.
_MTP_KEYS = {"qwen3_5_moe_text": "mtp_num_hidden_layers", "qwen3_next": "num_nextn_predict_layers"}


def add_mtp_head(
    src: Path, dst: Path, *, declare: bool = True, fused_experts: bool = False, seed: int = 0
) -> Path:
    """Copy ``src`` (a Qwen3.5-MoE text or a Qwen3-Next checkpoint) adding a random-weight MTP
    head of the same form (both name it ``mtp.*``; vLLM serves Qwen3-Next's with
    ``{"method": "qwen3_next_mtp"}``).

    Names and shapes come from :func:`servelab.synth.replica.replica_tensors`
    (``mtp.fc``, ``mtp.pre_fc_norm_*``, ``mtp.layers.0.*``, ``mtp.norm``). ``declare``:
    also declare one MTP layer in the config (``mtp_num_hidden_layers`` for Qwen3.5,
    ``num_nextn_predict_layers`` for Qwen3-Next). The head's dtype is the checkpoint's.
    """
    import torch

    tensors, config = _load(src)
    cfg = dict(config)
    cfg.setdefault("mtp_num_hidden_layers", 1)
    key = _MTP_KEYS.get(str(cfg.get("model_type")))
    if key is None:
        raise UsageError("add_mtp_head needs a qwen3_5_moe_text or qwen3_next checkpoint")
    plan = replica_tensors(cfg, mtp="fused" if fused_experts else "per-expert")
    dtype = next(iter(tensors.values())).dtype if tensors else torch.bfloat16
    gen = torch.Generator().manual_seed(seed)
    for spec in plan.tensors:
        if spec.name.startswith("mtp."):
            tensors[spec.name] = (torch.randn(spec.shape, generator=gen) * 0.02).to(dtype)
    if declare:
        config[key] = 1
    else:
        config.pop(key, None)
    return _write(dst, src, tensors, config)

