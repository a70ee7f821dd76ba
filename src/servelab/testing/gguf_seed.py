"""A small valid GGUF file for fuzzing and error tests: every kind of metadata value
(integers, floats, strings, arrays of numbers and of strings, the alignment key) and tensors
in F32, F16 and Q8_0, written with the ``gguf`` package's own writer (test infrastructure)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

__all__ = ["gguf_mutations", "write_seed_gguf"]


def write_seed_gguf(path: Path) -> Path:
    """Write the seed file to ``path`` (about 2 kB) and return it."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(32)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<s>", "</s>", "a", "b"])
    w.add_array("seed.scores", [0.5, -1.0, 2.0])
    w.add_string("general.name", "seed")
    w.add_tensor("token_embd.weight", np.ones((4, 32), dtype=np.float16))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(32, dtype=np.float32))
    q8 = gguf.quants.quantize(np.ones((32, 32), dtype=np.float32),
                              gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_mutations(seed: bytes) -> Any:
    """A hypothesis strategy of broken copies of ``seed``: bits flipped, the file cut,
    bytes inserted, a length or count field rewritten (up to six edits), and bare headers
    (``GGUF`` + random bytes). Needs hypothesis (a development dependency)."""
    from hypothesis import strategies as st

    @st.composite
    def mutated(draw: st.DrawFn) -> bytes:
        raw = bytearray(seed)
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["flip", "cut", "insert", "count"]))
            pos = draw(st.integers(0, max(0, len(raw) - 1)))
            if kind == "flip" and raw:
                raw[pos] ^= 1 << draw(st.integers(0, 7))
            elif kind == "cut":
                del raw[pos:]
            elif kind == "insert":
                raw[pos:pos] = draw(st.binary(min_size=1, max_size=8))
            elif len(raw) >= pos + 8:
                value = draw(st.sampled_from([0, 1, 2**31, 2**32 + 1, 2**63, 2**64 - 1, -1]))
                if value < 0:
                    value = draw(st.integers(0, 2**64 - 1))
                raw[pos:pos + 8] = struct.pack("<Q", value)
        return bytes(raw)

    return st.one_of(mutated(), st.binary(max_size=64).map(lambda b: b"GGUF" + b))
