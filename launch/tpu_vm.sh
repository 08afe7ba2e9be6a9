#!/usr/bin/env bash
# Cloud TPU VMs (a single host or a pod slice): create, set up every worker, sync this checkout, start the same
# training command on all workers (detached, one log per worker), tail the logs, stop (SIGTERM → checkpoint), delete.
# Every gcloud call goes through `run`, so --dry-run prints exactly what would be executed; --dry-run is never handed
# on to a remote command, even when given after --.
set -euo pipefail

usage() {
  cat <<'TXT'
usage: launch/tpu_vm.sh [options] COMMAND [options] [-- <python -m compclip_jax.main flags>]

commands (in the order of a run):
  check    here, before anything is booked: will the training flags after -- fit --accelerator? Every step
           kind compiled by libtpu for that slice on this machine (python -m compclip_jax compile
           --require_fit; needs pip install -r requirements-tpu-compile.txt; docs/tpu.md "Will my run fit?";
           a --config.model.init path must exist here, or use --config.model.random=ViT-B-32 of the same shape)
  create   create the TPU VM            (--accelerator, --version, --spot | --preemptible)
  sync     copy this checkout (git-tracked files, uncommitted edits included) to every worker
  setup    on every worker: venv, requirements.txt (the package and its runtime set), the TPU build of jax
  mount    mount a Cloud Storage bucket on every worker with gcsfuse at /gcs/BUCKET (--bucket=BUCKET)
  run      the check above first, on worker 0 (its checkout, venv and checkpoint paths; --no_check skips it),
           then start the training command on every worker, detached; flags after -- go to compclip_jax.main.
           On a pod, --workdir must be a directory all workers share (checkpoints are written by every
           worker): the mounted bucket, e.g. --workdir=/gcs/BUCKET/clic, or an NFS/Filestore mount.
           Logs are appended to (each start begins with a "==== start" line), never truncated; a worker whose
           previous `run` of the same --run_name is still alive refuses to start a second one, and training
           itself refuses a workdir whose lock.json is held by a live process.
  tail     print the end of the logs (--worker=N or all; --follow keeps reading)
  stop     SIGTERM the training processes: they write a checkpoint and exit with code 143; `run` again resumes
  delete   delete the TPU VM
  ssh      run an arbitrary command on every worker: tpu_vm.sh ssh -- 'nvidia-smi || true'

options (each also from the environment variable in brackets):
  --name=NAME            TPU VM name                        [TPU_NAME, default compclip]
  --zone=ZONE            e.g. us-central2-b                  [TPU_ZONE, required]
  --project=PROJECT      Google Cloud project                [TPU_PROJECT, default: gcloud's]
  --accelerator=TYPE     e.g. v4-8, v4-32 (pod), v5litepod-8 [TPU_ACCELERATOR, default v4-8]
  --version=RUNTIME      TPU software version                [TPU_VERSION, default tpu-ubuntu2204-base]
  --spot | --preemptible spot / preemptible capacity         [TPU_CAPACITY=spot|preemptible]
  --remote_dir=DIR       checkout on the workers ($HOME-relative) [TPU_REMOTE_DIR, default compclip_jax]
  --python=BIN           interpreter for the venv            [TPU_PYTHON, default python3.11]
  --run_name=NAME        names the logs: <remote_dir>/logs/NAME/worker-<hostname>.log [TPU_RUN_NAME, default run]
  --bucket=BUCKET        for mount                           [TPU_BUCKET]
  --worker=N|all         for tail / ssh                      [default all]
  --follow               for tail: keep following (one worker)
  --no_check             for run: start without the compile check
  --dry-run              print the commands, run nothing (anywhere on the line; never passed on after --)
  -h, --help

A pod slice is the same sequence: every command fans out to all workers (--worker=all); `run` passes
--distributed, so each process calls jax.distributed.initialize() and reads its own slice of every global batch.
Preemption: the SIGTERM checkpoint plus `run` of the same command resumes from the workdir's newest checkpoint.
Example:
  export TPU_ZONE=us-central2-b TPU_ACCELERATOR=v4-32 TPU_NAME=clic-pod
  launch/tpu_vm.sh create --spot && launch/tpu_vm.sh sync && launch/tpu_vm.sh setup
  launch/tpu_vm.sh mount --bucket=my-bucket
  launch/tpu_vm.sh run -- --config=configs/clic.py --workdir=/gcs/my-bucket/clic \
      --config.model.init=/gcs/my-bucket/ViT-B-32 --config.data.source=prepared \
      --config.data.path=/gcs/my-bucket/shards
  launch/tpu_vm.sh tail --worker=0 --follow
TXT
}

[ $# -gt 0 ] || { usage >&2; exit 2; }
command=""
name=${TPU_NAME:-compclip}
zone=${TPU_ZONE:-}
project=${TPU_PROJECT:-}
accelerator=${TPU_ACCELERATOR:-v4-8}
version=${TPU_VERSION:-tpu-ubuntu2204-base}
capacity=${TPU_CAPACITY:-}
remote_dir=${TPU_REMOTE_DIR:-compclip_jax}
python=${TPU_PYTHON:-python3.11}
run_name=${TPU_RUN_NAME:-run}
bucket=${TPU_BUCKET:-}
worker=all
follow=0
check=1
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --name=*) name=${1#*=} ;;
    --zone=*) zone=${1#*=} ;;
    --project=*) project=${1#*=} ;;
    --accelerator=*) accelerator=${1#*=} ;;
    --version=*) version=${1#*=} ;;
    --spot) capacity=spot ;;
    --preemptible) capacity=preemptible ;;
    --remote_dir=*) remote_dir=${1#*=} ;;
    --python=*) python=${1#*=} ;;
    --run_name=*) run_name=${1#*=} ;;
    --bucket=*) bucket=${1#*=} ;;
    --worker=*) worker=${1#*=} ;;
    --follow) follow=1 ;;
    --no_check) check=0 ;;
    --dry-run) dry=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *)
      [ -z "$command" ] || { echo "unexpected argument: $1 (one command; training flags go after --)" >&2; exit 2; }
      case "$1" in
        check|create|sync|setup|mount|run|tail|stop|delete|ssh) command=$1 ;;
        *) echo "unknown command: $1 (see --help)" >&2; exit 2 ;;
      esac ;;
  esac
  shift
