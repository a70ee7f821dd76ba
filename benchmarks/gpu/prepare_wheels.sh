#!/usr/bin/env bash
# Prepare, HERE (where PyPI works), everything the H200 device needs to run vLLM 0.26.0 and
# servelab, as carry folders of at most 55 MiB each: .gpu-carry/c01 ... cNN (ignored by git
# through .git/info/exclude; never committed).
#
#   benchmarks/gpu/prepare_wheels.sh          # download (cached), resolve, split, pack
#
# What is carried: vllm-0.26.0 (cp38-abi3 manylinux_2_28 x86_64) and every distribution in
# the closure of its Requires-Dist (and servelab's runtime dependencies, from pyproject.toml)
# that the device image LACKS (benchmarks/gpu/image-packages.txt, copied from the device
# docs' KINDS.md). The image's torch 2.11.0 (+ transformers 5.17.0, numpy 2.5.2, triton ...)
# is used, never carried; resolve_wheels.py resolves against stand-ins of those versions.
#
# Left out on purpose (DROP below), each with its reason:
#   numba==0.65.0        needs numpy<2.5; the image has numpy 2.5.2 and its own numba
#                        (vLLM imports numba lazily, for n-gram speculative decoding only)
#   flashinfer-python, apache-tvm-ffi, nvidia-cudnn-frontend, nvidia-cutlass-dsl,
#   quack-kernels, tilelang, tokenspeed-mla, humming-kernels
#                        optional kernel libraries vLLM imports lazily (never at import
#                        time on the Hopper FLASH_ATTN + Triton/CUTLASS path); most JIT-compile
#                        kernels at first use (minutes of lease time) and together they weigh
#                        ~500 MiB (cutlass-dsl cu12+cu13 libs, nvcc/nvvm wheels, tokenspeed
#                        triton fork, z3). Without flashinfer vLLM samples with its PyTorch
#                        sampler and picks non-FlashInfer MoE backends.
#   torchcodec, PyNvVideoCodec   video/audio decoding; text-only model
#
# A device call carries the working tree AND one folder, 64 MiB in all, so a folder holds at
# most 64 MiB less the tree (measured here) and 2 MiB of slack (fixed 61 MiB folders were
# refused once the tree reached 5.8 MiB, 2026-12-04). Files larger than that (only the vLLM
# wheel, ~290 MiB) are split into parts of that size; device_steps.sh reassembles them and
# checks every wheel against SHA256SUMS before installing.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
carry="$root/.gpu-carry"
dl="$carry/dl"
vllm_version="0.26.0"
DROP=(numba flashinfer-python apache-tvm-ffi nvidia-cudnn-frontend nvidia-cutlass-dsl
      quack-kernels tilelang tokenspeed-mla humming-kernels torchcodec PyNvVideoCodec)

# What travels with every call besides one carry folder (tracked and untracked-not-ignored
# files), and so how large a folder may be.
tree_bytes=$(cd "$root" && { git ls-files; git ls-files --others --exclude-standard; } | sort -u |
  while IFS= read -r f; do [[ -f "$f" ]] && stat -c %s "$f"; done | awk '{s+=$1} END {print s+0}')
folder_max=$((64 * 1024 * 1024 - tree_bytes - 2 * 1024 * 1024))
part_bytes=$folder_max
echo "working tree that travels with every call: $((tree_bytes / 1024)) KiB; carry folders of" \
  "at most $((folder_max / 1024)) KiB (limit 64 MiB a call)"

exclude="$(git -C "$root" rev-parse --git-path info/exclude)"
case "$exclude" in /*) ;; *) exclude="$root/$exclude" ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu-carry/' "$exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$exclude"

mkdir -p "$dl/engine"
vllm_whl="$(ls "$dl"/engine/vllm-"$vllm_version"-*.whl 2>/dev/null | head -1 || true)"
if [[ -z "$vllm_whl" ]]; then
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$dl/engine" "vllm==$vllm_version"
  vllm_whl="$(ls "$dl"/engine/vllm-"$vllm_version"-*.whl | head -1)"
fi

# servelab's runtime dependencies, straight from pyproject.toml.
mapfile -t servelab_deps < <("$py" -c '
import tomllib, sys
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
' "$root/pyproject.toml")

drop_args=()
for d in "${DROP[@]}"; do drop_args+=(--drop "$d"); done
"$py" "$here/resolve_wheels.py" --dest "$dl/wheels" --image "$here/image-packages.txt" \
  --engine-wheel "$vllm_whl" "${drop_args[@]}" "${servelab_deps[@]}"

# Pack: split big wheels, then first-fit-decreasing into folders of <= folder_max bytes.
rm -rf "$carry"/c[0-9][0-9] "$dl/pieces"
mkdir -p "$dl/pieces"
(cd "$dl/wheels" && sha256sum ./*.whl | sed 's| \./| |') >"$dl/SHA256SUMS"
for w in "$dl"/wheels/*.whl; do
  if (($(stat -c %s "$w") > part_bytes)); then
    split -b "$part_bytes" -d -a 2 "$w" "$dl/pieces/$(basename "$w").part-"
  else
    ln "$w" "$dl/pieces/"
  fi
done
"$py" - "$dl/pieces" "$carry" "$folder_max" "$dl/SHA256SUMS" <<'EOF'
import os, shutil, sys
from pathlib import Path
pieces, carry, cap, sums = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
files = sorted(pieces.iterdir(), key=lambda p: -p.stat().st_size)
bins: list[list[Path]] = []
sizes: list[int] = []
for f in files:
    s = f.stat().st_size
    for i, used in enumerate(sizes):
        if used + s <= cap:
            bins[i].append(f); sizes[i] += s
            break
    else:
        bins.append([f]); sizes.append(s)
for i, (b, s) in enumerate(zip(bins, sizes), 1):
    d = carry / f"c{i:02d}"
    d.mkdir(parents=True)
    for f in b:
        os.link(f, d / f.name)
    shutil.copy(sums, d / "SHA256SUMS")
    print(f"{d.name}: {len(b):3d} files, {s / 2**20:6.1f} MiB")
EOF

ls -d "$carry"/c[0-9][0-9]
