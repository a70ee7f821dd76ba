"""A small valid GGUF file for fuzzing and error tests: every kind of metadata value
(integers, floats, strings, arrays of numbers and of strings, the alignment key) and tensors
in F32, F16 and Q8_0, written with the ``gguf`` package's own writer (test infrastructure)."""

from __future__ import annotations

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
    """A hypothesis strategy of broken copies of ``seed``
    (:func:`servelab.testing.mutations.byte_mutations`, any count or length field) and bare
    headers (``GGUF`` + random bytes). Needs hypothesis (a development dependency)."""
    from hypothesis import strategies as st

    from servelab.testing.mutations import byte_mutations

    return st.one_of(byte_mutations(seed, field_anywhere=True),
                     st.binary(max_size=64).map(lambda b: b"GGUF" + b))
