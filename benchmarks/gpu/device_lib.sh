# Shared set-up of the scripts that run ON the device (sourced; set WORK first, or take its
# default): the repository copy, where results go, servelab from that copy's sources with the
# carried wheels (/tmp/site) under the image's python3, and a phase banner.
#
#   WORK="${WORK:-/var/tmp/servelab-gpu}"; source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
#
# repo              the repository copy the device call runs in
# OUT               the device call's output folder (else $WORK/out)
# py                the image's python3 (or $PY)
# servelab ARGS...  servelab under $py; SERVELAB_HOME is $WORK/home (engines, results.db)
# say WHAT...       a banner line with the UTC time: every phase logs to stdout
# shellcheck shell=bash

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${WORK:-/var/tmp/servelab-gpu}"
OUT="${OUT:-$WORK/out}"
export PYTHONUNBUFFERED=1 SERVELAB_HOME="$WORK/home" PYTHONPATH="$repo/src:/tmp/site"
mkdir -p "$WORK" "$OUT" "$SERVELAB_HOME"
py="${PY:-$(command -v python3)}"
servelab() { "$py" -m servelab "$@"; }
say() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }
