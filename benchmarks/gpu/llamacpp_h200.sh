#!/usr/bin/env bash
# llama.cpp on the H200 (issue 30): a CUDA build of llama-server, full-size random-weight GGUFs
# at llama.cpp's own file types, each served and measured by `servelab run`, and llama-bench
# beside it (the tool published llama.cpp figures come from).
#
# Here (where PyPI works), once:   bash benchmarks/gpu/llamacpp_h200.sh prepare
#   -> .lc-carry/ (ignored): the llama.cpp source llama-cpp-python 0.3.36 vendors (the same
#      source servelab's CPU engine build compiles; models, docs, tests and the other GPU
#      backends pruned) and the wheels of servelab's dependencies the device image lacks.
# Device, calls back to back (carry .lc-carry), each a list of phases; every phase skips what
# an earlier call finished, so a call cut off at its limit is simply repeated:
#   bash benchmarks/gpu/llamacpp_h200.sh setup build
#   bash benchmarks/gpu/llamacpp_h200.sh gen:llama3-8b quant:llama3-8b serve:llama3-8b ...
#   bash benchmarks/gpu/llamacpp_h200.sh collect
# Phases:
#   setup           wheels -> /tmp/site, source -> $WORK/src, nvidia-smi
#   build           cmake (CUDA, sm_90) + ninja: llama-server, llama-bench, llama-quantize;
#                   a servelab engine manifest for the built llama-server
#   gen:M           benchmarks/gpu/gen_gguf.py M -> $WORK/gguf/M-F16.gguf
#   quant:M         llama-quantize M-F16 -> every other type of M's recipes
#   serve:M         `servelab run` of each recipe llamacpp-M-*-h200.toml not yet stored
#   bench:M         llama-bench pp512 / tg128 at depth 0 and 4096 (-fa 1 -ngl 99) per type
#   quant, serve and bench take M:T,T,... for the listed GGUF types only (e.g. bench:M:Q4_K_M)
#   rm:M            delete M's GGUFs (disk); rmf16:M only its F16 (once quantized)
#   collect         runs export, engine logs, llama-bench output -> $OUT
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-/var/tmp/servelab-gpu/lcpp}"
source "$here/device_lib.sh"  # repo, OUT, py, servelab, say; exports SERVELAB_HOME, PYTHONPATH
carry="$repo/.lc-carry"
types_of() {  # the GGUF types $2 names (T,T,...), else those of model $1's recipes
  if [[ -n ${2:-} ]]; then echo "${2//,/ }"; return; fi
  sed -n 's|^path = ".*/'"$1"'-\(.*\)\.gguf"|\1|p' "$here"/llamacpp-"$1"-*-h200.toml
}
recipe_of() {  # model $1's recipe for GGUF type $2 (Q4_K_M -> llamacpp-M-q4-k-m-h200.toml)
  local slug=${2,,}
  echo "$here/llamacpp-$1-${slug//_/-}-h200.toml"
}

