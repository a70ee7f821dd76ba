#!/usr/bin/env bash
# The steps servelab's H200 validation runs ON THE DEVICE, as phases named on the command line
# (run in the order given), e.g.
#
#   bash benchmarks/gpu/device_steps.sh env stash gen-bg    # 1st call (carry .gpu-carry/c01)
#   bash benchmarks/gpu/device_steps.sh stash status        # calls 2..N (carry c02 ... cNN)
#   bash benchmarks/gpu/device_steps.sh install wait-gen run-bg wait:480 collect
#   bash benchmarks/gpu/device_steps.sh wait:540 collect    # only if the run was still going
#
# Seen on the device (2026-12-02): a carried folder does NOT survive the next call inside the
# repository (each call's .gpu-carry holds only that call's folder), so `stash` copies it to
# $WORK/carry at once; $WORK (/var/tmp) does survive between calls on the warm machine.
#
# Phases
#   env      GPU, driver, python, disk, memory; the image's pip freeze -> $OUT
#   gen-bg   start gen_checkpoint.py in its own session (it outlives the call; the lease
#            keeps running while the next carry calls upload) -> $WORK/ckpt, log $WORK/gen.log
#   gen      the same in the foreground
#   stash    copy the carried .gpu-carry/c* folder(s) to $WORK/carry (outside the repo)
#   status   tail of the generator's and the run's logs
#   verify   reassemble split wheels from the carried folders and check SHA256SUMS only
#   install  reassemble split wheels from every carried folder .gpu-carry/c*, check each
#            against SHA256SUMS, pip install --no-index --no-deps --target /tmp/site, then
#            import vLLM's API server and list unmet requirements of what was installed
#   wait-gen wait for the generator to finish (fails if it failed)
#   run-bg   probe, inspect, plan (h200 profile; h200 + probe ceilings), then
#            `servelab run RECIPE` in its own session -> $WORK/run.log
#   wait:S   wait up to S seconds for the run to finish
#   collect  export the run (JSON), build the site, copy engine log + facts + reports to $OUT
#
# Calibration runs (issue 12: more architectures, vLLM's dummy loader, no weights on disk):
#   gen-sparse  sparse header-replica checkpoints for every CAL_SPECS entry (seconds each)
#   cal-bg      in its own session: probe, then for each CAL_RECIPES entry inspect + plan +
#               `servelab run` in turn -> $WORK/cal.log, $WORK/cal/<name>/
#   cal-wait:S  wait up to S seconds for the calibration runs
#   cal-collect export all runs, engine logs, plans and inspect reports -> $OUT/cal.tgz
#
# Decode profiles (issue 12: where a decode step's time goes):
#   prof-bg     in its own session: for each PROF_RECIPES entry, benchmarks/gpu/profile_decode.py
#               (vLLM's torch profiler over 64 decode iterations; PROF_ARGS="--prefill 512,2048"
#               traces one prefill step per prompt length instead) -> $WORK/prof/<name>/
#   prof-wait:S wait up to S seconds for the profiles
#   prof-collect  the profiles' summaries and engine logs (not the traces) -> $OUT/prof.tgz
#
# State lives outside the repository in $WORK (default /var/tmp/servelab-gpu), so it survives
# between calls on the same warm machine. PYTHONUNBUFFERED is set; every phase logs to stdout.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-/var/tmp/servelab-gpu}"
source "$here/device_lib.sh"  # repo, OUT, py, servelab, say; exports SERVELAB_HOME, PYTHONPATH
RECIPE="${RECIPE:-$here/qwen3-30b-a3b-fp8-h200.toml}"
CKPT="${CKPT:-$WORK/qwen3-30b-a3b-fp8}"
GEN_ARGS=(${GEN_ARGS:---layout fp8-block})

phase_env() {
  say env
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  "$py" -c 'import sys, torch; print(sys.version.split()[0], sys.executable, torch.__version__,
    torch.version.cuda, torch.cuda.get_device_name(0))'
  uname -r; nproc; free -g | head -2; df -h / /tmp /var/tmp "$WORK" 2>/dev/null
  "$py" -m pip list --format=freeze >"$OUT/pip-freeze.txt" 2>/dev/null
  echo "pip freeze: $(wc -l <"$OUT/pip-freeze.txt") packages -> pip-freeze.txt"
}

