"""Entry point: python -m compclip_jax.main --config=configs/<clic|read|negclip|clip>.py[:arg] --workdir=DIR

Rerunning with the same --workdir resumes from its newest checkpoint — if it is the same run: the first start
records the config and a fingerprint of the inputs (run.json, config.json); a rerun that differs is refused with the
list of differences, unless each is named in --allow_config_change (e.g. --allow_config_change=total_steps to train
longer). Several processes (TPU pod workers, or --num_processes on one machine) call jax.distributed.initialize()
first.

Exit codes: 0 finished (exported); 2 a user error or refusal (bad config, another run or a live process in the
workdir, unrestorable checkpoints, too many bad records, read-only workdir), one message and no traceback
(COMPCLIP_TRACEBACK=1 shows it); 3 stopped on a NaN/Inf loss or norm (the last good checkpoint is kept);
130 / 143 stopped by SIGINT (Ctrl-C) / SIGTERM after writing a checkpoint — rerun the same command to resume.
The console shows the run's own lines and warnings; --verbosity=0 (or -v 0) brings back every library's INFO log.
The synthetic-world demo is its own entry point, python -m compclip_jax.demo (given a `:demo` config, this one
says so and exits 2).
"""
from __future__ import annotations

import os
import sys

import jax
from absl import flags
from ml_collections import config_flags

from compclip_jax.cli import app as cli
from compclip_jax.cli import host_memory
from compclip_jax.cli import config_args

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/<method>.py[:arg]).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and exports go here.", required=True)
_COORD = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs off TPU).")
_NPROC = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs off TPU).")
_PID = flags.DEFINE_integer("process_id", None, "This process's id (multi-process runs off TPU).")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() with no arguments (TPU "
    "pods, SLURM): the cluster is auto-detected.")
_ALLOW = flags.DEFINE_list(
    "allow_config_change", [], "Config keys (or dotted prefixes) whose change from the "
    "workdir's recorded run is accepted on resume, e.g. total_steps,optim.lr.")


def main(argv):
  cli.refuse_arguments(argv)
  spec = config_flags.get_config_filename(flags.FLAGS["config"])
  if spec.endswith(":demo"):  # the demo pretrains the model its fine-tuning starts from: its own entry point
    name = os.path.basename(spec.rpartition(":")[0]).removesuffix(".py")
    print(
        f"error: the demo is its own command: python -m compclip_jax.demo --method={name} --workdir="
        f"{_WORKDIR.value} (configs/{name}.py:demo is its fine-tuning step, which starts from the model the demo "
        "pretrains)", file=sys.stderr)
    sys.exit(cli.EXIT_USER_ERROR)
  cli.quiet_logging(cli.verbosity_given())  # before jax starts its backends (their C++ logs read the environment)
  host_memory.keep_freed_memory()  # COMPCLIP_HOST_MALLOC=keep; before jax's CPU threads start (docs/performance.md)
  if _NPROC.value and _NPROC.value > 1:
    jax.distributed.initialize(_COORD.value, _NPROC.value, _PID.value)
  elif _DISTRIBUTED.value:
    jax.distributed.initialize()
  from compclip_jax.train import loop as train  # pylint: disable=import-outside-toplevel
  train.run(_CONFIG.value, _WORKDIR.value, tuple(_ALLOW.value))
  if jax.distributed.is_initialized():
    # Every process enters jax's shutdown barrier now, while all are alive. Left to interpreter exit, process 0 (which
    # hosts the coordination service, and exports after the others are done) can drop the service while a peer is
    # still leaving Python, and the peer aborts: seen once in the two-process test; the same report and fix in
    # marin-community/marin #8276 / #8287. Error exits keep jax's own exit hook.
    jax.distributed.shutdown()


def run() -> None:
  sys.argv = config_args.resolve_argv(sys.argv)  # --config=clic[:arg] by name, from any directory
  flags.mark_flag_as_required("config")
  cli.run(main)


if __name__ == "__main__":
  run()
