"""GGUF file types as llama.cpp's quantizer writes them: which GGML type each tensor gets,
and numpy encoders for the k-quant blocks ``gguf.quants`` can only decode.

:func:`tensor_type` follows ``llama_tensor_get_type`` (src/llama-quant.cpp, llama.cpp as
vendored in llama-cpp-python 0.3.36) for the file types servelab writes: F32 and F16 (every
2-D weight that type), Q8_0 (every 2-D weight Q8_0), Q4_0, Q5_0 and Q6_K (every 2-D weight
that type, the output matrix Q6_K), Q4_K_M and Q5_K_M (Q4_K / Q5_K, with ``attn_v`` and
``ffn_down`` Q6_K in the layers ``use_more_bits`` picks, the output matrix Q6_K) and
MXFP4_MOE (routed experts MXFP4, every other 2-D weight Q8_0). Vectors (norms, biases) and
MoE routers stay F32 as llama.cpp's converter writes them. A k-quant needs rows that are a
multiple of 256 values; llama.cpp then falls back to another type, servelab refuses.

:func:`quantize` writes Q4_K, Q5_K and Q6_K blocks with llama.cpp's layouts (scale and min
per sub-block, six-bit scales packed as ``get_scale_min_k4`` reads them) from a plain
min/max choice of scales (llama.cpp searches for better ones: the values differ slightly, the
bytes and the kernels llama.cpp runs are the same); the other types go to ``gguf.quants``.
``gguf.quants.dequantize`` reads every block back (tests/synth/test_gguf_types.py).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from servelab.errors import UsageError

__all__ = ["FILE_TYPES", "FileType", "quantize", "tensor_type", "use_more_bits"]

FileType = Literal["F32", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q5_0", "Q4_0"]
FILE_TYPES: tuple[FileType, ...] = (
    "F32", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q5_0", "Q4_0",
)
QK_K = 256
_K_TYPES = {"Q4_K", "Q5_K", "Q6_K"}


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers and every
    third layer between them get the larger type in the ``_M`` mixes."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


def tensor_type(name: str, ndim: int, file_type: str, n_layers: int) -> str:
    """The GGML type llama.cpp's quantizer gives tensor ``name`` (of ``ndim`` dimensions)
    in a ``file_type`` GGUF of ``n_layers`` layers."""
    if ndim <= 1 or file_type == "F32" or ".ffn_gate_inp." in name or name.endswith(".bias"):
        return "F32"
    if file_type in ("F16", "Q8_0"):
        return file_type
    if file_type == "MXFP4_MOE":
        return "MXFP4" if "_exps." in name else "Q8_0"
    if name == "output.weight":
        return "Q6_K"
    if file_type in ("Q4_K_M", "Q5_K_M"):
        if ".attn_v." in name or ".ffn_down." in name:
            layer = int(name.split(".")[1])
            if use_more_bits(layer, n_layers):
                return "Q6_K"
        return file_type.removesuffix("_M")
    if file_type in ("Q6_K", "Q5_0", "Q4_0"):
        return file_type
    raise UsageError(f"unsupported GGUF file type {file_type!r}")


def quantize(data: np.ndarray[Any, Any], ggml_type: str) -> np.ndarray[Any, Any]:
    """``data`` (float, last axis the row) as ``ggml_type`` blocks: uint8, byte shape."""
    import gguf

    if ggml_type not in _K_TYPES:
        return gguf.quants.quantize(data.astype(np.float32), gguf.GGMLQuantizationType[ggml_type])
    if data.shape[-1] % QK_K:
        raise UsageError(
            f"{ggml_type} needs rows of a multiple of {QK_K} values, not {data.shape[-1]}"
        )
    blocks = data.astype(np.float32).reshape(-1, QK_K)
    if ggml_type == "Q6_K":
        packed = _q6_k(blocks)
    else:
        packed = _qx_k(blocks, 5 if ggml_type == "Q5_K" else 4)
    per_row = data.shape[-1] // QK_K * packed.shape[-1]
    return packed.reshape(*data.shape[:-1], per_row)


def _f16(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return x.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _qx_k(x: np.ndarray[Any, Any], bits: int) -> np.ndarray[Any, Any]:
    """Q4_K (``bits`` 4) or Q5_K (5): eight sub-blocks of 32, each ``d*sc*q - dmin*m``."""
    n = x.shape[0]
    nmax = (1 << bits) - 1
    sub = x.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=-1), 0.0)
    scale = (sub.max(axis=-1) - lo) / nmax
    d = scale.max(axis=-1) / 63
    dmin = (-lo).max(axis=-1) / 63
    d16 = d.astype(np.float16).astype(np.float32)
    dmin16 = dmin.astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.rint(np.nan_to_num(scale / d16[:, None])), 0, 63).astype(np.uint8)
        mn = np.clip(np.rint(np.nan_to_num(-lo / dmin16[:, None])), 0, 63).astype(np.uint8)
        step = (d16[:, None] * sc)[..., None]
        off = (dmin16[:, None] * mn)[..., None]
        q = np.clip(np.rint(np.nan_to_num((sub + off) / step)), 0, nmax).astype(np.uint8)
    # six-bit scales and mins as get_scale_min_k4 unpacks them
    scales = np.empty((n, 12), np.uint8)
    scales[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    low = (q & 0x0F).reshape(n, 4, 2, 32)
    qs = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(n, 128)
    parts = [_f16(d16), _f16(dmin16), scales]
    if bits == 5:
        high = ((q >> 4) & 1).astype(np.uint8)  # (n, 8, 32): bit j of qh[t] is sub-block j
        qh = np.zeros((n, 32), np.uint8)
        for j in range(8):
            qh |= high[:, j] << j
        parts.append(qh)
    return np.concatenate([*parts, qs], axis=-1)


def _q6_k(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Q6_K: sixteen sub-blocks of 16, each ``d*sc*(q-32)`` with an int8 ``sc``."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    scale = np.abs(sub).max(axis=-1) / 31
    d = np.abs(scale).max(axis=-1) / 127
    d16 = d.astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.rint(np.nan_to_num(scale / d16[:, None])), -128, 127).astype(np.int8)
        step = (d16[:, None] * sc)[..., None]
        q = np.clip(np.rint(np.nan_to_num(sub / step)), -32, 31).astype(np.int16) + 32
    q = q.astype(np.uint8).reshape(n, 2, 4, 32)  # [half, group, t]
    low, high = q & 0x0F, q >> 4
    ql = (low[:, :, 0:2] | (low[:, :, 2:4] << 4)).reshape(n, 128)
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6))
    return np.concatenate([ql, qh.reshape(n, 64), sc.view(np.uint8), _f16(d16)], axis=-1)
