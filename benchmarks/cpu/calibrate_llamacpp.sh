#!/usr/bin/env bash
# llama.cpp's CPU calibration (issue 30): twelve llama-server runs on this host, two random
# model families (llama- and qwen2-shaped, ~90 M parameters) at six GGUF file types each,
# one after another, each recorded with its prediction; the host probe and the load average
# around every run are written beside the export. Run it in a quiet window (nothing else
# heavy on the CPU): the decode rates are memory-bandwidth figures of this box.
#
#   bash benchmarks/cpu/calibrate_llamacpp.sh [DB] [OUTDIR]
#
# FAMILIES (default "llama qwen2") picks the recipe families llamacpp-<family>-<type>.toml,
# TAG (default cpu) names what it writes: probe-llamacpp-TAG.json, loadavg-llamacpp-TAG.txt,
# runs-llamacpp-TAG.json, and the runs' label calibration=TAG-llamacpp. The third family,
# a check set (benchmarks/prereg/llamacpp_sets.py set cpu3):
#   FAMILIES=gemma3 TAG=cpu3 bash benchmarks/cpu/calibrate_llamacpp.sh DB OUTDIR
#
# Then: the calibration rows (benchmarks/prereg/llamacpp_sets.py says which recipes calibrate)
#   python benchmarks/priors/from_runs.py OUTDIR/runs-llamacpp-cpu.json --source "..."
# and the check set's errors
#   python benchmarks/prereg/llamacpp_sets.py errors PREDICTIONS.json OUTDIR/runs-llamacpp-cpu.json
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
db="${1:-cpu-llamacpp-calibration.db}"
out="${2:-$here/results}"
mkdir -p "$out"
tag="${TAG:-cpu}"
load="$out/loadavg-llamacpp-$tag.txt"
servelab hardware probe --json -o "$out/probe-llamacpp-$tag.json" > /dev/null
for fam in ${FAMILIES:-llama qwen2}; do
  for t in f16 q8-0 q6-k q5-k-m q4-k-m q4-0; do
    r="llamacpp-$fam-$t"
    stamp "$load" "$r before"
    servelab run "$here/$r.toml" --db "$db" --port auto --label "calibration=$tag-llamacpp" \
      || echo "$r: servelab run exited $?" >> "$load"
    stamp "$load" "$r after"
  done
done
servelab runs export --db "$db" --label "calibration=$tag-llamacpp" -o "$out/runs-llamacpp-$tag.json"
