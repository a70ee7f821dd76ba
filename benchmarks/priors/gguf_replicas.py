"""Print each GGUF header replica's tensor bytes beside the model size llama-bench printed
with the published figure (servelab.synth.gguf_replica.SIZES): the check that the replica's
type mix is llama.cpp's.

    .venv/bin/python benchmarks/priors/gguf_replicas.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from servelab.checkpoint.sources import load_checkpoint
from servelab.synth.gguf_replica import BUILDS, SIZES, write_replica
from servelab.units import GIB


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for model, (arch, types) in BUILDS.items():
            for ft in types:
                path = write_replica(arch, ft, Path(tmp) / f"{model}-{ft}.gguf")
                src = load_checkpoint(str(path))
                nbytes = sum(t.end - t.begin for s in src.shards for t in s.tensors)
                want = SIZES.get((model, ft))
                check = f"; llama-bench printed {want} GiB" if want else ""
                print(f"{model} {ft}: {nbytes / GIB:.2f} GiB{check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
