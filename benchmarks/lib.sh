# Shared set-up of the standalone benchmark scripts (sourced, never run on its own):
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # root, here, py, servelab, stamp
#
# root              the checkout this file sits in
# here              the folder of the script that sourced this file
# py                the Python to run: $PY, else the checkout's .venv
# servelab ARGS...  servelab from this checkout's sources (PYTHONPATH=src) under $py, so a script
#                   measures the tree it sits in, whichever servelab is installed
# stamp LOG WHAT... one line "UTC-time WHAT loadavg <loadavg>" appended to LOG: every CPU timing
#                   here is recorded beside the load of the shared box
# shellcheck shell=bash

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
py="${PY:-$root/.venv/bin/python}"
servelab() { PYTHONPATH="$root/src" "$py" -m servelab "$@"; }
stamp() { local log="$1"; shift; echo "$(date -u +%FT%TZ) $* loadavg $(cat /proc/loadavg)" >>"$log"; }
