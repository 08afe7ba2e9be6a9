"""Checkpoints: the only module that touches orbax.

What is saved: the TrainState (trainable parameters, optimiser state, step, rng) through orbax, and each process's
data-iterator states as JSON (`data/step_N.process_P.json`, written *before* orbax commits the step, so a committed
step always has them). Frozen parameters are not saved: they are re-read from the initial checkpoint, bit for bit.
A rerun with the same workdir restores the newest step that restores cleanly; a corrupt or half-written one is
skipped with a warning. When checkpoints exist and none restores, `Unrestorable` says so (training must not start
over on top of them). Nothing is ever deleted that orbax's `keep` did not retire: a step that failed to restore and
is reached again is moved to `<workdir>/checkpoints_unrestorable/` before the new one is written.

Saves are asynchronous by default (`asynchronous=True`, config `checkpoint.asynchronous`): `save` returns once the
state is copied to host memory, and orbax writes and commits it in the background while training goes on; the next
`save` and `close` wait for it. A kill during the write leaves an uncommitted step, which the next restore ignores
(orbax commits a step by renaming its finished folder). `close` must run before the process exits — `train` calls it
in a `finally`, so a signal's checkpoint is committed before the exit code is returned.
"""
from __future__ import annotations

import json
import logging
import os
import time

import jax
import numpy as np
import orbax.checkpoint as ocp

from compclip_jax.errors import UserError


class Unrestorable(UserError, RuntimeError):
  """Checkpoints exist but none restores (user error: the message names each step's reason and the ways out)."""


class Checkpointer:
  def __init__(self, workdir: str, keep: int = 3, asynchronous: bool = True):
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.aside_dir = os.path.abspath(os.path.join(workdir, "checkpoints_unrestorable"))
    self.data_dir = os.path.join(self.directory, "data")
    os.makedirs(self.data_dir, exist_ok=True)
    self.manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=asynchronous,
                                                             create=True, cleanup_tmp_directories=True))

  def _data_path(self, step: int) -> str:
    return os.path.join(self.data_dir, f"step_{step}.process_{jax.process_index()}.json")

  def save(self, step: int, state, data_states: dict) -> None:
    """Saves `state` (a pytree of jax.Arrays) and this process's `data_states` ({name: json-able}) as `step`; with
    `asynchronous`, returns once `state` is on the host (the step is committed in the background)."""
    self._finish()  # the previous save is committed (and orbax has retired what `keep` retires) before this one
    if step in self.manager.all_steps():  # a step that failed to restore earlier: kept aside, never deleted
      aside = os.path.join(self.aside_dir, f"{step}.{time.strftime('%Y%m%d-%H%M%S')}")
      os.makedirs(aside, exist_ok=True)
      if os.path.exists(self._data_path(step)):
        os.replace(self._data_path(step), os.path.join(aside, os.path.basename(self._data_path(step))))
      if jax.process_index() == 0:
        os.replace(os.path.join(self.directory, str(step)), os.path.join(aside, str(step)))
      if jax.process_count() > 1:  # every process reloads the step list after the move
        from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
        multihost_utils.sync_global_devices("unrestorable checkpoint moved aside")
      logging.warning("the unrestorable checkpoint step %d was moved to %s before writing step %d again", step, aside,
                      step)
      self.manager.reload()
    tmp = self._data_path(step) + ".tmp"
    with open(tmp, "w") as f:
      json.dump(data_states, f)
    os.replace(tmp, self._data_path(step))
    self.manager.save(step, args=ocp.args.StandardSave(state), force=True)

  def _finish(self) -> None:
    """Waits for a save in flight, then drops the iterator states of steps orbax no longer keeps."""
    self.manager.wait_until_finished()
    kept = set(self.manager.all_steps())
    for name in os.listdir(self.data_dir):  # drop iterator states of steps orbax no longer keeps
      if name.startswith("step_") and int(name.split(".")[0][5:]) not in kept:
        os.remove(os.path.join(self.data_dir, name))

  def restore_latest(self, abstract_state):
    """(step, state, data_states) of the newest step that restores, or None for a fresh run.

    `abstract_state`: the TrainState tree of jax.ShapeDtypeStruct (with shardings) to restore into. Raises
    Unrestorable when there are steps and none of them restores.
    """
    failures = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        with open(self._data_path(step)) as f:
          data_states = json.load(f)
        state = self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
        _check_finite(state, step)
        return step, state, data_states
      except Exception as e:  # pylint: disable=broad-except
        reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        failures.append((step, reason))
        logging.warning("checkpoint step %d in %s cannot be restored (%s); trying the previous one", step,
                        self.directory, reason)
    if failures:
      raise Unrestorable(
          f"{self.directory} holds {len(failures)} checkpoint(s) and none can be restored into this run (" +
          "; ".join(f"step {s}: {r}" for s, r in failures) + "). Training does not start over on top of them. "
          "Use a new --workdir, or, if these checkpoints are not wanted, move the checkpoints folder away first.")
    return None

  def close(self) -> None:
    """Commits a save in flight (waits for it) and releases orbax's resources."""
    self._finish()
    self.manager.close()


def _check_finite(state, step: int) -> None:
  for leaf in jax.tree.leaves(state):
    if jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating):
      if not all(np.isfinite(np.asarray(s.data)).all() for s in leaf.addressable_shards):
        raise FloatingPointError(f"non-finite values in checkpoint step {step}")
