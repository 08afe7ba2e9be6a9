#!/usr/bin/env bash
# Start the same compclip_jax training command as N processes on this machine, joined by jax.distributed
# (coordinator on 127.0.0.1). Use it for a single-node multi-GPU run (one process per GPU) or to try the
# multi-host code path on a CPU. One log per process; rerunning the same command resumes from the workdir.
set -euo pipefail

usage() {
  cat <<'TXT'
usage: launch/local_multiprocess.sh [--num_processes=N] [--port=P] [--gpus] [--dry-run] -- <python -m compclip_jax.main flags>

  --num_processes=N  processes to start (default: $COMPCLIP_NUM_PROCESSES or 2)
  --port=P           coordinator port on 127.0.0.1 (default: $COMPCLIP_PORT or 12355)
  --gpus             give process i only GPU i (CUDA_VISIBLE_DEVICES=i)
  --dry-run          print the commands instead of running them
  --                 everything after is passed to python -m compclip_jax.main (needs --workdir=DIR)

Logs: <workdir>/logs/process_<i>.log. Example:
  launch/local_multiprocess.sh --num_processes=4 --gpus -- --config=configs/clic.py --workdir=runs/clic
TXT
}

num=${COMPCLIP_NUM_PROCESSES:-2}
port=${COMPCLIP_PORT:-12355}
gpus=0
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --num_processes=*) num=${1#*=} ;;
    --port=*) port=${1#*=} ;;
    --gpus) gpus=1 ;;
    --dry-run) dry=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ $# -gt 0 ] || { echo "give the training flags after -- (see --help)" >&2; exit 2; }
workdir=""
for arg in "$@"; do
  case "$arg" in --workdir=*) workdir=${arg#*=} ;; esac
done
[ -n "$workdir" ] || { echo "the training flags need --workdir=DIR" >&2; exit 2; }

cmds=()
for ((i = 0; i < num; i++)); do
  env_prefix=""
  [ "$gpus" = 1 ] && env_prefix="CUDA_VISIBLE_DEVICES=$i "
  cmd="${env_prefix}python -m compclip_jax.main"
  for arg in "$@"; do cmd+=" $(printf '%q' "$arg")"; done
  cmd+=" --coordinator_address=127.0.0.1:$port --num_processes=$num --process_id=$i"
  cmd+=" > $(printf '%q' "$workdir/logs/process_$i.log") 2>&1"
  cmds+=("$cmd")
done

if [ "$dry" = 1 ]; then
  echo "mkdir -p $(printf '%q' "$workdir/logs")"
  for c in "${cmds[@]}"; do echo "$c &"; done
  echo "wait"
  exit 0
fi
mkdir -p "$workdir/logs"
pids=()
for c in "${cmds[@]}"; do
  bash -c "$c" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
echo "all $num processes finished (exit $status); logs in $workdir/logs"
exit "$status"
