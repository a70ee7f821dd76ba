#!/usr/bin/env bash
# Prepare, HERE (where PyPI works), what the device needs to measure operator costs with
# vLLM 0.26.0's kernels: a slim vLLM tree (its Python sources and the four CUDA extensions the
# measured ops load), the pure-Python wheels its import chain needs that the device image
# lacks, and this folder's scripts, packed into carry folders of at most FOLDER_MIB each.
#
#   benchmarks/ops/prepare_carry.sh CHECKOUT [FOLDER_MIB]
#
# CHECKOUT is the repository the device call sends (the session's checkout); the folders go
# to CHECKOUT/.ops-carry/c1 ... cN (ignored through CHECKOUT's .git/info/exclude). Every folder
# holds the scripts (device.sh, measure.py, jobs.json) and SHA256SUMS; the payload
# (vllm-slim.tar.xz, split, and wheels.tar) is spread over them in order.
#
# Carried from the vLLM wheel: every .py/.json/header file except vllm-rs (a 42 MB binary of
# the Rust front end), third_party/fmha_sm100 (Blackwell) and the DeepGEMM extension builds
# for other Pythons; the extensions _C_stable_libtorch, _moe_C_stable_libtorch,
# vllm_flash_attn/_vllm_fa3_C (FlashAttention 3; FA2's 305 MB library is left out: vLLM picks
# FA3 on Hopper), _flashmla_C, cumem_allocator, deep_gemm/_C (cp312). Wheels: the import
# chain of vllm._custom_ops, fused_moe, vllm_flash_attn, the mamba / FLA ops and the sampler,
# found by importing them in a CPU venv here (2026-12-05): pyzmq, cbor2, msgspec, pybase64,
# cachetools, openai (+ httpx2, httpcore2, jiter, sniffio, truststore), openai-harmony,
# pydantic (+ pydantic-core, annotated-types, typing-inspection), and the versions of
# typing-extensions, anyio, idna and h11 those require (newer than the image may hold).
set -euo pipefail

checkout="${1:?usage: prepare_carry.sh CHECKOUT [FOLDER_MIB]}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PY:-python3}"
vllm_version=0.26.0
carry="$checkout/.ops-carry"
dl="${OPS_DL:-/tmp/ops-carry-dl}"
mkdir -p "$dl"

tree_bytes=$(cd "$checkout" && { git ls-files; git ls-files --others --exclude-standard; } |
  sort -u | while IFS= read -r f; do [[ -f "$f" ]] && stat -c %s "$f"; done |
  awk '{s+=$1} END {print s+0}')
folder_mib="${2:-$(( (64 * 1048576 - tree_bytes) / 1048576 - 5 ))}"
echo "checkout tree that travels: $((tree_bytes / 1048576)) MiB; carry folders of at most" \
  "$folder_mib MiB"

exclude="$(git -C "$checkout" rev-parse --git-path info/exclude)"
case "$exclude" in /*) ;; *) exclude="$checkout/$exclude" ;; esac
grep -qxF '/.ops-carry/' "$exclude" 2>/dev/null || echo '/.ops-carry/' >>"$exclude"

whl="$(ls "$dl"/vllm-"$vllm_version"-*.whl 2>/dev/null | head -1 || true)"
if [[ -z "$whl" ]]; then
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$dl" "vllm==$vllm_version"
  whl="$(ls "$dl"/vllm-"$vllm_version"-*.whl | head -1)"
fi

if [[ ! -f "$dl/vllm-slim.tar.xz" ]]; then
  rm -rf "$dl/src"
  mkdir -p "$dl/src"
  unzip -q "$whl" 'vllm/*' -x 'vllm/vllm-rs' 'vllm/third_party/fmha_sm100/*' \
    'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/_rust_tool_parser.abi3.so' \
    'vllm/third_party/deep_gemm/_C.cpython-310*' 'vllm/third_party/deep_gemm/_C.cpython-311*' \
    'vllm/third_party/deep_gemm/_C.cpython-313*' 'vllm/third_party/deep_gemm/_C.cpython-314*' \
    -d "$dl/src"
  unzip -q "$whl" 'vllm-*.dist-info/*' -d "$dl/src"
  (cd "$dl/src" && tar -cf - vllm vllm-*.dist-info | xz -T0 -6 >"$dl/vllm-slim.tar.xz")
fi

if [[ ! -f "$dl/wheels.tar" ]]; then
  rm -rf "$dl/wheels"
  mkdir -p "$dl/wheels"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux1_x86_64 -d "$dl/wheels" \
    annotated-types==0.8.0 cachetools==8.0.2 cbor2==6.3.0 httpcore2==2.17.0 httpx2==2.17.0 \
    jiter==0.19.0 msgspec==0.23.0 openai==3.63.0 openai-harmony==0.0.8 pybase64==1.5.1 \
    pydantic==2.14.4 pydantic_core==2.50.5 pyzmq==27.3.0 sniffio==1.3.1 truststore==0.10.5 \
    typing-inspection==0.4.5 typing_extensions==4.16.0 anyio==4.16.0 idna==3.21 h11==0.16.0
  tar -C "$dl" -cf "$dl/wheels.tar" wheels
fi

rm -rf "$carry" "$dl/pieces"
mkdir -p "$carry" "$dl/pieces"
scripts=(device.sh measure.py jobs.json)
script_bytes=0
for s in "${scripts[@]}"; do script_bytes=$((script_bytes + $(stat -c %s "$here/$s"))); done
part=$((folder_mib * 1048576 - script_bytes - 65536))
split -b "$part" -d -a 2 "$dl/vllm-slim.tar.xz" "$dl/pieces/vllm-slim.tar.xz.part-"
cp "$dl/wheels.tar" "$dl/pieces/"
(cd "$dl/pieces" && sha256sum ./* | sed 's| \./| |') >"$dl/SHA256SUMS"
# first fit, in order (the parts of the tarball stay in sequence)
"$py" - "$dl/pieces" "$carry" "$part" "$dl/SHA256SUMS" "$here" "${scripts[@]}" <<'EOF'
import os, shutil, sys
from pathlib import Path
pieces, carry, cap, sums, here = (Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]),
                                  Path(sys.argv[4]), Path(sys.argv[5]))
scripts = sys.argv[6:]
bins, sizes = [[]], [0]
for f in sorted(pieces.iterdir()):
    s = f.stat().st_size
    i = next((i for i, used in enumerate(sizes) if used + s <= cap), None)
    if i is None:
        bins.append([]); sizes.append(0); i = len(bins) - 1
    bins[i].append(f); sizes[i] += s
for i, (b, s) in enumerate(zip(bins, sizes), 1):
    d = carry / f"c{i}"
    d.mkdir(parents=True)
    for f in b:
        shutil.copy(f, d / f.name)
    for name in scripts:
        shutil.copy(here / name, d / name)
    shutil.copy(sums, d / "SHA256SUMS")
    total = sum(p.stat().st_size for p in d.iterdir())
    print(f"{d.name}: {', '.join(f.name for f in b)}  {total / 2**20:.1f} MiB")
EOF
