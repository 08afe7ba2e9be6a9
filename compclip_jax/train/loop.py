"""Training: `run(config, workdir)` reads top to bottom — config check, mesh, data, model and weights, parameter
rules and optimiser, sharded state, jitted steps, restore, loop, export.

The method (compclip_jax/methods/, `config.method`) says what is trained: its step kinds and their alternation, each
kind's samples, image normalisation and loss, its extra model parts. Nothing here names a method. Every step kind is
one `jax.jit` (state donated) with its own pipeline over one shared shuffled order (step g gets global batch g, from
the pipeline of the kind the method runs at g, METHODS §1.4). Checkpoints hold the
trainable state, the optimiser state and every pipeline's iterator state, so a rerun with the same workdir continues
exactly where the last checkpoint left off.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import os
import signal
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils

from compclip_jax.errors import UserError
from compclip_jax import assets, methods
from compclip_jax.train import checkpointing
from compclip_jax.weights import loading
from compclip_jax.train import optim
from compclip_jax.train import runinfo
from compclip_jax.train import sharding
from compclip_jax.train import steps
from compclip_jax.data import pipeline as pl
from compclip_jax.data import records, samples, sources
from compclip_jax.data.images import Preprocess
from compclip_jax.data.sources import PreparedSource
from compclip_jax.data.tokenizers import CLIPTokenizer, T5Tokenizer
from compclip_jax.evaluators import run as evaluation
from compclip_jax.evaluators.encoding import Encoder
from compclip_jax.methods import Method
from compclip_jax.train.metrics import MetricWriter
from compclip_jax.models import clip_config
from compclip_jax.models.clip import ATTENTION, CLIP, REMAT_POLICIES, DTypes
from compclip_jax.methods.read.model import READ_PROJ_INITS, READModel, clip_of, read_proj_init
from compclip_jax.models.t5 import T5Config, T5Decoder
from compclip_jax.weights import params

DTYPE_NAMES = ("float32", "bfloat16", "float16")


class ConfigError(UserError, ValueError):
  pass


class Interrupted(Exception):
  """SIGTERM / SIGINT stopped training after a checkpoint; `exit_code` 143 / 130 (128 + the signal's number), so a
  scheduler does not mistake the stop for a finished run."""
  def __init__(self, signum: int, step: int, workdir: str):
    name = signal.Signals(signum).name
    super().__init__(f"{name}: checkpoint written at step {step} in {workdir}; rerun the same command to resume")
    self.signum, self.step, self.exit_code = signum, step, 128 + signum


# ------------------------------------------------------------------------------------------------- config check
def validate(c: ml_collections.ConfigDict) -> None:
  """Every problem found before anything loads or compiles, reported at once."""
  errors = []
  if c.method in methods.names():
    errors += methods.get(c.method).validate(c)
  else:
    errors.append(f"method {c.method!r}: use one of {methods.names()}")
  if not c.model.init and not c.model.random:
    errors.append("model.init (a path load_clip reads) or model.random ('tiny' or an open_clip name) is required")
  if c.model.init and not os.path.exists(c.model.init):
    errors.append(f"model.init {c.model.init} does not exist")
  if c.model.random and c.model.random != "tiny" and c.model.random.removesuffix("-quickgelu") not in \
      clip_config.OPEN_CLIP_MODELS:
    errors.append(f"model.random {c.model.random!r}: use 'tiny' or one of {sorted(clip_config.OPEN_CLIP_MODELS)}")
  if c.t5.init and not os.path.isdir(c.t5.init):
    errors.append(f"t5.init {c.t5.init} is not a directory")
  errors += sources.config_errors(c.data) + evaluation.config_errors(c.evals)
  for name in ("frozen_dtype", "compute_dtype", "text_compute_dtype", "vision_compute_dtype"):
    if c.model[name] not in DTYPE_NAMES and not (name.endswith("_compute_dtype") and c.model[name] == ""):
      errors.append(f"model.{name} {c.model[name]!r}: use one of {DTYPE_NAMES}")
  if c.model.attention not in ATTENTION or c.model.remat_policy not in REMAT_POLICIES:
    errors.append(f"model.attention {c.model.attention!r} / model.remat_policy {c.model.remat_policy!r}: use one "
                  f"of {ATTENTION} / {REMAT_POLICIES}")
  if c.model.read_proj_init not in READ_PROJ_INITS:
    errors.append(f"model.read_proj_init {c.model.read_proj_init!r}: use one of {READ_PROJ_INITS}")
  n_dev, n_proc = jax.device_count(), jax.process_count()
  if c.batch_size % n_dev or c.batch_size % n_proc:
    errors.append(f"batch_size {c.batch_size} is not divisible by the {n_dev} devices / {n_proc} processes")
  if c.total_steps < 0 or c.num_epochs <= 0:
    errors.append("total_steps must be ≥ 0 and num_epochs > 0")
  if errors:
    raise ConfigError("config problems:\n  " + "\n  ".join(errors))


# --------------------------------------------------------------------------------------------------------- data
def make_source(c, workdir: str):
  """The training source of `c.data` (data/sources.py); a synthetic world is written once, by process 0."""
  return sources.make_source(c.data, workdir, c.seed, jax.process_index(), _barrier)


def _barrier(name: str) -> None:
  """Every process waits here for the others (a no-op with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


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


def sample_options(c, image_size: int) -> samples.SampleOptions:
  return samples.SampleOptions(image_size=image_size, clic_concat=c.data.clic_concat,
                               clic_imagenet_normalization=c.data.clic_imagenet_normalization,
                               read_target_may_equal_positive=c.data.read_target_may_equal_positive,
                               negclip_random_caption=c.data.negclip_random_caption,
                               clic_shared_words_across_tags=c.data.clic_shared_words_across_tags,
                               clic_exclude_nonword=c.data.clic_exclude_nonword,
                               read_overlapping_swaps=c.data.read_overlapping_swaps,
                               alpha_premultiplied_resize=c.data.alpha_premultiplied_resize)


# ------------------------------------------------------------------------------------------------ model, weights
@dataclasses.dataclass
class Model:
  """What training needs to know about the model it builds."""
  abstract: nnx.Module
  flat: dict  # initial parameters (numpy, stored dtype): the frozen ones are exported from here, bit for bit
  clip_cfg: clip_config.CLIPConfig
  tokenizer: CLIPTokenizer
  t5_tokenizer: T5Tokenizer | None
  preprocess_mean: tuple
  preprocess_std: tuple
  t5_cfg: T5Config | None = None

  @property
  def preprocess(self) -> Preprocess:
    """The model's eval transform (input size, mean, std): what evaluation and the export use."""
    return Preprocess(self.clip_cfg.vision.image_size, tuple(self.preprocess_mean), tuple(self.preprocess_std))


def build_model(c) -> Model:
  dt = DTypes(compute=c.model.compute_dtype)  # READ's decoder, and each tower unless its own knob is set
  text_dt = DTypes(compute=c.model.text_compute_dtype or c.model.compute_dtype)
  vision_dt = DTypes(compute=c.model.vision_compute_dtype or c.model.compute_dtype)
  m = c.model

  def make_clip(cfg):
    return CLIP(cfg, rngs=nnx.Rngs(c.seed), text_dtypes=text_dt, vision_dtypes=vision_dt, remat_text=m.remat_text,
                attention=m.attention, remat_policy=m.remat_policy)

  if m.init:
    abstract_clip = lambda cfg: params.abstract(lambda: make_clip(cfg))
    cfg, flat, tok, pre, _ = loading.load_clip_params(m.init, m.model_name or None, m.activation or None, abstract_clip)
    if tok is None:
      raise ConfigError(f"{c.model.init}: no tokenizer (non-standard vocabulary without tokenizer files)")
    mean, std = pre.mean, pre.std
  else:
    cfg = clip_config.tiny() if c.model.random == "tiny" else clip_config.named(c.model.random)
    if cfg.vision.image_size != c.data.image_size:
      cfg = cfg.replace(vision=dataclasses.replace(cfg.vision, image_size=c.data.image_size))
    flat = params.flat_params(make_clip(cfg))
    tok, mean, std = CLIPTokenizer.default(), clip_config.OPENAI_MEAN, clip_config.OPENAI_STD
  tok = tok.with_cleaning(c.data.clean_text)  # METHODS §1.2 step 7: open_clip's ftfy / html cleaning
  if not methods.get(c.method).decoder:
    return Model(params.abstract(lambda: make_clip(cfg)), flat, cfg, tok, None, mean, std)
  # READ's parts: CLIP + W + the frozen T5 v1.1 decoder
  if c.t5.init:
    t5_cfg, t5_flat, t5_tok = loading.load_t5_decoder_params(c.t5.init, dt, c.t5.tokenizer or None)
    if t5_tok is None:
      raise ConfigError(f"{c.t5.init} has no spiece.model: copy the checkpoint's tokenizer there or set t5.tokenizer")
  else:  # t5.random: a tiny random decoder; its tokenizer is data-independent (default: the bundled model)
    t5_tok = T5Tokenizer(c.t5.tokenizer or assets.SYNTHETIC_T5_SPIECE)
    t5_cfg = T5Config.v1_1(c.t5.random_d_model, c.t5.random_layers,
                           max(int(t5_tok.sp.get_piece_size()), c.t5.random_vocab))
    t5_flat = params.flat_params(T5Decoder(t5_cfg, dt, rngs=nnx.Rngs(c.seed + 1)))
  if t5_tok.sp.get_piece_size() > t5_cfg.vocab_size:
    raise ConfigError(f"the T5 tokenizer has {t5_tok.sp.get_piece_size()} pieces but the decoder's vocabulary is "
                      f"{t5_cfg.vocab_size}: t5.init's spiece.model and config.json do not belong together")
  # drawn as [in, out], as every kernel initialiser is called; stored [out, in] (models/layers.py)
  w = read_proj_init(c.model.read_proj_init)(jax.random.PRNGKey(c.seed + 2), (cfg.text.width, t5_cfg.d_model))
  flat = {
      **{f"clip.{k}": v for k, v in flat.items()},
      **{f"decoder.{k}": v for k, v in t5_flat.items()}, "proj.kernel": np.asarray(w).T
  }
  abstract = params.abstract(
      lambda: READModel(make_clip(cfg), t5_cfg, rngs=nnx.Rngs(0), t5_dtypes=dt, t5_attention=c.model.attention))
  return Model(abstract, flat, cfg, tok, t5_tok, mean, std, t5_cfg)


# ---------------------------------------------------------------------------------------------------------- run
@dataclasses.dataclass
class Trainer:
  """Everything `setup` builds: data pipelines, the sharded state and the jitted step of each kind (keyed by kind
  name, as the checkpointed data states are)."""
  config: ml_collections.ConfigDict
  method: Method
  model: Model
  kinds: list[str]
  pipes: dict[str, pl.Batches]
  total: int
  state: steps.TrainState  # the initial state (the loop carries its own; `compile_step` takes one)
  frozen: nnx.State
  state_sh: steps.TrainState  # a TrainState of shardings
  batch_sh: jax.sharding.Sharding
  step_fns: dict[str, jax.stages.Wrapped]  # kind → jax.jit(step), compiled on first use
  graphdef: nnx.GraphDef
  mesh: jax.sharding.Mesh
  skips: records.SkipReport | None = None  # every dropped record: read-time rejects and load-time skips
  n_records: int = 0  # records the data source holds (the run's fingerprint records it)
  widths: sharding.HostAgreement = dataclasses.field(default_factory=sharding.HostAgreement)  # trimmed widths

  def global_batch(self, kind: str) -> dict:
    local = next(self.pipes[kind])
    if self.config.data.trim_tokens:
      length = pl.text_length(local, self.model.tokenizer.eot_id)
      length = self.widths.max(length)  # every host must cut at the same width (host to host, sharding.py)
      local = pl.trim_tokens(local, length)
    return pl.to_global(local, self.batch_sh)


def setup(c: ml_collections.ConfigDict, workdir: str) -> Trainer:
  """Config check, mesh, data, model + weights, parameter rules, optimiser, sharded state, jitted steps."""
  validate(c)
  runinfo.check_writable(workdir)  # a read-only workdir is a one-line error, not a traceback from orbax
  method = methods.get(c.method)

  # --- mesh
  mesh = sharding.make_mesh(c.mesh.data, c.mesh.fsdp)
  logging.info("mesh %s over %d devices, %d process(es)", dict(mesh.shape), jax.device_count(), jax.process_count())

  # --- data
  source = make_source(c, workdir)
  # read-time rejects: logged with examples, written to <workdir>/skipped.jsonl, checked against max_skip_fraction
  skips = records.SkipReport.for_workdir(workdir, c.data.max_skip_fraction, jax.process_index())
  skips.add_source(source)
  if len(source) < c.batch_size // jax.process_count():
    raise ConfigError(f"{len(source)} usable records cannot fill a local batch of "
                      f"{c.batch_size // jax.process_count()}")
  model = build_model(c)
  size = model.clip_cfg.vision.image_size
  if isinstance(source, PreparedSource):
    if source.image_size != size:
      raise ConfigError(f"{c.data.path} was prepared at {source.image_size} px but the model takes {size} px; rerun "
                        f"python -m compclip_jax.prepare with --image_size={size}")
    if method.needs_parse and not source.meta.get("parsed"):
      raise ConfigError(f"{c.data.path} has no noun chunks (prepared from CLIC rows); {c.method}'s negatives need "
                        "a COCO-style source prepared with --coco_json")
  opts = sample_options(c, size)  # the model's input size, whatever data.image_size says
  kinds = method.step_kinds(c)
  if isinstance(source, PreparedSource):
    _check_prepared_alpha(c, source.meta, kinds)
  # One shuffled order for all kinds (METHODS §1.4): step g's batch is global batch g of it, from the pipeline of
  # method.kind_at(g); each pipeline builds only its own kind's batches, so each row is used once per epoch.
  shares = pl.interleave([method.kind_at(c, g).name for g in range(method.period(c))])
  pipes = {
      k.name: pl.make_batches(
          source,
          pl.PipelineConfig(k, c.batch_size, seed=c.seed, num_workers=c.data.num_workers,
                            max_skip_fraction=c.data.max_skip_fraction, options=opts, period=shares[k.name][0],
                            slots=shares[k.name][1]), model.tokenizer, model.t5_tokenizer, jax.process_index(),
          jax.process_count()) for k in kinds
  }
  for k, p in pipes.items():
    skips.attach(p.skips, k)
  total = c.total_steps or max(1, math.ceil(c.num_epochs * len(source) / c.batch_size))

  # --- parameter rules: trainable vs frozen, decay vs not (each parameter matched exactly once)
  groups = optim.assign(model.flat, {"trainable": c.optim.trainable, "frozen": c.optim.frozen})
  trainable_paths = [p for p, g in groups.items() if g == "trainable"]
  decay = optim.assign(trainable_paths, {"decay": c.optim.decay, "no_decay": c.optim.no_decay})
  concrete = params.fill(model.abstract, model.flat)
  is_trainable = lambda path, _: groups.get(".".join(map(str, path))) == "trainable"
  graphdef, trainable, frozen = nnx.split(concrete, is_trainable, ...)
  frozen_dtype = jnp.dtype(c.model.frozen_dtype)
  frozen = jax.tree.map(lambda x: x.astype(frozen_dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, frozen)
  n_train = sum(x.size for x in jax.tree.leaves(trainable))
  n_frozen = sum(x.size for x in jax.tree.leaves(frozen))
  logging.info("parameters: %s trainable, %s frozen (%s)", f"{n_train:,}", f"{n_frozen:,}", c.model.frozen_dtype)

  # --- optimiser, sharded state
  schedule = optim.make_schedule(c.optim.schedule, total, c.optim)
  tx = optim.make_optimizer(schedule, optim.decay_mask_tree(trainable, decay), c.optim)
  train_sh = sharding.state_shardings(mesh, trainable, c.mesh.min_fsdp_size)
  frozen = jax.device_put(frozen, sharding.state_shardings(mesh, frozen, c.mesh.min_fsdp_size))
  trainable = jax.device_put(trainable, train_sh)
  # Optimiser moments get their parameter's sharding (the size rule depends on the shape only); counts replicate.
  opt_sh = sharding.state_shardings(mesh, jax.eval_shape(tx.init, trainable), c.mesh.min_fsdp_size)
  opt_state = jax.jit(tx.init, out_shardings=opt_sh)(trainable)
  rep = sharding.replicated(mesh)
  state = steps.TrainState(jax.device_put(jnp.int32(0), rep), trainable, opt_state,
                           jax.device_put(jax.random.PRNGKey(c.seed), rep))
  state_sh = jax.tree.map(lambda x: x.sharding, state)
  frozen_sh = jax.tree.map(lambda x: x.sharding, frozen)
  batch_sh = sharding.batch_sharding(mesh)

  # --- jitted steps
  # each kind's images normalised with its own constants (METHODS §1.2 step 4: CLIC's ImageNet ones by default)
  norm = lambda k: k.normalization(opts, model.preprocess_mean, model.preprocess_std)
  step_fns = {
      k.name: jax.jit(steps.make_step(k, graphdef, tx, schedule, norm(k), c.loss),
                      in_shardings=(state_sh, frozen_sh, batch_sh), out_shardings=(state_sh, None),
                      donate_argnums=(0,)) for k in kinds
  }
  return Trainer(c, method, model, [k.name for k in kinds], pipes, total, state, frozen, state_sh, batch_sh, step_fns,
                 graphdef, mesh, skips, n_records=len(source))


def compile_step(t: Trainer, kind: str, state: steps.TrainState, batch: dict):
  """(compiled step, XLA's FLOPs per step or None, peak bytes per device or None) for `kind` on (`state`, `batch`)."""
  compiled = t.step_fns[kind].lower(state, t.frozen, batch).compile()
  return compiled, steps.compiled_flops(compiled), steps.compiled_peak_bytes(compiled)


def run(c: ml_collections.ConfigDict, workdir: str, allow_config_change: tuple[str, ...] = ()) -> dict:
  """Trains `c` in `workdir` (resuming if it holds checkpoints of the same run); returns the last logged metrics.

  The workdir is one run (compclip_jax/runinfo.py): a rerun whose config or inputs differ from the recorded ones
  raises runinfo.RunMismatch unless every difference is named in `allow_config_change` (keys or dotted prefixes,
  e.g. ("total_steps",)); checkpoints that exist but do not restore raise checkpointing.Unrestorable; a workdir held
  by another live process raises runinfo.WorkdirBusy. SIGTERM / SIGINT write a checkpoint, then raise Interrupted.
  """
  validate(c)
  runinfo.check_writable(workdir)
  lock = runinfo.Lock(workdir)
  busy = None
  if jax.process_index() == 0:  # one holder per run; the other processes follow process 0's verdict
    try:
      lock.acquire()
    except runinfo.WorkdirBusy as e:
      busy = e
  if jax.process_count() > 1:
    if int(multihost_utils.broadcast_one_to_all(np.int32(busy is not None))) and busy is None:
      busy = runinfo.WorkdirBusy(f"{workdir} is in use by another training process (process 0 says which)")
  if busy is not None:
    raise busy
  try:
    return _run(c, workdir, tuple(allow_config_change), lock)
  finally:
    lock.release()


def run_identity(c: ml_collections.ConfigDict, t: Trainer) -> dict:
  """What makes this run (runinfo.describe): config, parameter shapes, trainable set, data size, schedule length."""
  return runinfo.describe(c.to_dict(),
                          param_shapes={k: (np.shape(v), np.asarray(v).dtype) for k, v in t.model.flat.items()},
                          trainable=[".".join(map(str, p)) for p, _ in nnx.to_flat_state(t.state.trainable)],
                          data_records=t.n_records, total_steps=t.total)


def _run(c: ml_collections.ConfigDict, workdir: str, allow: tuple[str, ...], lock: runinfo.Lock) -> dict:
  t = setup(c, workdir)
  state, pipes = t.state, t.pipes

  # --- this run, or another one? (before anything in the workdir is read or written)
  identity = run_identity(c, t)
  previous = runinfo.load(workdir)
  changes = runinfo.check(runinfo.differences(previous["identity"], identity), allow, workdir) if previous else []

  # --- restore
  ckpt_dir = os.path.join(workdir, "checkpoints")
  has_steps = os.path.isdir(ckpt_dir) and any(d.isdigit() for d in os.listdir(ckpt_dir))
  if previous is None and not has_steps and os.path.isdir(os.path.join(workdir, "export")):
    raise runinfo.WorkdirError(f"{workdir} holds an export but no record of the run that wrote it ({runinfo.RUN_FILE})"
                               ": use a new --workdir, or move export/ away if it is not wanted")
  if previous is None and has_steps:  # run.json is written before the first step; without it, the checkpoints are
    # older than it — and than today's kernel layout, so a square kernel would restore transposed, silently
    raise runinfo.RunMismatch(
        f"{ckpt_dir} holds checkpoints but {workdir} has no {runinfo.RUN_FILE}: they were written by a compclip_jax "
        "older than 2026-12-01 (dense kernels [in, out], now [out, in]) and cannot be continued. Use a new --workdir; "
        "to keep that run's weights, export them with the version that wrote them and fine-tune from the export")
  ckpt = checkpointing.Checkpointer(workdir, c.checkpoint.keep, c.checkpoint.asynchronous)
  abstract_state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, t.state_sh)
  try:
    restored = ckpt.restore_latest(abstract_state)
  except checkpointing.Unrestorable:
    ckpt.close()
    raise
  start = 0
  if restored:
    start, state, data_states = restored
    for k, p in pipes.items():
      p.restore(data_states[k])
    logging.info("resumed from step %d in %s", start, workdir)
  if previous is not None and runinfo.unmatched(previous["identity"], identity):
    logging.warning("%s: not recorded on both sides (another version of compclip_jax), not compared: %s", workdir,
                    ", ".join(runinfo.unmatched(previous["identity"], identity)))
  for k, a, b in changes:
    logging.warning("continuing with a changed %s: was %s, now %s (--allow_config_change)", k, a, b)
  if jax.process_index() == 0:
    runinfo.record(workdir, identity, c.to_json_best_effort(indent=2), previous, changes, start)
  t.skips.resumed(start)  # skipped.jsonl keeps the load-time skips up to this checkpoint; later ones recur

  # --- loop
  writer = MetricWriter(
      workdir,
      t.total,
      c.batch_size,
      peak_flops=c.peak_flops * jax.device_count() or None,
      start_step=start,  # drops metrics.jsonl lines past `start` (they are about to recur)
      hparams=c.to_dict(),
      console_terms=t.method.console_terms)
  evaluate_at = make_evaluator(c, t, workdir, writer)
  if start == 0:
    evaluate_at(0, state)  # the starting point, for before/after comparisons
  compiled, flops = {}, {}
  stop = {"signum": 0}

  def on_signal(signum, _):
    if stop["signum"] and signum == signal.SIGINT:  # a second Ctrl-C: out now, without a checkpoint
      raise KeyboardInterrupt
    stop["signum"] = signum
    print(
        f"{signal.Signals(signum).name}: writing a checkpoint after this step, then stopping" +
        (" (Ctrl-C again stops at once, without one)" if signum == signal.SIGINT else ""), file=sys.stderr, flush=True)

  handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
  last, recent = {}, {}
  ahead = None  # the next step's (kind, batch), read while this step runs (`_ReadAhead`)
  try:
    for step in range(start, t.total):
      kind, batch = ahead.take() if ahead is not None else _read(c, t, step)
      ahead = None
      # one executable per kind and token-width bucket (trimming picks the width per batch)
      key = (kind, tuple(x.shape for x in jax.tree.leaves(batch)))
      compiling = key not in compiled
      if compiling:
        compiled[key], flops[kind], _ = compile_step(t, kind, state, batch)
        writer.set_flops((sum(flops.values()) / len(flops)) if all(flops.values()) else None)
      done = step + 1
      save_now = done % c.checkpoint.every_steps == 0 or done == t.total
      # between the log, eval and checkpoint points nothing is fetched from the devices: the step is dispatched
      # (asynchronously) and the next batch is read and put on the devices while it runs. `loop.forbid_host_sync`
      # makes any fetch there an error (the tests run with it).
      with _no_fetch(c.loop.forbid_host_sync and not compiling):
        state, metrics = compiled[key](state, t.frozen, batch)
        recent[kind] = metrics
        stats = {k: p.stats() for k, p in pipes.items()}  # this step's data counters, before any read-ahead
        if c.loop.read_ahead and not save_now and not stop["signum"]:
          ahead = _ReadAhead(c, t, done)
      if done % c.log_every == 0 or done == t.total:
        last = writer.write(done, _log_dict(recent, kind, stats))
        lock.heartbeat()
      if done == t.total or (c.evals.every_steps and done % c.evals.every_steps == 0):
        evaluate_at(done, state)
      if save_now or stop["signum"]:
        if ahead is not None:  # a signal came after the next batch was read: the checkpoint is of this step's end
          ahead.rewind()
          ahead = None
        writer.check_finite(done, metrics)  # never checkpoint a diverged state: loss, grad and parameter norms
        ckpt.save(done, state, {k: p.state() for k, p in pipes.items()})
        t.skips.checkpoint(done)  # skips since the last checkpoint → skipped.jsonl; counts by reason printed
      if stop["signum"]:
        raise Interrupted(stop["signum"], done, workdir)
  finally:
    for s, h in handlers.items():
      signal.signal(s, h)
    writer.close()
    ckpt.close()  # waits for an asynchronous save in flight: a checkpoint written on a signal is committed here
    t.skips.finish()

  # --- export (frozen parameters from the initial checkpoint, trained ones from the state)
  if jax.process_count() > 1:  # FSDP shards may live on other hosts: every process joins the gather
    trainable = multihost_utils.process_allgather(state.trainable, tiled=True)
  else:
    trainable = jax.device_get(state.trainable)
  if jax.process_index() == 0:
    export(c, workdir, t.model, trainable)
  return last


EVAL_SUMMARY = ("mean", "add", "replace", "swap", "mean/itt", "swap/itt", "mean/tot", "image_retrieval_recall@1",
                "text_retrieval_recall@1", "acc1", "accuracy", "group", "macro_accuracy", "precision@1")


def make_evaluator(c, t: Trainer, workdir: str, writer: MetricWriter):
  """evaluate_at(step, state): the configured benchmarks on the current weights, logged as eval/<bench>/<metric>."""
  if not c.evals.benchmarks:
    return lambda step, state: None
  # the benchmark folders (a synthetic world's are written once, by process 0; evaluators/run.py)
  data_dir, image_dir = evaluation.benchmark_dirs(c.evals, workdir, c.seed, jax.process_index(), _barrier)
  pre = t.model.preprocess
  current_clip = lambda state: clip_of(nnx.merge(t.graphdef, state.trainable, t.frozen))
  encoder = None

  def evaluate_at(step: int, state) -> None:
    nonlocal encoder
    clip = current_clip(state)
    if encoder is None:
      encoder = Encoder(clip, t.model.tokenizer, pre, c.evals.batch_size, t.mesh, progress=False)
    encoder.set_params(clip)
    results = evaluation.run_benchmarks(encoder, list(c.evals.benchmarks), data_dir, image_dir, c.evals.tie)
    flat = {
        f"eval/{b}/{k}": v for b, r in results.items() for k, v in r["metrics"].items() if isinstance(v, (int, float))
    }
    writer.write(step, flat, console=False, rate=False)
    if jax.process_index() == 0:
      summary = [
          f"{b} {k} {100 * r['metrics'][k]:.1f}" for b, r in results.items() for k in EVAL_SUMMARY if k in r["metrics"]
      ]
      print(f"eval step {step} | " + " | ".join(summary), flush=True)

  return evaluate_at


def _read(c, t: Trainer, step: int) -> tuple[str, dict]:
  """(kind, global batch) of `step`, read from that kind's pipeline."""
  kind = t.method.kind_at(c, step).name
  return kind, t.global_batch(kind)


class _ReadAhead:
  """The batch of `step`, read (and put on the devices) while the previous step runs: jax dispatches a step
  asynchronously, so this host work overlaps the device's, and the step never waits for the host.

  Reading ahead moves the pipelines one batch past the step that ran. The loop never reads ahead across a checkpoint
  step; when a signal stops training in between, `rewind` puts every pipeline (iterator, counters) and the skip report
  back where they were, so the checkpoint holds exactly the state of the step it saves and resuming is exact.
  """
  def __init__(self, c, t: Trainer, step: int):
    self._t = t
    self._states = {k: copy.deepcopy(p.state()) for k, p in t.pipes.items()}
    self._skips = t.skips.mark()
    self._batch = _read(c, t, step)

  def take(self) -> tuple[str, dict]:
    return self._batch

  def rewind(self) -> None:
    for k, p in self._t.pipes.items():
      p.restore(self._states[k])
    self._t.skips.rewind(self._skips)


def _no_fetch(on: bool):
  """A context in which any device → host transfer raises (`loop.forbid_host_sync`), by jax's transfer guard; a
  no-op when off. On a CPU backend jax lets every fetch through (device memory is host memory): tests/test_train.py
  instruments this context for its CPU runs."""
  return jax.transfer_guard_device_to_host("disallow_explicit") if on else contextlib.nullcontext()


def _log_dict(recent: dict, kind: str, stats: dict) -> dict:
  """The latest metrics of every step kind (CLIC and its CLIP steps both show), `loss` being this step's.

  The unprefixed step metrics (lr, grad_norm, param_norm) are this step's too: `kind` is merged last, whatever order
  the kinds were first seen in (after a resume that order flips, and an older step's lr would show).
  """
  out = {"loss": recent[kind]["loss"]}
  for k, m in sorted(recent.items(), key=lambda km: km[0] == kind):
    out.update({(f"loss/{k}" if name == "loss" else name): v for name, v in m.items()})
  for k, st in stats.items():
    out.update({f"data/{k}/{name}": v for name, v in st.items()})
  return out


def export(c, workdir: str, model: Model, trainable) -> None:
  flat = dict(model.flat)
  flat.update({".".join(map(str, p)): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(trainable)})
  method = methods.get(c.method)
  if method.export_parts is not None:  # the method's own parts (READ's decoder); CLIP's parameters for the rest
    flat = method.export_parts(c, workdir, model.t5_cfg, model.t5_tokenizer, flat)
  clip = params.fill(params.abstract(lambda: CLIP(model.clip_cfg, rngs=nnx.Rngs(0))), flat)
  pre = model.preprocess
  if c.export.hf:
    written = loading.save_clip(clip, os.path.join(workdir, "export", "hf"), "hf", tokenizer=model.tokenizer,
                                preprocess=pre)
    logging.info("exported HF CLIPModel: %s", os.path.dirname(written[0]))
  if c.export.open_clip:
    loading.save_clip(clip, os.path.join(workdir, "export", "open_clip", "model.safetensors"), "open_clip",
                      preprocess=pre)