done
[ -n "$command" ] || { echo "no command given (see --help)" >&2; exit 2; }
# --dry-run after -- is this script's option given in the wrong place: honoured here, never sent to a worker
rest=()
for a in "$@"; do
  if [ "$a" = --dry-run ]; then
    dry=1
    echo "note: --dry-run after -- is taken as this script's --dry-run (nothing runs, nothing is forwarded)" >&2
  else
    rest+=("$a")
  fi
done
set -- "${rest[@]+"${rest[@]}"}"
[ -n "$zone" ] || [ "$command" = check ] || { echo "--zone (or TPU_ZONE) is required" >&2; exit 2; }
case "$capacity" in ""|spot|preemptible) ;; *) echo "TPU_CAPACITY must be spot or preemptible" >&2; exit 2 ;; esac
case "$worker" in all|[0-9]*) ;; *) echo "--worker must be a number or all" >&2; exit 2 ;; esac

# Print (--dry-run) or execute one command, given as separate arguments; printed shell-quoted, copy-pasteable.
run() {
  if [ "$dry" = 1 ]; then
    local out="" a
    for a in "$@"; do out+="$(printf '%q' "$a") "; done
    echo "${out% }"
  else
    "$@"
  fi
}

common=(--zone="$zone")
[ -n "$project" ] && common+=(--project="$project")
tpu=(gcloud compute tpus tpu-vm)
q() { printf '%q' "$1"; }

# A command string for every worker's shell (gcloud ... ssh --command=STRING).
on_workers() {
  run "${tpu[@]}" ssh "$name" "${common[@]}" --worker="$1" --command="$2"
}

# The compile check of the training flags for the accelerator (libtpu's compiler, compile-only devices; no TPU
# used): only --config and --config.* are handed on; a GCP accelerator type (v5litepod-8) becomes its slice name.
check_command() {
  local a
  check_cmd=(python -m compclip_jax compile --topology="${accelerator/v5litepod-/v5e-}" --require_fit)
  for a in "$@"; do
    case "$a" in --config=*|--config.*) check_cmd+=("$a") ;; esac
  done
}

case "$command" in
  check)
    [ $# -gt 0 ] || { echo "give the training flags after -- (see --help)" >&2; exit 2; }
    check_command "$@"
    run "${check_cmd[@]}"
    ;;
  create)
    extra=()
    [ "$capacity" = spot ] && extra+=(--spot)
    [ "$capacity" = preemptible ] && extra+=(--preemptible)
    run "${tpu[@]}" create "$name" "${common[@]}" --accelerator-type="$accelerator" --version="$version" "${extra[@]}"
    ;;
  sync)
    root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
    archive=${TMPDIR:-/tmp}/compclip_jax_sync.tar.gz
    # tracked files as they are on disk now (uncommitted edits included); no venvs, runs or caches
    if [ "$dry" = 1 ]; then
      echo "(cd $(q "$root") && git ls-files -z | tar --null -T - -czf $(q "$archive"))"
    else
      (cd "$root" && git ls-files -z | tar --null -T - -czf "$archive")
    fi
    run "${tpu[@]}" scp "$archive" "$name:compclip_jax_sync.tar.gz" "${common[@]}" --worker=all
    on_workers all "mkdir -p $(q "$remote_dir") && tar -xzf compclip_jax_sync.tar.gz -C $(q "$remote_dir")"
    ;;
  setup)
    on_workers all "set -e; cd $(q "$remote_dir")
