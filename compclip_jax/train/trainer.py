"""`setup(config, workdir)` → Trainer: the config checked (every problem at once), the mesh, the data (one pipeline
per step kind over one shared order), the model and the sharded state (train/state.py), the jitted steps.

The method (compclip_jax/methods/, `config.method`) says what is trained: its step kinds and their alternation,
each kind's samples, image normalisation and loss, its extra model parts. Nothing here names a method.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Mapping, Sequence

import jax
import ml_collections
from jax.experimental import multihost_utils

from compclip_jax import methods
from compclip_jax.data import pipeline as pl
from compclip_jax.data import records, source_config
from compclip_jax.data.sources import PreparedSource
from compclip_jax.evaluators import run as evaluation
from compclip_jax.methods import Method
from compclip_jax.models import clip_config
from compclip_jax.models.layers import ATTENTION, REMAT_POLICIES
from compclip_jax.train import config as config_lib
from compclip_jax.train import optim, runinfo, state, steps
from compclip_jax import sharding
from compclip_jax.train.config import ConfigError
from compclip_jax.weights import loading

DTYPE_NAMES = ("float32", "bfloat16", "float16")


# ------------------------------------------------------------------------------------------------- config check
def _model_problems(m) -> list[str]:
  errors = []
  if not m.init and not m.random:
    errors.append("model.init (a path load_clip reads) or model.random ('tiny', 'demo', 'siglip_tiny', "
                  "'siglip_demo' or an open_clip name) is required")
  if m.init and not os.path.exists(m.init):
    errors.append(f"model.init {m.init} does not exist")
  elif m.init and os.path.exists(os.path.join(m.init, "run.json")):  # its config.json would pass for an HF model's
    errors.append(
        f"model.init {m.init} is a training workdir, not a checkpoint: pass {os.path.join(m.init, 'export', 'hf')} "
        f"(its export) or write one with python -m compclip_jax convert --src={m.init} --dst=DIR")
  elif m.init:
    try:  # the format from the file names alone: a folder that is no checkpoint is refused before anything is written
      loading.detect_format(m.init)
    except ValueError as e:
      errors.append(f"model.init {e}")
  if m.random and m.random not in ("tiny", "demo", *state.SIGLIP_SIZES) and \
      m.random.removesuffix("-quickgelu") not in clip_config.OPEN_CLIP_MODELS:
    errors.append(f"model.random {m.random!r}: use 'tiny', 'demo', {', '.join(map(repr, state.SIGLIP_SIZES))} or "
                  f"one of {sorted(clip_config.OPEN_CLIP_MODELS)}")
  for name in ("frozen_dtype", "compute_dtype", "text_compute_dtype", "vision_compute_dtype"):
    if m[name] not in DTYPE_NAMES and not (name.endswith("_compute_dtype") and m[name] == ""):
      errors.append(f"model.{name} {m[name]!r}: use one of {DTYPE_NAMES}")
  if m.attention not in ATTENTION or m.remat_policy not in REMAT_POLICIES:
    errors.append(f"model.attention {m.attention!r} / model.remat_policy {m.remat_policy!r}: use one "
                  f"of {ATTENTION} / {REMAT_POLICIES}")
  return errors


def _device_problems(c, n_dev: int, n_proc: int) -> list[str]:
  """The global batch and the mesh against this run's devices and processes."""
  errors = []
  if c.batch_size > 0 and (c.batch_size % n_dev or c.batch_size % n_proc):
    errors.append(f"batch_size {c.batch_size} is not divisible by the {n_dev} devices / {n_proc} processes: use a "
                  f"multiple of {math.lcm(n_dev, n_proc)}")
  data, fsdp = c.mesh.data, c.mesh.fsdp
  if data == fsdp == -1:
    errors.append("mesh.data and mesh.fsdp are both -1: at most one of them may be")
  elif min(data, fsdp) >= -1 and 0 not in (data, fsdp):  # other values: config_lib.RANGES says what is wrong
    rows, cols = (data if data > 0 else n_dev // fsdp), (fsdp if fsdp > 0 else n_dev // data)
    if rows * cols != n_dev:
      errors.append(f"mesh.data {data} × mesh.fsdp {fsdp} does not use the {n_dev} devices: make their product "
                    f"{n_dev}, or set one of them to -1")
  return errors


def validate(c: ml_collections.ConfigDict, inputs: bool = True) -> None:
  """Every problem found before anything loads or compiles, reported at once. `inputs=False` (the compile check,
  which reads no data and has its own devices): the data and evaluation sources and the batch's division over this
  host's devices are not checked."""
  errors = []
  if c.method in methods.names():
    errors += methods.get(c.method).problems(c)
  else:
    errors.append(f"method {c.method!r}: use one of {methods.names()}")
  errors += _model_problems(c.model)
  if inputs:
    errors += source_config.config_errors(c.data) + evaluation.config_errors(c.evals)
  if c.optim.schedule not in optim.SCHEDULES:
    errors.append(f"optim.schedule {c.optim.schedule!r}: use one of {optim.SCHEDULES}")
  errors += config_lib.problems(c)
  if inputs:
    errors += _device_problems(c, jax.device_count(), jax.process_count())
  if errors:
    many = f"{len(errors)} config problems:\n  " + "\n  ".join(errors)  # all of them at once, one a line
    raise ConfigError(f"config problem: {errors[0]}" if len(errors) == 1 else many)


# --------------------------------------------------------------------------------------------------------- data
def barrier(name: str) -> None:
  """Every process waits here for the others (a no-op with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def make_source(c, workdir: str):
  """The training source of `c.data` (data/source_config.py); a synthetic world is written once, by process 0."""
  return source_config.make_source(c.data, workdir, c.seed, jax.process_index(), barrier)


def _check_prepared_alpha(c, meta: dict, kinds) -> None:
  """Prepared images were resized with the manifest's alpha choice (METHODS §1.2 step 3): refuse a run whose step
  kinds resize otherwise where that changes pixels (images with transparency); warn where prepare did not count them."""
  had, n = meta.get("alpha_premultiplied_resize"), meta.get("transparent_images")
  for k in kinds:
    want = bool(c.data.alpha_premultiplied_resize) if k.alpha_from_config else False
    if had is None or want == had or n == 0:
      continue
    way = (f", or set data.alpha_premultiplied_resize={had}" if k.alpha_from_config else
           f" (the {k.name} step always drops alpha before resizing, as its reference does)")
    what = (f"{c.data.path} was prepared with --alpha_premultiplied_resize={had}, but the {k.name} step resizes with "
            f"{want}")
    if n is None:
      logging.warning(
          "%s; prepare did not count its images with transparency (the only ones this changes): "
          "re-prepare with --alpha_premultiplied_resize=%s to be sure%s", what, want, way)
      continue
    raise ConfigError(f"{what}, and {n} of its images have transparency: re-prepare with "
                      f"--alpha_premultiplied_resize={want} (--rebuild to reuse the folder){way}")


def _check_prepared(c, method: Method, source, size: int, squash: bool = False) -> None:
  prepared = isinstance(source, PreparedSource) or getattr(source, "prepared", False)  # also `prepare --format=tfds`
  if squash and prepared:
    raise ConfigError(f"{c.data.path or c.data.tfds_name}: prepared images are CLIP's resize + centre crop, but this "
                      "model (SigLIP) resizes the whole image to a square; train it on the unprepared source (CSV, "
                      "COCO JSON or a TFDS dataset that `prepare` did not write)")
  if not isinstance(source, PreparedSource):
    return
  if source.image_size != size:
    raise ConfigError(f"{c.data.path} was prepared at {source.image_size} px but the model takes {size} px; rerun "
                      f"python -m compclip_jax prepare with --image_size={size}")
  if method.needs_parse and not source.meta.get("parsed"):
    raise ConfigError(f"{c.data.path} has no noun chunks (prepared from CSV rows); {c.method}'s negatives need "
                      "a COCO-style source prepared with --coco_json")
  _check_prepared_alpha(c, source.meta, method.step_kinds(c))


def make_pipelines(c, method: Method, source, model: state.Model, skips: records.SkipReport) -> dict:
  """kind name → pipeline. One shuffled order for all kinds (METHODS §1.4): step g's batch is global batch g of it,
  from the pipeline of method.kind_at(g); each pipeline builds only its own kind's batches, so each row is used once
  per epoch. Samples at the model's input size, whatever data.image_size says."""
  size = model.clip_cfg.vision.image_size
  shares = pl.interleave([method.kind_at(c, g).name for g in range(method.period(c))])
  pipes = {}
  for k in method.step_kinds(c):
    cfg = pl.PipelineConfig(k, c.batch_size, seed=c.seed, num_workers=c.data.num_workers,
                            max_skip_fraction=c.data.max_skip_fraction,
                            options=dataclasses.replace(k.options(c, size), squash=model.preprocess_squash),
                            period=shares[k.name][0], slots=shares[k.name][1])
    pipes[k.name] = pl.make_batches(source, cfg, model.tokenizer, model.target_tokenizer, jax.process_index(),
                                    jax.process_count())
    skips.attach(pipes[k.name].skips, k.name)
  return pipes


# ------------------------------------------------------------------------------------------------------ trainer
@dataclasses.dataclass
class Trainer:
  """Everything `setup` builds: data pipelines, the sharded state and the jitted step of each kind (keyed by kind
  name, as the checkpointed data states are)."""
  config: ml_collections.ConfigDict
  method: Method
  model: state.Model
  kinds: list[str]
  pipes: dict[str, pl.Batches]
  total: int
  state: steps.TrainState  # the initial state (the loop carries its own; `compile_step` takes one)
  frozen: object
  state_sh: steps.TrainState  # a TrainState of shardings
  batch_sh: jax.sharding.Sharding
  step_fns: dict[str, jax.stages.Wrapped]  # kind → jax.jit(step), compiled on first use
  graphdef: object
  mesh: jax.sharding.Mesh
  skips: records.SkipReport | None = None  # every dropped record: read-time rejects and load-time skips
  n_records: int = 0  # records the data source holds (the run's fingerprint records it)
  trainable_paths: list[str] = dataclasses.field(default_factory=list)
  widths: sharding.HostAgreement = dataclasses.field(default_factory=sharding.HostAgreement)  # trimmed widths

  def global_batch(self, kind: str) -> dict:
    local = next(self.pipes[kind])
    if self.config.data.trim_tokens and self.model.tokenizer.trims_padding:  # SigLIP pools the last position
      length = pl.text_length(local, self.model.tokenizer.eot_id)
      length = self.widths.max(length)  # every host must cut at the same width (host to host, sharding.py)
      local = pl.trim_tokens(local, length)
    return pl.to_global(local, self.batch_sh)


def setup(c: ml_collections.ConfigDict, workdir: str, batches: Mapping[str, Sequence[dict]] | None = None) -> Trainer:
  """Config check, mesh, data, model + weights, parameter rules, optimiser, sharded state, jitted steps.

  `batches` (for tests): {kind name: its global batches in the order its steps take them}, fed to the steps instead
  of what the kind's pipeline builds (`pipeline.GivenBatches`; one process). The data source is still read, so the
  run's length comes from its records as ever."""
  validate(c)
  runinfo.check_writable(workdir)  # a read-only workdir is a one-line error, not a traceback from orbax
  method = methods.get(c.method)
  mesh = sharding.make_mesh(c.mesh.data, c.mesh.fsdp)
  logging.info("mesh %s over %d devices, %d process(es)", dict(mesh.shape), jax.device_count(), jax.process_count())
  model = state.build_model(c, method)  # before the data: a model that does not load leaves the workdir as it was
  source = make_source(c, workdir)
  # read-time rejects: logged with examples, written to <workdir>/skipped.jsonl, checked against max_skip_fraction
  skips = records.SkipReport.for_workdir(workdir, c.data.max_skip_fraction, jax.process_index())
  skips.add_source(source)
  if len(source) < c.batch_size // jax.process_count():
    raise ConfigError(f"{len(source)} usable records cannot fill a local batch of "
                      f"{c.batch_size // jax.process_count()}")
  _check_prepared(c, method, source, model.clip_cfg.vision.image_size, model.preprocess_squash)
  pipes = make_pipelines(c, method, source, model, skips)
  if batches is not None:
    pipes = {k: pl.GivenBatches(batches[k], c.data.max_skip_fraction) for k in pipes}
  total = c.total_steps or config_lib.steps_from_epochs(c, len(source))
  st = state.build_state(c, model, mesh, total)
  return Trainer(c, method, model, list(pipes), pipes, total, st.state, st.frozen, st.state_sh,
                 sharding.batch_sharding(mesh), state.jit_steps(c, method, model, st, mesh), st.graphdef, mesh, skips,
                 n_records=len(source), trainable_paths=st.trainable_paths)


def compile_step(t: Trainer, kind: str, state_: steps.TrainState, batch: dict):
  """(compiled step, XLA's FLOPs per step or None, peak bytes per device or None) for `kind` on (`state_`, `batch`)."""
  compiled = t.step_fns[kind].lower(state_, t.frozen, batch).compile()
  return compiled, steps.compiled_flops(compiled), steps.compiled_peak_bytes(compiled)
