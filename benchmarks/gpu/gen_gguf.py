"""Write a full-size, random-weight F16 GGUF that llama.cpp loads and serves (issue 30:
llama.cpp measured on the H200). Run on the device, where llama-quantize then makes the
other file types from it, so every type's per-tensor mix is llama.cpp's own.

    PYTHONPATH=src python3 benchmarks/gpu/gen_gguf.py MODEL OUT.gguf [--layers N]

MODEL is a name in servelab.synth.gguf_replica.BUILDS (``llama3-8b``, ``qwen2.5-coder-7b``,
``gpt-oss-20b``, ...): the same architecture keys and tensor list as servelab's header
replicas of the published builds (``add_metadata``, ``tensors``), with the tokenizer servelab's
tiny models use (a trained byte-level BPE of 1,024 tokens, padded to the model's vocabulary
with ordinary tokens ``[PAD<i>]``, which a random model mostly samples and which stream as
text; the embedding and the output matrix keep their full size). Weights are
N(0, 0.02) in F16, norms 1, and F32 where llama.cpp's converter keeps F32 (vectors, biases,
routers); to write 16 GB quickly each matrix is a slice of one 512 MB random
block (kernel speed does not depend on the values). The file is written beside OUT and
renamed when complete.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from servelab.synth.gguf import add_vocab
from servelab.synth.gguf_replica import BUILDS, add_metadata, tensors
from servelab.synth.gguf_types import tensor_type
from servelab.synth.tiny import build_tokenizer

BLOCK = 1 << 28  # values in the random block (F16: 512 MB)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(BUILDS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=0, help="fewer layers than the model's")
    args = ap.parse_args()
    import gguf

    arch = BUILDS[args.model][0]
    if args.layers:
        arch = dataclasses.replace(arch, layers=args.layers)
    t0 = time.monotonic()
    rng = np.random.default_rng(0)
    block = (rng.standard_normal(BLOCK, dtype=np.float32) * 0.02).astype(np.float16)
    tmp = args.out.with_name(args.out.name + ".part")
    w = gguf.GGUFWriter(str(tmp), arch.name)
    add_metadata(w, arch, "F16", f"{args.model} random weights (servelab)")
    with tempfile.TemporaryDirectory() as tok_dir:
        build_tokenizer(Path(tok_dir))
        add_vocab(w, Path(tok_dir), {"vocab_size": arch.vocab, "eos_token_id": 2,
                                     "pad_token_id": 0}, pads_normal=True)
    offset, total = 0, 0
    for name, shape in tensors(arch):
        n = int(np.prod(shape))
        if tensor_type(name, len(shape), "F16", arch.layers) == "F32":  # converter's rule
            data = np.ones(n, np.float32) if name.endswith("norm.weight") else (
                rng.standard_normal(n, dtype=np.float32) * 0.02)
        elif n <= BLOCK:
            offset = (offset + 7919) % (BLOCK - n + 1)
            data = block[offset:offset + n]
        else:
            data = np.resize(block, n)
        w.add_tensor(name, data.reshape(shape))
        total += data.nbytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, args.out)
    print(f"{args.out}: {arch.layers} layers, {total / 2**30:.2f} GiB of tensors, "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