(command -v $(q "$python") >/dev/null && $(q "$python") -m venv --help >/dev/null) || \
  (sudo apt-get update -q && sudo apt-get install -y -q $(q "$python") $(q "$python")-venv)
[ -d .venv ] || $(q "$python") -m venv .venv
. .venv/bin/activate
pip install -q -U pip
pip install -q -r requirements.txt
pip install -q -U 'jax[tpu]==0.10.2' -f https://storage.googleapis.com/jax-releases/libtpu_releases.html
python -c 'import jax; print(jax.process_index(), jax.local_device_count(), jax.device_count())'"
    ;;
  mount)
    [ -n "$bucket" ] || { echo "mount needs --bucket=BUCKET (or TPU_BUCKET)" >&2; exit 2; }
    on_workers all "set -e
if ! command -v gcsfuse >/dev/null; then
  echo 'deb https://packages.cloud.google.com/apt gcsfuse-jammy main' | sudo tee /etc/apt/sources.list.d/gcsfuse.list
  curl -fsS https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo tee /etc/apt/trusted.gpg.d/gcsfuse.asc
  sudo apt-get update -q && sudo apt-get install -y -q gcsfuse
fi
sudo mkdir -p /gcs/$(q "$bucket") && sudo chown \$(id -u):\$(id -g) /gcs/$(q "$bucket")
mountpoint -q /gcs/$(q "$bucket") || gcsfuse --implicit-dirs $(q "$bucket") /gcs/$(q "$bucket")"
    ;;
  run)
    [ $# -gt 0 ] || { echo "give the training flags after -- (see --help)" >&2; exit 2; }
    if [ "$check" = 1 ]; then
      check_command "$@"
      remote_check="cd $(q "$remote_dir") && . .venv/bin/activate &&"
      for a in "${check_cmd[@]}"; do remote_check+=" $(q "$a")"; done
      on_workers 0 "$remote_check" || {
        echo "not started: the run does not fit $accelerator, or the check could not run (above); --no_check skips it" >&2
        exit 1
      }
    fi
    train="python -m compclip_jax.main --distributed"
    for a in "$@"; do train+=" $(q "$a")"; done
    logs="logs/$run_name"
    # setsid + nohup: the process outlives the ssh session; one log and pid file per worker (named by hostname).
    # The log is appended to (a restart after preemption keeps the earlier attempt's lines); a live process from an
    # earlier `run` of this run name makes the worker refuse (exit 1) rather than start a second trainer.
    pid="$(q "$logs")/worker-\$(hostname).pid"
    log="$(q "$logs")/worker-\$(hostname).log"
    on_workers all "set -e; cd $(q "$remote_dir"); mkdir -p $(q "$logs"); . .venv/bin/activate
if [ -f $pid ] && kill -0 \$(cat $pid) 2>/dev/null; then
  echo \"\$(hostname): already running (pid \$(cat $pid), see $log): stop it first, or use another --run_name\" >&2
  exit 1
fi
echo \"==== start \$(date -u +%Y-%m-%dT%H:%M:%SZ) on \$(hostname)\" >> $log
setsid nohup $train >> $log 2>&1 < /dev/null &
echo \$! > $pid
echo started on \$(hostname): $(q "$remote_dir/$logs")/worker-\$(hostname).log"
    ;;
  tail)
    logs="$remote_dir/logs/$run_name"
    if [ "$follow" = 1 ]; then
      [ "$worker" != all ] || { echo "--follow needs one --worker=N" >&2; exit 2; }
      on_workers "$worker" "tail -n 50 -F $(q "$logs")/worker-\$(hostname).log"
    else
      on_workers "$worker" "echo == \$(hostname); tail -n 30 $(q "$logs")/worker-\$(hostname).log"
    fi
    ;;
  stop)
    # '[c]ompclip…' matches the training processes but not this command's own shell, whose text holds the brackets
    on_workers all "pkill -TERM -f '[c]ompclip_jax.main' && echo SIGTERM sent on \$(hostname) || \
echo nothing running on \$(hostname)"
    ;;
  delete)
    run "${tpu[@]}" delete "$name" "${common[@]}" --quiet
    ;;
  ssh)
    [ $# -gt 0 ] || { echo "give the command after -- (see --help)" >&2; exit 2; }
    on_workers "$worker" "$*"
    ;;
esac
