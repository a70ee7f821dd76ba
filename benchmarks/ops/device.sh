#!/usr/bin/env bash
# ON THE DEVICE: install the carried slim vLLM and measure operator costs, as phases named on
# the command line (run in order). The script lives in every carry folder, so any call runs
#
#   bash .ops-carry/cN/device.sh PHASE...
#
#   env          GPU, driver, clocks, python, torch, disk
#   stash        copy this call's carry folder (.ops-carry/c*) to $WORK/carry (it survives
#                the next call on the warm machine; the repository copy does not keep it)
#   install      check every carried piece against SHA256SUMS, unpack vLLM into /tmp/site,
#                pip-install the wheels there (--no-deps), import the measured modules
#   bg           start the pipeline in its own session (it outlives the call):
#                smoke (one job per op/format) -> warm (JIT compiles, 12 processes)
#                -> measure priority 0 -> measure priority 1, log $WORK/pipeline.log
#   wait:S       wait up to S seconds for the pipeline, printing its progress
#   collect      results so far, smoke rows, logs -> $OUT
#
# Environment: WORK (default /var/tmp/servelab-ops), BUDGET0 / BUDGET1 (seconds for the
# two measure passes), WARM_PROCS.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-/var/tmp/servelab-ops}"
OUT="${OUT:-$WORK/out}"
py="${PY:-$(command -v python3)}"
mkdir -p "$WORK" "$OUT" "$WORK/carry" "$WORK/scripts"
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_CACHE_ROOT="$WORK/vllm-cache" TRITON_CACHE_DIR="$WORK/triton-cache"
export DG_JIT_CACHE_DIR="$WORK/deep_gemm-cache"
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
say() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }

phase_env() {
  say env
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
  "$py" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__,
    torch.version.cuda, triton.__version__, torch.cuda.get_device_name(0))'
  command -v nvcc && nvcc --version | tail -2
  nproc; free -g | head -2; df -h /tmp /var/tmp | tail -2
}