phase_gen() {
  say "gen ${GEN_ARGS[*]} -> $CKPT"
  rm -rf "$CKPT" "$WORK/gen.done" "$WORK/gen.failed"
  if "$py" "$here/gen_checkpoint.py" --out "$CKPT" "${GEN_ARGS[@]}"; then
    touch "$WORK/gen.done"
  else
    touch "$WORK/gen.failed"
    return 1
  fi
}

phase_gen_bg() {
  say "gen-bg (log $WORK/gen.log)"
  rm -f "$WORK/gen.done" "$WORK/gen.failed"
  setsid nohup bash "$0" gen >"$WORK/gen.log" 2>&1 </dev/null &
  sleep 15
  tail -5 "$WORK/gen.log"
}

phase_stash() {
  say stash
  mkdir -p "$WORK/carry"
  for d in "$repo"/.gpu-carry/c[0-9][0-9]; do
    [[ -d "$d" ]] && cp -r "$d" "$WORK/carry/"
  done
  ls "$WORK/carry" | tr '\n' ' '; echo
}

phase_status() {
  say status
  ls "$WORK/carry" 2>/dev/null | tr '\n' ' '; echo
  for f in gen.log run.log; do
    [[ -f "$WORK/$f" ]] && { echo "--- $f"; tail -8 "$WORK/$f"; }
  done
  ls "$WORK" | tr '\n' ' '; echo
  df -h "$WORK" | tail -1
}

phase_verify() {
  say verify
  local stage="$WORK/wheels"
  rm -rf "$stage" && mkdir -p "$stage"
  local sums
  local carried="$WORK/carry"
  sums="$(ls "$carried"/c*/SHA256SUMS | head -1)"
  for d in "$carried"/c*/; do
    for f in "$d"*.whl; do [[ -e "$f" ]] && { ln -f "$f" "$stage/" 2>/dev/null || cp "$f" "$stage/"; }; done
  done
  for first in "$carried"/c*/*.part-00; do
    [[ -e "$first" ]] || continue
    local name
    name="$(basename "$first" .part-00)"
    ls "$carried"/c*/"$name".part-* | awk -F/ '{print $NF"\t"$0}' | sort |
      cut -f2 | xargs cat >"$stage/$name"
  done
  (cd "$stage" && sha256sum --quiet -c "$sums") || { echo "checksum mismatch"; return 1; }
  echo "$(ls "$stage" | wc -l) wheels verified"
}

