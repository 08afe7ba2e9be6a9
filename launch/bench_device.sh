#!/usr/bin/env bash
# The prepared device benchmark (docs/performance.md, "Device benchmark") on a machine that brings its own JAX
# (e.g. an H200 with JAX 0.11.x / CUDA 13, no internet).
#
#   bash launch/bench_device.sh --download      # here, with PyPI: the wheels the benchmark needs → launch/wheels_device
#   bash launch/bench_device.sh [--smoke] [...]  # there: install those wheels beside the machine's jax, then run
#
# Only pure-Python wheels and three small binary ones (msgpack, PyYAML, Pillow) travel; jax, jaxlib and the CUDA
# plugin are the machine's own (a venv with --system-site-packages sees them). flax is installed without its
# declared dependencies: `flax.nnx` does not import orbax-checkpoint or tensorstore, which are not needed here.
# Extra arguments go to `python -m compclip_jax bench_device` (--only=clic, --steps=5, --budget_s=420, …).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=launch/wheels_device
PY=${PYTHON:-python3}
PYVER=${PYVER:-$($PY -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')}
PURE="flax==0.12.8 optax==0.2.8 ml-collections==1.1.0 absl-py==2.5.1 rich==15.0.0 markdown-it-py==4.0.0 mdurl==0.1.2
      Pygments==2.21.0 treescope==0.1.10 typing_extensions etils==1.15.0"
BINARY="msgpack==1.2.4 PyYAML==6.0.4 pillow==13.0.0"

usage() {
  cat <<USAGE
usage: bash launch/bench_device.sh --download | [--dry-run] [--smoke] [bench_device arguments...]
  --download   fetch the wheels the benchmark needs into $WHEELS (needs PyPI; run it before going offline)
  --dry-run    print the venv, install and benchmark commands instead of running them
  --smoke      tiny widths and batches: seconds on a CPU (what tests/cli/test_bench_device.py runs)
  other arguments go to python -m compclip_jax bench_device (--only=clic, --steps=5, --budget_s=420, ...)
USAGE
}
RUN=
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --dry-run) RUN=echo; shift ;;
esac

if [[ "${1:-}" == "--download" ]]; then
  mkdir -p "$WHEELS"
  # shellcheck disable=SC2086
  $PY -m pip download --no-deps --only-binary=:all: -d "$WHEELS" $PURE
  # shellcheck disable=SC2086
  $PY -m pip download --no-deps --only-binary=:all: --python-version "$PYVER" --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$WHEELS" $BINARY
  ls -l "$WHEELS"
  exit 0
fi

VENV=${VENV:-/tmp/compclip_bench_venv}
if [[ -n "$RUN" || ! -x "$VENV/bin/python" ]]; then
  $RUN $PY -m venv --system-site-packages "$VENV"
  # only what the machine lacks: a package it already has (numpy, Pillow, PyYAML…) is kept
  for req in $PURE $BINARY; do
    name=${req%%==*}
    if [[ -n "$RUN" ]] || ! "$VENV/bin/python" -m pip show -q "$name" >/dev/null 2>&1; then
      $RUN "$VENV/bin/python" -m pip install -q --no-index --no-deps --find-links "$WHEELS" "$req" \
        || $RUN "$VENV/bin/python" -m pip install -q --no-index --no-deps --find-links "$WHEELS" "$name"
    fi
  done
fi
$RUN "$VENV/bin/python" -c "import jax; print('jax', jax.__version__, jax.devices())"
# the whole table is designed to fit in 8 minutes: rows not started after --budget_s (420 s) are skipped
$RUN env PYTHONPATH="$PWD" timeout 480 "$VENV/bin/python" -m compclip_jax bench_device "$@"