phase_stash() {
  say "stash $(ls -d "$here"/../c* 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
  local d
  for d in "$here"/../c*/; do
    cp -f "$d"/*.part-* "$d"/wheels.tar "$WORK/carry/" 2>/dev/null
    cp -f "$d"/SHA256SUMS "$WORK/carry/"
    cp -f "$d"/device.sh "$d"/measure.py "$d"/jobs.json "$WORK/scripts/"
  done
  ls -la "$WORK/carry" | tail -n +2
}

phase_install() {
  say install
  (cd "$WORK/carry" && sha256sum -c SHA256SUMS) || return 1
  rm -rf /tmp/site
  mkdir -p /tmp/site
  cat "$WORK"/carry/vllm-slim.tar.xz.part-* | xz -d -T0 | tar -x -C /tmp/site || return 1
  tar -C "$WORK" -xf "$WORK/carry/wheels.tar" || return 1
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    "$WORK"/wheels/*.whl 2>&1 | grep -v WARNING | tail -3
  "$py" - <<'EOF' || return 1
import time
t = time.time()
import torch
import vllm, vllm._custom_ops  # noqa
from vllm.vllm_flash_attn import flash_attn_varlen_func  # noqa
from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts  # noqa
from vllm.third_party.flash_linear_attention.ops import chunk_gated_delta_rule  # noqa
from vllm.model_executor.layers.mamba.ops.ssd_combined import mamba_chunk_scan_combined_varlen  # noqa
from vllm.utils.deep_gemm import is_deep_gemm_supported
print("vllm", vllm.__version__, "imports in %.1f s;" % (time.time() - t),
      "deep_gemm supported:", is_deep_gemm_supported(),
      "ops:", hasattr(torch.ops._C, "rms_norm"), hasattr(torch.ops._moe_C, "topk_softmax"))
EOF
}

phase_bg() {
  say "bg (log $WORK/pipeline.log)"
  rm -f "$WORK/pipeline.done"
  cp -f "$here"/measure.py "$here"/jobs.json "$here"/device.sh "$WORK/scripts/" 2>/dev/null
  env WORK="$WORK" BUDGET0="${BUDGET0:-900}" BUDGET1="${BUDGET1:-600}" \
    WARM_PROCS="${WARM_PROCS:-12}" SERVELAB_COMMIT="${SERVELAB_COMMIT:-}" \
    setsid nohup bash "$WORK/scripts/device.sh" pipeline >"$WORK/pipeline.log" 2>&1 </dev/null &
  sleep 20
  tail -5 "$WORK/pipeline.log"
}

phase_pipeline() {
  local m="$WORK/scripts/measure.py" j="$WORK/scripts/jobs.json"
  say smoke
  "$py" "$m" --jobs "$j" --smoke --out "$WORK/smoke.jsonl" --budget 240
  "$py" - "$WORK/smoke.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows[1:]:
    if "error" in r:
        print("SMOKE-ERROR", r["op"], r.get("job"), r.get("point"), r["error"][:300])
ok = sum(1 for r in rows if "latency" in r)
print(f"smoke: {ok} points timed, {sum(1 for r in rows if 'error' in r)} errors")
EOF
  say "warm x${WARM_PROCS}"
  local i pids=()
  for ((i = 0; i < WARM_PROCS; i++)); do
    "$py" "$m" --jobs "$j" --phase warm --shard "$i/$WARM_PROCS" --budget 400 \
      --only moe,gdn_prefill,gdn_decode,mamba_prefill,mamba_decode,sampler,router,gemm/fp8_block_deepgemm \
      --out "$WORK/warm-$i.jsonl" >"$WORK/warm-$i.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  grep -h '"error"' "$WORK"/warm-*.jsonl | head -20
  say "measure priority 0 (budget $BUDGET0 s)"
  "$py" "$m" --jobs "$j" --priority 0 --budget "$BUDGET0" --out "$WORK/results.jsonl"
  say "measure priority 1 (budget $BUDGET1 s)"
  "$py" "$m" --jobs "$j" --priority 1 --skip host --budget "$BUDGET1" \
    --out "$WORK/results-p1.jsonl" 2>&1 | grep -v '^\[.*prio' || true
  touch "$WORK/pipeline.done"
  say done
}

phase_wait() {
  local limit="$1" t0=$SECONDS
  say "wait up to $limit s"
  if [[ ! -f "$WORK/pipeline.log" ]]; then echo "no pipeline running"; return 2; fi
  while [[ ! -f "$WORK/pipeline.done" ]] && ((SECONDS - t0 < limit)); do
    sleep 20
    echo "[$((SECONDS - t0)) s] $(grep -E '^===|^\[' "$WORK/pipeline.log" | tail -1 | cut -c1-150)"
  done
  [[ -f "$WORK/pipeline.done" ]] && echo "pipeline finished"
  grep -E '^===|SMOKE|smoke:|budget' "$WORK/pipeline.log" | tail -40
}

phase_collect() {
  say collect
  local f
  for f in results.jsonl results-p1.jsonl smoke.jsonl; do
    [[ -f "$WORK/$f" ]] && gzip -c "$WORK/$f" >"$OUT/$f.gz"
  done
  cat "$WORK"/warm-*.jsonl 2>/dev/null | gzip -c >"$OUT/warm.jsonl.gz"
  tar -C "$WORK" -czf "$OUT/logs.tgz" pipeline.log $(cd "$WORK" && ls warm-*.log 2>/dev/null)
  ls -la "$OUT"
  for f in results.jsonl results-p1.jsonl; do
    [[ -f "$WORK/$f" ]] && echo "$f: $(grep -c latency "$WORK/$f") timed, $(grep -c '"error"' "$WORK/$f") errors"
  done
}

rc=0
for ph in "$@"; do
  if ((rc != 0)) && [[ "$ph" != collect ]]; then
    echo "skipping $ph (an earlier phase failed)"
    continue
  fi
  case "$ph" in
    env) phase_env ;;
    stash) phase_stash ;;
    install) phase_install ;;
    bg) phase_bg ;;
    pipeline) phase_pipeline ;;
    wait:*) phase_wait "${ph#wait:}" ;;
    collect) phase_collect ;;
    *) echo "unknown phase $ph"; exit 2 ;;
  esac || { rc=$?; echo "phase $ph failed ($rc)"; }
done
exit "$rc"