phase_install() {
  phase_verify || return 1
  say install
  local stage="$WORK/wheels"
  rm -rf /tmp/site
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    "$stage"/*.whl || return 1
  "$py" - <<'EOF'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
env = {"extra": ""}
site = [d for d in md.distributions(path=["/tmp/site"])]
have = {}
for d in md.distributions():
    have.setdefault(d.metadata["Name"].lower().replace("_", "-"), d.version)
unmet = []
for d in site:
    for r in d.requires or []:
        req = Requirement(r)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        v = have.get(req.name.lower().replace("_", "-"))
        if v is None or (req.specifier and not req.specifier.contains(v, prereleases=True)):
            unmet.append(f"{d.metadata['Name']} needs {req} (found {v})")
print(f"{len(site)} distributions in /tmp/site; unmet requirements ({len(unmet)}):")
print("\n".join(sorted(set(unmet))))
EOF
  PYTHONPATH=/tmp/site "$py" -c 'import time; t = time.time(); import vllm
import vllm.entrypoints.openai.api_server
print("vllm", vllm.__version__, "imports in %.1f s" % (time.time() - t))' || return 1
}

phase_wait_gen() {
  say wait-gen
  while [[ ! -f "$WORK/gen.done" && ! -f "$WORK/gen.failed" ]]; do sleep 3; done
  tail -3 "$WORK/gen.log"
  [[ -f "$WORK/gen.done" ]]
}

recipe_here() {
  # recipe_here [SRC [DEST]]: the committed recipe SRC (default $RECIPE) names the image's
  # python and $WORK's checkpoint; write a copy adapted to this machine to DEST (default
  # $WORK/recipe.toml) and print its path.
  local src="${1:-$RECIPE}" r="${2:-$WORK/recipe.toml}"
  sed -e "s|/opt/torch/.venv/bin/python3|$py|" -e "s|/var/tmp/servelab-gpu|$WORK|" \
    "$src" >"$r"
  echo "$r"
}

start_bg() {
  # start_bg NAME [VAR=VALUE ...]: run phase NAME-fg in its own session (it outlives the
  # call), log $WORK/NAME.log, with the given variables in its environment (an array does not
  # reach a child through the environment: hand lists on as strings; without it the child ran
  # the default list, 2026-12-03 late session).
  local name="$1"
  shift
  rm -f "$WORK/$name.done"
  env "$@" setsid nohup bash "$0" "$name-fg" >"$WORK/$name.log" 2>&1 </dev/null &
  sleep 5
  tail -3 "$WORK/$name.log"
}

phase_run_bg() {
  say "probe / inspect / plan"
  servelab hardware probe -o "$WORK/probe.json" -- "$py" -m servelab.hardware.gpu_probe
  servelab inspect "$CKPT"
  servelab inspect "$CKPT" --json >"$WORK/inspect.json"
  local flags=(--engine-version 0.26.0 --max-model-len 40960 --kv-cache-memory-bytes 32GiB)
  servelab plan "$CKPT" -H h200 "${flags[@]}"
  servelab plan "$CKPT" -H h200 "${flags[@]}" --json >"$WORK/plan-h200.json"
  servelab plan "$CKPT" -H h200 --probe "$WORK/probe.json" "${flags[@]}" --json \
    >"$WORK/plan-h200-probe.json"
  servelab plan "$CKPT" -H h200 --probe "$WORK/probe.json" "${flags[@]}" | tail -25
  local r
  r="$(recipe_here)"
  say "servelab run $r (log $WORK/run.log)"
  rm -f "$WORK/run.done"
  setsid nohup bash -c "\"$py\" -m servelab run \"$r\" --runs-dir \"$WORK/runs\" \
    --label device=lent-h200 >\"$WORK/run.log\" 2>&1; echo \$? >\"$WORK/run.done\"" \
    </dev/null >/dev/null 2>&1 &
  sleep 5
}

phase_wait() {
  local limit="$1" t0=$SECONDS
  say "wait up to $limit s for the run"
  while [[ ! -f "$WORK/run.done" ]] && ((SECONDS - t0 < limit)); do
    sleep 10
    local run_dir
    run_dir="$(ls -d "$WORK"/runs/*/ 2>/dev/null | tail -1)"
    [[ -n "$run_dir" && -f "$run_dir/engine.log" ]] &&
      echo "[$((SECONDS - t0)) s] $(tail -1 "$run_dir/engine.log" | cut -c1-160)"
  done
  if [[ -f "$WORK/run.done" ]]; then
    echo "run finished, exit $(cat "$WORK/run.done")"
  else
    echo "run still going after $limit s"
  fi
  tail -40 "$WORK/run.log"
}

phase_collect() {
  say collect
  local run_dir
  run_dir="$(ls -d "$WORK"/runs/*/ 2>/dev/null | tail -1)"
  [[ -n "$run_dir" ]] && cp "$run_dir/engine.log" "$OUT/engine.log" 2>/dev/null
  # The database itself too: if servelab cannot start here (a dependency the image lacks),
  # export and site build can be done at home from it.
  cp "$SERVELAB_HOME/results.db" "$OUT/" 2>/dev/null
  servelab runs list
  servelab runs export -o "$OUT/runs.json"
  servelab site build "$WORK/site" >/dev/null && tar -C "$WORK" -czf "$OUT/site.tgz" site
  local extra=()
  for f in probe.json inspect.json plan-h200.json plan-h200-probe.json run.log gen.log \
    recipe.toml "${CKPT#"$WORK"/}/servelab-gen.json" "${CKPT#"$WORK"/}/config.json"; do
    [[ -f "$WORK/$f" ]] && extra+=("$f")
  done
  [[ -n "$run_dir" ]] && cp "$run_dir"/engine-facts.json "$WORK/" 2>/dev/null &&
    extra+=(engine-facts.json)
  tar -C "$WORK" -czf "$OUT/reports.tgz" "${extra[@]}"
  ls -la "$OUT"
}

