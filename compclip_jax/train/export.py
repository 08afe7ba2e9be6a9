"""Export from any checkpoint of a training run: what `convert --src=<workdir>` (its latest checkpoint) and
`--src=<workdir>/checkpoints/N` do.

The run's own config (`<workdir>/config.json`) rebuilds the model as training built it (`train.state.build_model`:
frozen parameters from `model.init`, bit for bit), the checkpoint's trainable parameters are restored into the
state's shapes, and training's own export (`train.loop.export`) writes them: `--dst` receives exactly what the end
of training writes to `<workdir>/export` (`hf/`, `open_clip/model.safetensors`, a method's own parts such as
its frozen decoder's folder, as the run's `export.*` config says; `--to=hf` / `open_clip` writes only that one).
The checkpoints are only read (a training run may be writing the next one), and `--dst` appears whole or not at
all (written beside it, then renamed).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil

import ml_collections

from compclip_jax.errors import UserError

RUN_FILE, CONFIG_FILE = "run.json", "config.json"  # train/runinfo.py writes them (not imported: jax-free here)


def run_source(src: str) -> tuple[str, int | None] | None:
  """(workdir, checkpoint step or None for the latest) when `src` is a training workdir, its `checkpoints` folder or
  one `checkpoints/N` of it; None for anything else (a checkpoint `load_clip` reads). Raises UserError for a folder
  that looks like a run but cannot be exported from."""
  path = os.path.abspath(src)
  parent = os.path.dirname(path)
  if os.path.basename(parent) == "checkpoints" and os.path.isdir(path):
    workdir, name = os.path.dirname(parent), os.path.basename(path)
    if not name.isdigit():
      raise UserError(f"{src}: not a checkpoint step (checkpoints/N with N a number); pass {parent} for the latest")
    return _workdir(workdir, src), int(name)
  if os.path.basename(path) == "checkpoints" and os.path.exists(os.path.join(parent, RUN_FILE)):
    return _workdir(parent, src), None
  if os.path.exists(os.path.join(path, RUN_FILE)) or os.path.isdir(os.path.join(path, "checkpoints")):
    return _workdir(path, src), None
  return None


def _workdir(workdir: str, src: str) -> str:
  for name in (RUN_FILE, CONFIG_FILE):
    if not os.path.exists(os.path.join(workdir, name)):
      raise UserError(f"{src}: {workdir} has no {name}, so it is no training workdir this version wrote (an older "
                      "compclip_jax's checkpoints cannot be exported by this one); pass an HF, open_clip or compclip "
                      "checkpoint instead")
  return workdir


def _config(workdir: str, formats: tuple[str, ...]) -> ml_collections.ConfigDict:
  """The run's config (its latest start's), exporting `formats` only when given."""
  with open(os.path.join(workdir, CONFIG_FILE), encoding="utf-8") as f:
    c = ml_collections.ConfigDict(json.load(f))
  if formats:
    c.export.hf, c.export.open_clip = "hf" in formats, "open_clip" in formats
  if c.model.init and not os.path.exists(c.model.init):
    raise UserError(f"{workdir}: the run's model.init {c.model.init} (its frozen parameters) is not there: run "
                    "convert from the folder training ran in, or put the initial checkpoint back")
  return c


@contextlib.contextmanager
def _quiet(name: str | None, level: int):
  """Logger `name` (None: the root) at `level` for the block: orbax's warnings about its read-only manager, and the
  export's "exported …" line, which names the staging folder (convert prints where the files are)."""
  logger = logging.getLogger(name)
  before = logger.level
  logger.setLevel(level)
  try:
    yield
  finally:
    logger.setLevel(before)


def _manager(workdir: str):
  """A read-only orbax manager of `<workdir>/checkpoints` (it creates, cleans and deletes nothing)."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  with _quiet("absl", logging.ERROR):
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),  # orbax wants it absolute
        options=ocp.CheckpointManagerOptions(read_only=True, create=False))


def _pick_step(manager, workdir: str, step: int | None) -> int:
  """`step`, or the latest committed one; UserError when there is none (before the model is built)."""
  steps = sorted(manager.all_steps())
  directory = os.path.join(workdir, "checkpoints")
  if not steps:
    raise UserError(f"{directory} holds no committed checkpoint yet: train until the first one "
                    "(checkpoint.every_steps), or export from a run that has one")
  if step is not None and step not in steps:
    raise UserError(f"{directory}/{step} is no committed checkpoint: its steps are {', '.join(map(str, steps))}")
  return steps[-1] if step is None else step


def _restore(manager, workdir: str, step: int, abstract_state):
  """The TrainState of `step`, restored into `abstract_state`'s shapes; UserError naming the step otherwise."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  try:
    with _quiet("absl", logging.ERROR):
      return manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
  except Exception as e:  # pylint: disable=broad-except
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    raise UserError(f"{os.path.join(workdir, 'checkpoints', str(step))} cannot be restored into this run's model "
                    f"({reason}); try an earlier step") from None


def export_run(workdir: str, step: int | None, dst: str, formats: tuple[str, ...] = ()) -> tuple[int, list[str]]:
  """Writes training's export of checkpoint `step` (None: the latest) of the run in `workdir` into the folder `dst`
  (see the module docstring); → (the step exported, the files written under `dst`)."""
  if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)):
    raise UserError(f"--dst {dst} exists and is not an empty folder: give a new one (the export is a folder: "
                    "hf/, open_clip/ …)")
  c = _config(workdir, formats)
  manager = _manager(workdir)
  try:
    step = _pick_step(manager, workdir, step)
    from compclip_jax import methods  # pylint: disable=import-outside-toplevel
    from compclip_jax.train import loop, state  # pylint: disable=import-outside-toplevel
    from compclip_jax import sharding
    model = state.build_model(c, methods.get(c.method))
    st = state.build_state(c, model, sharding.make_mesh(-1, 1), total_steps=1, abstract=True)
    restored = _restore(manager, workdir, step, st.state)
  finally:
    manager.close()
  staging = f"{os.path.abspath(dst).rstrip(os.sep)}.partial-{os.getpid()}"
  try:
    with _quiet(None, logging.WARNING):
      loop.export(c, staging, model, restored.trainable)
    os.replace(os.path.join(staging, "export"), dst)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return step, sorted(os.path.join(r, n) for r, _, names in os.walk(dst) for n in names)
