#!/usr/bin/env bash
# Pre-register servelab's load predictions on the H200 for builds it has never run there
# (issue 31): header replicas at published dimensions (`servelab synth replica`), planned with
# vLLM 0.26.0's rules and the shipped priors (no store), at closed-loop concurrency 4, 16, 64
# and 512 / 2,048-token prompts (128 output tokens), with the predicted SLO capacity. A later
# lease measures them with vLLM 0.26.0's dummy loader over the same replicas (their config.json
# and headers: benchmarks/gpu/gen_checkpoint.py --sparse writes the equivalent for its presets).
#
#   bash benchmarks/load/prereg_h200.sh OUT_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
out="$1"
work="$(mktemp -d)"
mkdir -p "$out"
for m in qwen2.5-7b mistral-7b gemma-3-12b; do
  servelab synth replica "$work/$m" --model "$m" >/dev/null
  servelab plan "$work/$m" -H h200 --engine-version 0.26.0 --max-model-len 16384 \
    --kv-cache-memory-bytes 32GiB --no-store --prompt-lens 512,2048 --concurrency 4,16,64 \
    --output-len 128 --slo tpot_p50=15,ttft_p99=1000 --json >"$out/plan-$m-h200.json"
  echo "$m written"
done
rm -rf "$work"