# arch:layout:layers:dir[:mtp] for gen-sparse; recipes for cal-bg (run in this order).
# The first calibration session (2026-12-03 morning) ran llama-3.1-8b:bf16:32,
# qwen3-next-80b-a3b:bf16:12 and qwen3-30b-a3b:bf16:24 (recipes of the same names); the second
# (afternoon) llama-3.2-3b:bf16:28, qwen3-235b-a22b:bf16:16 and qwen3.6-35b-a3b:bf16:40:fused;
# the third (evening) both hybrids under one set of flags, a second FP8 MoE build, both CUDA
# graph regimes of one model and an MTP run (qwen3-next-80b-a3b-bf16-12l-mns64-h200,
# qwen3-235b-a22b-fp8-16l-h200, llama-3.2-3b-bf16-graphs512-h200,
# qwen3.6-35b-a3b-bf16-mns256-h200, qwen3.6-35b-a3b-bf16-mtp2-h200); the fourth (late) decode
# profiles (PROF_RECIPES below); the fifth (night) the first FP8 build again with the dummy
# loader and the host-floor probes (llama-3.2-3b-bf16-2l-h200, qwen3-next-80b-a3b-bf16-4l-h200,
# qwen3-30b-a3b-bf16-2l-h200; the MTP run was cut off); the sixth (2026-12-04) the dense FP8
# llama-3.1-8b-fp8-h200, predicted before it ran. Next, not yet run: the two other
# out-of-sample builds, predicted in results/calibration-2026-12-03-oos/preregistered/ (then
# the MTP step again: qwen3.6-35b-a3b:bf16:40:qwen3.6-35b-a3b-bf16:fused, its -mtp2 recipe).
# 2026-12-04 (last): prefill profiles of the 48-layer Qwen3-30B, FP8 and BF16 (phase prof-bg
# with PROF_ARGS="--prefill 512,2048,8192 --timed 6"; results/profile-2026-12-04-prefill/):
CAL_SPECS=(${CAL_SPECS:-llama-3.1-70b:fp8-block:32:llama-3.1-70b-fp8-32l llama-3.1-70b:bf16:16:llama-3.1-70b-bf16-16l})
CAL_RECIPES=(${CAL_RECIPES:-llama-3.1-70b-fp8-32l-h200 llama-3.1-70b-bf16-16l-h200})

phase_gen_sparse() {
  say "gen-sparse ${CAL_SPECS[*]}"
  local spec arch layout layers dir mtp
  for spec in "${CAL_SPECS[@]}"; do
    IFS=: read -r arch layout layers dir mtp <<<"$spec"
    rm -rf "${WORK:?}/$dir"
    "$py" "$here/gen_checkpoint.py" --arch "$arch" --layout "$layout" --layers "$layers" \
      --mtp "${mtp:-none}" --sparse --device cpu --out "$WORK/$dir" || return 1
  done
}

phase_cal_bg() {
  say "cal-bg ${CAL_RECIPES[*]} (log $WORK/cal.log)"
  start_bg cal CAL_RECIPES="${CAL_RECIPES[*]}"
}

