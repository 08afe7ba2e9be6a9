"""Entry point: python -m compclip_jax.main --config=configs/<clic|read|negclip|clip>.py[:arg] --workdir=DIR

Rerunning with the same --workdir resumes from its newest checkpoint. Several processes (TPU pod workers, or
--num_processes on one machine) call jax.distributed.initialize() first.
"""
from __future__ import annotations

import logging

import jax
from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/<method>.py[:arg]).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and exports go here.", required=True)
_COORD = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs off TPU).")
_NPROC = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs off TPU).")
_PID = flags.DEFINE_integer("process_id", None, "This process's id (multi-process runs off TPU).")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with no arguments (TPU "
                                 "pods, SLURM): the cluster is auto-detected.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _NPROC.value and _NPROC.value > 1:
    jax.distributed.initialize(_COORD.value, _NPROC.value, _PID.value)
  elif _DISTRIBUTED.value:
    jax.distributed.initialize()
  logging.getLogger().setLevel(logging.INFO)
  if _CONFIG.value.demo.enabled:
    from compclip_jax import demo  # pylint: disable=import-outside-toplevel
    demo.run(_CONFIG.value, _WORKDIR.value)
  else:
    from compclip_jax import train  # pylint: disable=import-outside-toplevel
    train.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main)