phase_prepare() {
  local src=/tmp/lc-prepare dl="$repo/.gpu-carry/dl/wheels" w
  mkdir -p "$carry/whl" "$src"
  exclude="$(git -C "$repo" rev-parse --git-path info/exclude)"
  grep -qxF '/.lc-carry/' "$repo/$exclude" 2>/dev/null || echo '/.lc-carry/' >>"$repo/$exclude"
  "$repo/.venv/bin/python" -m pip download -q --no-deps --no-binary :all: -d "$src" \
    llama-cpp-python==0.3.36
  rm -rf "$src/x" && mkdir "$src/x" && tar xzf "$src"/llama_cpp_python-0.3.36.tar.gz -C "$src/x"
  local lc="$src/x/llama_cpp_python-0.3.36/vendor/llama.cpp"
  rm -rf "$lc"/{models,docs,media,tests,benches,pocs,ci,app,skills,conversion}
  for b in et metal hexagon sycl vulkan opencl cann musa webgpu zdnn zendnn openvino virtgpu blas hip rpc; do
    rm -rf "$lc/ggml/src/ggml-$b"
  done
  tar czf "$carry/llama.cpp.tar.gz" -C "$(dirname "$lc")" llama.cpp
  # servelab's runtime dependencies the image lacks (resolved for the image by prepare_wheels.sh)
  for w in annotated_types gguf orjson platformdirs psycopg psycopg_binary pydantic \
           pydantic_core sqlalchemy typing_inspection; do
    cp "$dl/$w"-[0-9]*.whl "$carry/whl/"
  done
  du -sh "$carry"/*
}

phase_setup() {
  say setup
  mkdir -p "$WORK" "$OUT" "$SERVELAB_HOME"
  if [[ ! -d /tmp/site/pydantic ]]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      "$carry"/whl/*.whl || return 1
  fi
  [[ -d "$WORK/src/llama.cpp" ]] || { mkdir -p "$WORK/src" && tar xzf "$carry/llama.cpp.tar.gz" -C "$WORK/src"; }
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  nproc; df -h "$WORK" | tail -1
  servelab --version
}

phase_build() {
  say build
  local b="$WORK/build"
  if [[ ! -f "$b/build.ninja" ]]; then
    cmake -S "$WORK/src/llama.cpp" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_COMMIT=llama-cpp-python-0.3.36 >"$OUT/cmake.log" 2>&1 \
      || { tail -30 "$OUT/cmake.log"; return 1; }
  fi
  ninja -C "$b" -j "$(nproc)" llama-server llama-bench llama-quantize >"$WORK/ninja.log" 2>&1 \
    || { tail -30 "$WORK/ninja.log"; return 1; }
  tail -2 "$WORK/ninja.log"
  local eng="$SERVELAB_HOME/engines/llamacpp"
  mkdir -p "$eng"
  "$b/bin/llama-server" --version 2>&1 | tail -3
  "$py" - "$eng" "$b/bin/llama-server" "$py" <<'PY'
import json, sys, datetime as dt
from pathlib import Path
from servelab.engines.llamacpp.build import LlamaServerBuilder
root, exe, py = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
versions = LlamaServerBuilder().versions(exe)
assert versions, f"{exe} --version gave no version"
(root / "manifest.json").write_text(json.dumps({
    "build": "llamacpp", "python": py, "root": str(root), "versions": versions,
    "installed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    "executable": str(exe), "packages": []}, indent=2))
print("manifest:", versions)
PY
}

phase_gen() {
  local m=$1 f="$WORK/gguf/$1-F16.gguf"
  say "gen $m"
  mkdir -p "$WORK/gguf"
  [[ -f "$f" ]] || "$py" "$here/gen_gguf.py" "$m" "$f" || return 1
}

phase_quant() {
  local m=$1 t f
  for t in $(types_of "$m" "${2:-}"); do
    f="$WORK/gguf/$m-$t.gguf"
    [[ -f "$f" || $t == F16 ]] && continue
    say "quantize $m $t"
    "$WORK/build/bin/llama-quantize" "$WORK/gguf/$m-F16.gguf" "$f.part" "$t" "$(nproc)" \
      >>"$OUT/quantize-$m.log" 2>&1 && mv "$f.part" "$f" || { tail -5 "$OUT/quantize-$m.log"; return 1; }
    ls -la "$f"
  done
}

phase_serve() {
  local m=$1 t r name
  for t in $(types_of "$m" "${2:-}"); do
    r=$(recipe_of "$m" "$t")
    name=$(basename "$r" .toml)
    [[ -f "$WORK/done/$name" ]] && continue
    say "servelab run $name"
    timeout 240 "$py" -m servelab run "$r" --runs-dir "$WORK/runs" --port auto \
      --label calibration=h200-llamacpp >"$WORK/run-$name.log" 2>&1 \
      && { mkdir -p "$WORK/done"; touch "$WORK/done/$name"; }
    tail -25 "$WORK/run-$name.log"
  done
}

phase_bench() {
  local m=$1 t
  for t in $(types_of "$m" "${2:-}"); do
    [[ -f "$OUT/llama-bench-$m-$t.json" ]] && continue
    say "llama-bench $m $t"
    "$WORK/build/bin/llama-bench" -m "$WORK/gguf/$m-$t.gguf" -p 512 -n 128 -d 0,4096 -fa 1 \
      -ngl 99 -r 3 -o json >"$OUT/llama-bench-$m-$t.json.part" 2>>"$OUT/llama-bench.err" \
      && mv "$OUT/llama-bench-$m-$t.json.part" "$OUT/llama-bench-$m-$t.json"
    "$py" -c 'import json,sys; [print(r["model_type"], r["n_prompt"], r["n_gen"], r["n_depth"], round(r["avg_ts"],1)) for r in json.load(open(sys.argv[1]))]' "$OUT/llama-bench-$m-$t.json" 2>/dev/null
  done
}

phase_rm() { say "rm $1"; rm -f "$WORK/gguf/$1"-*.gguf; df -h "$WORK" | tail -1; }
phase_rmf16() { say "rm $1 F16"; rm -f "$WORK/gguf/$1-F16.gguf"; df -h "$WORK" | tail -1; }

phase_collect() {
  say collect
  servelab runs list --label calibration=h200-llamacpp | tail -20
  servelab runs export --label calibration=h200-llamacpp -o "$OUT/runs-llamacpp-h200.json"
  tar czf "$OUT/runs-dirs.tgz" -C "$WORK" runs run-*.log 2>/dev/null
  cp "$WORK/ninja.log" "$OUT/" 2>/dev/null
  ls -la "$OUT"
}

for p in "$@"; do
  arg=${p#*:} types=""  # PHASE:M or PHASE:M:T,T,...
  [[ $arg == *:* ]] && types=${arg#*:} arg=${arg%%:*}
  case "$p" in
    prepare) phase_prepare ;;
    setup) phase_setup ;;
    build) phase_build ;;
    gen:*) phase_gen "$arg" ;;
    quant:*) phase_quant "$arg" "$types" ;;
    serve:*) phase_serve "$arg" "$types" ;;
    bench:*) phase_bench "$arg" "$types" ;;
    rm:*) phase_rm "$arg" ;;
    rmf16:*) phase_rmf16 "$arg" ;;
    collect) phase_collect ;;
    *) echo "unknown phase $p" >&2; exit 2 ;;
  esac || { echo "phase $p failed" >&2; exit 1; }
done