phase_cal_fg() {
  servelab hardware probe -o "$WORK/probe.json" -- "$py" -m servelab.hardware.gpu_probe
  local name r ckpt
  for name in "${CAL_RECIPES[@]}"; do
    mkdir -p "$WORK/cal/$name"
    r="$(recipe_here "$here/$name.toml" "$WORK/cal/$name/recipe.toml")"
    ckpt="$(sed -n 's/^path = "\(.*\)"$/\1/p' "$r" | head -1)"
    say "cal $name ($ckpt)"
    servelab inspect "$ckpt" --json >"$WORK/cal/$name/inspect.json"
    servelab plan "$ckpt" -H "${CAL_HW:-h200}" --probe "$WORK/probe.json" --engine-version 0.26.0 \
      --max-model-len 40960 --kv-cache-memory-bytes 16GiB --json >"$WORK/cal/$name/plan.json"
    "$py" -m servelab run "$r" --runs-dir "$WORK/cal/$name/runs" --label device=lent-h200
    echo "run $name exit $?"
    cp "$WORK/cal/$name"/runs/*/engine.log "$WORK/cal/$name/" 2>/dev/null
  done
  touch "$WORK/cal.done"
}

# Load sweeps (issue 31): builds never run on the H200, pre-registered in
# benchmarks/prereg/load-h200-2026-12-04 (header replicas at published dimensions + a
# full-vocabulary tokenizer, vLLM's dummy loader; recipes benchmarks/load/recipes/*-h200-load.toml
# with a [bench] sweep at 4, 16, 64 streams and a [capacity] table).
LOAD_MODELS=(${LOAD_MODELS:-qwen2.5-7b mistral-7b})

phase_load_gen() {
  say "load-gen ${LOAD_MODELS[*]}"
  local m
  for m in "${LOAD_MODELS[@]}"; do
    rm -rf "${WORK:?}/load/$m"
    servelab synth replica "$WORK/load/$m" --model "$m" || return 1
    "$py" -c 'import json, sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path
from gen_checkpoint import write_generation_files
out = Path(sys.argv[2]); print("tokenizer ids:", write_generation_files(out, json.loads((out / "config.json").read_text())))' "$here" "$WORK/load/$m" || return 1
  done
}

phase_load_bg() {
  say "load-bg ${LOAD_MODELS[*]} (log $WORK/load.log)"
  start_bg load LOAD_MODELS="${LOAD_MODELS[*]}"
}

phase_load_fg() {
  servelab hardware probe -o "$WORK/probe.json" -- "$py" -m servelab.hardware.gpu_probe
  local m r
  for m in "${LOAD_MODELS[@]}"; do
    mkdir -p "$WORK/load/runs-$m"
    r="$(recipe_here "$repo/benchmarks/load/recipes/$m-h200-load.toml" \
      "$WORK/load/runs-$m/recipe.toml")"
    say "load $m"
    servelab inspect "$WORK/load/$m" --json >"$WORK/load/runs-$m/inspect.json"
    "$py" -m servelab run "$r" --runs-dir "$WORK/load/runs-$m/runs" --label device=lent-h200
    echo "run $m exit $?"
    cp "$WORK/load/runs-$m"/runs/*/engine.log "$WORK/load/runs-$m/" 2>/dev/null
  done
  touch "$WORK/load.done"
}

phase_load_wait() { wait_done load "$1" '^=== load |^run .* exit|c=|capacity'; }

phase_load_collect() {
  say load-collect
  servelab runs list
  servelab runs export -o "$WORK/load/runs.json"
  cp "$WORK/probe.json" "$WORK/load.log" "$WORK/load/" 2>/dev/null
  tar -C "$WORK" -czf "$OUT/load.tgz" --exclude='*.safetensors' --exclude='tokenizer*' \
    load/runs.json load/probe.json load/load.log $(cd "$WORK" && ls -d load/runs-* 2>/dev/null)
  ls -la "$OUT"
}

wait_done() {
  # wait_done NAME LIMIT PATTERN: wait up to LIMIT s for $WORK/NAME.done, printing the last
  # line of $WORK/NAME.log that matches PATTERN every 15 s, then every matching line.
  local name="$1" limit="$2" pattern="$3" t0=$SECONDS
  say "$name-wait up to $limit s"
  # Nothing started (an earlier call failed, or this is a fresh machine): say so at once. Seen
  # 2026-12-03: the first carry call got no machine, the next call's install failed on the
  # missing wheel, and a wait with no job behind it held the machine 570 s for nothing.
  if [[ ! -f "$WORK/$name.log" ]]; then
    echo "no $WORK/$name.log: nothing to wait for"
    return 2
  fi
  while [[ ! -f "$WORK/$name.done" ]] && ((SECONDS - t0 < limit)); do
    sleep 15
    echo "[$((SECONDS - t0)) s] $(grep -E "$pattern" "$WORK/$name.log" | tail -1)" \
      "| $(tail -1 "$WORK/$name.log" | cut -c1-140)"
  done
  [[ -f "$WORK/$name.done" ]] && echo "$name finished"
  grep -E "$pattern" "$WORK/$name.log" | tail -40
}

phase_cal_wait() { wait_done cal "$1" '^=== cal |^run .* exit|decode|prefill'; }

