#!/usr/bin/env bash
# Measure what benchmarks/prereg/load-cpu-* predicted, as stored runs (issue 31): each tiny
# model's load recipe (benchmarks/load/recipes: closed-loop 1, 4, 16, 64 streams at 512 and
# 2,048-token prompts, servelab bench's batch of max(3, 2 x c) requests a point, as the
# prediction simulates; then, where the recipe has a [capacity] table, the pre-registration's
# SLO capacity search on the same server) through `servelab run` into DB. The run keeps its
# plan (with the step costs `servelab calibration report` re-predicts its sweep from), the
# measured capacity and the predicted one. Exported to OUT/runs-cpu-load.json. The load
# average is logged around every run (the 2-core box is shared).
#
#   MODELS="tiny-llama-cpu tiny-qwen3-moe-cpu" bash benchmarks/load/measure_runs.sh OUT [DB]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
out="$1"; db="${2:-$out/load-runs.db}"
mkdir -p "$out"
log="$out/loadavg.log"
for r in ${MODELS:-tiny-llama-cpu tiny-qwen3-moe-cpu}; do
  stamp "$log" "$r run start"
  servelab run "$here/recipes/$r-load.toml" --db "$db" --runs-dir "$out/runs" --json \
    >"$out/$r.run.json" 2>"$out/$r.run.err"
  stamp "$log" "$r run done (exit $?)"
done
servelab runs export --db "$db" --label purpose=load -o "$out/runs-cpu-load.json"