phase_cal_collect() {
  say cal-collect
  servelab runs list
  servelab runs export -o "$WORK/cal/runs.json"
  cp "$WORK/probe.json" "$WORK/cal/" 2>/dev/null
  cp "$WORK/cal.log" "$WORK/cal/" 2>/dev/null
  # a run still starting or benchmarking when the device time ran out: keep its engine log so
  # far (2026-12-04: the Qwen3.6 FP8 build was still starting after 455 s, and nothing said
  # where its start-up was); a run that has finished since an earlier collect keeps only its
  # whole log
  local d log
  for d in "$WORK"/cal/*/; do
    if [[ -f "$d/engine.log" ]]; then
      rm -f "$d/engine-unfinished.log"
      continue
    fi
    log="$(ls -t "$d"runs/*/engine.log 2>/dev/null | head -1)"
    [[ -n "$log" ]] && cp "$log" "$d/engine-unfinished.log"
  done
  tar -C "$WORK" --exclude='runs' -czf "$OUT/cal.tgz" cal
  ls -la "$OUT"
}

# Decode profiles (issue 12): vLLM's torch profiler over 64 decode iterations of one request per
# PROF_RECIPES entry (benchmarks/gpu/profile_decode.py) -> $WORK/prof/<name>/profile.json.
PROF_RECIPES=(${PROF_RECIPES:-qwen3-next-80b-a3b-bf16-12l-mns64-h200 qwen3.6-35b-a3b-bf16-mns256-h200 \
  qwen3-30b-a3b-bf16-24l-h200 llama-3.2-3b-bf16-graphs512-h200 llama-3.1-8b-bf16-h200})

phase_prof_bg() {
  say "prof-bg ${PROF_RECIPES[*]} (log $WORK/prof.log)"
  start_bg prof PROF_RECIPES="${PROF_RECIPES[*]}" PROF_ARGS="${PROF_ARGS:-}"
}

phase_prof_fg() {
  local name r
  for name in "${PROF_RECIPES[@]}"; do
    mkdir -p "$WORK/prof/$name"
    r="$(recipe_here "$here/$name.toml" "$WORK/prof/$name/recipe.toml")"
    say "prof $name"
    # shellcheck disable=SC2086  # PROF_ARGS is a list of words
    "$py" "$here/profile_decode.py" "$r" --out "$WORK/prof/$name" ${PROF_ARGS:-}
    echo "prof $name exit $?"
  done
  touch "$WORK/prof.done"
}

phase_prof_wait() {
  wait_done prof "$1" '^=== prof |^prof .* exit|gpu_busy|step_period|idle|"prompt"'
}

phase_prof_collect() {
  say prof-collect
  tar -C "$WORK" --exclude='trace' -czf "$OUT/prof.tgz" prof prof.log
  ls -la "$OUT"
}

rc=0
for ph in "$@"; do
  if ((rc != 0)) && [[ "$ph" != collect ]]; then
    echo "skipping $ph (an earlier phase failed)"
    continue
  fi
  case "$ph" in
    verify) phase_verify ;;
    stash) phase_stash ;;
    env) phase_env ;;
    gen) phase_gen ;;
    gen-bg) phase_gen_bg ;;
    status) phase_status ;;
    install) phase_install ;;
    wait-gen) phase_wait_gen ;;
    run-bg) phase_run_bg ;;
    wait:*) phase_wait "${ph#wait:}" ;;
    collect) phase_collect ;;
    gen-sparse) phase_gen_sparse ;;
    cal-bg) phase_cal_bg ;;
    load-gen) phase_load_gen ;;
    load-bg) phase_load_bg ;;
    load-fg) phase_load_fg ;;
    load-wait:*) phase_load_wait "${ph#load-wait:}" ;;
    load-collect) phase_load_collect ;;
    prof-bg) phase_prof_bg ;;
    prof-fg) phase_prof_fg ;;
    prof-wait:*) phase_prof_wait "${ph#prof-wait:}" ;;
    prof-collect) phase_prof_collect ;;
    cal-fg) phase_cal_fg ;;
    cal-wait:*) phase_cal_wait "${ph#cal-wait:}" ;;
    cal-collect) phase_cal_collect ;;
    *) echo "unknown phase $ph"; exit 2 ;;
  esac || { rc=$?; echo "phase $ph failed ($rc)"; }
done
exit "$rc"
