"""Training: `run(config, workdir)` reads top to bottom — config check, mesh, data, model and weights, parameter
rules and optimiser, sharded state, jitted steps, restore, loop, export.

Every step kind is one `jax.jit` (state donated); CLIC alternates CLIC and CLIP steps by step number (METHODS §1.4),
each kind with its own pipeline over one shared shuffled order (step g gets global batch g). Checkpoints hold the
trainable state, the optimiser state and every pipeline's iterator state, so a rerun with the same workdir continues
exactly where the last checkpoint left off.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import signal
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from compclip_jax import checkpointing, loading, optim, runinfo, sharding, steps
from compclip_jax.data import pipeline as pl
from compclip_jax.data import records, samples
from compclip_jax.data.sources import CocoSource, CsvSource, PreparedSource, read_paraphrases
from compclip_jax.data.tokenizers import CLIPTokenizer, T5Tokenizer
from compclip_jax.metrics import MetricWriter
from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP, DTypes
from compclip_jax.models.read import READ_PROJ_INITS, READModel, clip_of, read_proj_init
from compclip_jax.models.t5 import T5Config, T5Decoder
from compclip_jax.weights import hf, params

METHODS = ("clic", "read", "negclip", "clip")
SOURCES = ("csv", "coco", "prepared")
DTYPE_NAMES = ("float32", "bfloat16", "float16")


class ConfigError(ValueError):
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
  if c.method not in METHODS:
    errors.append(f"method {c.method!r}: use one of {METHODS}")
  if not c.model.init and not c.model.random:
    errors.append("model.init (a path load_clip reads) or model.random ('tiny' or an open_clip name) is required")
  if c.model.init and not os.path.exists(c.model.init):
    errors.append(f"model.init {c.model.init} does not exist")
  if c.model.random and c.model.random != "tiny" and c.model.random.removesuffix("-quickgelu") not in \
      clip_config.OPEN_CLIP_MODELS:
    errors.append(f"model.random {c.model.random!r}: use 'tiny' or one of {sorted(clip_config.OPEN_CLIP_MODELS)}")
  if c.method == "read" and not c.t5.init and not c.data.generate:
    errors.append("READ needs t5.init: an HF T5 v1.1 directory (e.g. google/t5-v1_1-large downloaded locally)")
  if c.t5.init and not os.path.isdir(c.t5.init):
    errors.append(f"t5.init {c.t5.init} is not a directory")
  if c.data.source not in SOURCES:
    errors.append(f"data.source {c.data.source!r}: use one of {SOURCES}")
  if not c.data.generate:
    if not c.data.path or not os.path.exists(c.data.path):
      errors.append(f"data.path {c.data.path!r} does not exist")
    if c.data.source != "prepared" and not os.path.isdir(c.data.image_root or ""):
      errors.append(f"data.image_root {c.data.image_root!r} is not a directory")
    if c.data.paraphrases and not os.path.exists(c.data.paraphrases):
      errors.append(f"data.paraphrases {c.data.paraphrases} does not exist")
  for name in ("frozen_dtype", "compute_dtype"):
    if c.model[name] not in DTYPE_NAMES:
      errors.append(f"model.{name} {c.model[name]!r}: use one of {DTYPE_NAMES}")
  if c.model.read_proj_init not in READ_PROJ_INITS:
    errors.append(f"model.read_proj_init {c.model.read_proj_init!r}: use one of {READ_PROJ_INITS}")
  n_dev, n_proc = jax.device_count(), jax.process_count()
  if c.batch_size % n_dev or c.batch_size % n_proc:
    errors.append(f"batch_size {c.batch_size} is not divisible by the {n_dev} devices / {n_proc} processes")
  if c.total_steps < 0 or c.num_epochs <= 0:
    errors.append("total_steps must be ≥ 0 and num_epochs > 0")
  if errors:
    raise ConfigError("config problems:\n  " + "\n  ".join(errors))


def step_kinds(c) -> list[str]:
  return {"clic": ["clic", "clic_clip"] if c.clip_every > 0 else ["clic"], "read": ["read"],
          "negclip": ["negclip"], "clip": ["clip"]}[c.method]


def kind_at(c, step: int) -> str:
  return steps.clic_schedule_kind(step, c.clip_every) if c.method == "clic" else step_kinds(c)[0]


def schedule_period(c) -> int:
  """Steps after which `kind_at` repeats: clip_every CLIC steps + 1 CLIP step for CLIC, else 1."""
  return c.clip_every + 1 if c.method == "clic" and c.clip_every > 0 else 1


# --------------------------------------------------------------------------------------------------------- data
def make_source(c, workdir: str):
  if c.data.generate:  # :runlocal — the synthetic world, written once into the workdir
    from compclip_jax import synthetic  # pylint: disable=import-outside-toplevel
    from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
    root = os.path.join(workdir, "world")
    if jax.process_index() == 0:  # one writer; the other processes wait, then read the same files
      synthetic.write_world(root, c.data.generate, seed=c.seed)
    multihost_utils.sync_global_devices("synthetic world written")
    world = synthetic.write_world(root, c.data.generate, seed=c.seed)
    if c.data.source == "csv":
      return CsvSource(world["csv"], world["images"], any_image_format=c.data.any_image_format), world
    return CocoSource(world["coco_json"], world["images"], ("train",), read_paraphrases(world["paraphrases"])), world
  if c.data.source == "csv":
    return CsvSource(c.data.path, c.data.image_root, any_image_format=c.data.any_image_format), None
  if c.data.source == "coco":
    paras = read_paraphrases(c.data.paraphrases) if c.data.paraphrases else None
    return CocoSource(c.data.path, c.data.image_root, tuple(c.data.splits), paras), None
  return PreparedSource(c.data.path), None


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


def build_model(c, world) -> Model:
  dt = DTypes(compute=c.model.compute_dtype)
  make_clip = lambda cfg: CLIP(cfg, rngs=nnx.Rngs(c.seed), text_dtypes=dt, vision_dtypes=dt,
                               remat_text=c.model.remat_text)
  if c.model.init:
    cfg, flat, tok, pre, _ = loading.load_clip_params(c.model.init, c.model.model_name or None,
                                                      c.model.activation or None,
                                                      lambda cfg: params.abstract(lambda: make_clip(cfg)))
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
  if c.method != "read":
    return Model(params.abstract(lambda: make_clip(cfg)), flat, cfg, tok, None, mean, std)
  # READ: CLIP + W + the frozen T5 v1.1 decoder
  t5_dt = DTypes(compute=c.model.compute_dtype)
  if c.t5.init:
    t5_cfg, raw = hf.read_t5_dir(c.t5.init)
    t5_tok = T5Tokenizer(os.path.join(c.t5.init, "spiece.model"))
    t5_flat = raw.to_ours(params.shapes(params.abstract(lambda: T5Decoder(t5_cfg, t5_dt, rngs=nnx.Rngs(0)))))
  else:  # :runlocal — a tiny random decoder with a SentencePiece model trained on the world's captions
    from compclip_jax import synthetic  # pylint: disable=import-outside-toplevel
    t5_tok = T5Tokenizer(synthetic.write_t5_tokenizer(os.path.dirname(world["csv"]), world["coco_json"]))
    d = c.t5.random_d_model  # v1.1 proportions: 64-wide heads, d_ff = 2.75 d_model (2816 at large's 1024)
    t5_cfg = T5Config(vocab_size=max(int(t5_tok.sp.get_piece_size()), c.t5.random_vocab), d_model=d, d_kv=64,
                      d_ff=int(2.75 * d), num_decoder_layers=c.t5.random_layers, num_heads=max(1, d // 64))
    t5_flat = params.flat_params(T5Decoder(t5_cfg, t5_dt, rngs=nnx.Rngs(c.seed + 1)))
  if t5_tok.sp.get_piece_size() > t5_cfg.vocab_size:
    raise ConfigError(f"the T5 tokenizer has {t5_tok.sp.get_piece_size()} pieces but the decoder's vocabulary is "
                      f"{t5_cfg.vocab_size}: t5.init's spiece.model and config.json do not belong together")
  w = read_proj_init(c.model.read_proj_init)(jax.random.PRNGKey(c.seed + 2), (cfg.text.width, t5_cfg.d_model))
  flat = {**{f"clip.{k}": v for k, v in flat.items()}, **{f"decoder.{k}": v for k, v in t5_flat.items()},
          "proj.kernel": np.asarray(w)}
  abstract = params.abstract(lambda: READModel(make_clip(cfg), t5_cfg, rngs=nnx.Rngs(0), t5_dtypes=t5_dt))
  return Model(abstract, flat, cfg, tok, t5_tok, mean, std, t5_cfg)


# ---------------------------------------------------------------------------------------------------------- run
@dataclasses.dataclass
class Trainer:
  """Everything `setup` builds: data pipelines, the sharded state and the jitted step of each kind."""
  config: ml_collections.ConfigDict
  model: Model
  kinds: list[str]
  pipes: dict
  total: int
  state: steps.TrainState
  frozen: object
  state_sh: object
  batch_sh: object
  step_fns: dict  # kind → jax.jit(step), compiled on first use
  graphdef: object
  mesh: object
  skips: records.SkipReport | None = None  # every dropped record: read-time rejects and load-time skips
  n_records: int = 0  # records the data source holds (the run's fingerprint records it)

  def global_batch(self, kind: str) -> dict:
    local = next(self.pipes[kind])
    if self.config.data.trim_tokens:
      length = pl.text_length(local, self.model.tokenizer.eot_id)
      if jax.process_count() > 1:  # every host must cut at the same width
        from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
        length = int(np.max(multihost_utils.process_allgather(np.int32(length))))
      local = pl.trim_tokens(local, length)
    return pl.to_global(local, self.batch_sh)


def setup(c: ml_collections.ConfigDict, workdir: str) -> Trainer:
  """Config check, mesh, data, model + weights, parameter rules, optimiser, sharded state, jitted steps."""
  validate(c)
  runinfo.check_writable(workdir)  # a read-only workdir is a one-line error, not a traceback from orbax

  # --- mesh
  mesh = sharding.make_mesh(c.mesh.data, c.mesh.fsdp)
  logging.info("mesh %s over %d devices, %d process(es)", dict(mesh.shape), jax.device_count(), jax.process_count())

  # --- data
  source, world = make_source(c, workdir)
  # read-time rejects: logged with examples, written to <workdir>/skipped.jsonl, checked against max_skip_fraction
  skips = records.SkipReport.for_workdir(workdir, c.data.max_skip_fraction, jax.process_index())
  skips.add_source(source)
  if len(source) < c.batch_size // jax.process_count():
    raise ConfigError(f"{len(source)} usable records cannot fill a local batch of "
                      f"{c.batch_size // jax.process_count()}")
  model = build_model(c, world)
  size = model.clip_cfg.vision.image_size
  if isinstance(source, PreparedSource):
    if source.image_size != size:
      raise ConfigError(f"{c.data.path} was prepared at {source.image_size} px but the model takes {size} px; rerun "
                        f"python -m compclip_jax.prepare with --image_size={size}")
    if c.method == "read" and not source.meta.get("parsed"):
      raise ConfigError(f"{c.data.path} has no noun chunks (prepared from CLIC rows); READ's negatives need a "
                        "COCO-style source prepared with --coco_json")
  opts = sample_options(c, size)  # the model's input size, whatever data.image_size says
  kinds = step_kinds(c)
  # One shuffled order for all kinds (METHODS §1.4): step g's batch is global batch g of it, from the pipeline of
  # kind_at(g); each pipeline builds only its own kind's batches, so each row is used once per epoch.
  shares = pl.interleave([kind_at(c, g) for g in range(schedule_period(c))])
  pipes = {k: pl.make_batches(source, pl.PipelineConfig(k, c.batch_size, seed=c.seed, num_workers=c.data.num_workers,
                                                        max_skip_fraction=c.data.max_skip_fraction, options=opts,
                                                        period=shares[k][0], slots=shares[k][1]),
                              model.tokenizer, model.t5_tokenizer, jax.process_index(), jax.process_count())
           for k in kinds}
  for k, p in pipes.items():
    skips.attach(p.skips, k)
  norms = {k: samples.normalization(k, opts, model.preprocess_mean, model.preprocess_std) for k in kinds}
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
  step_fns = {k: jax.jit(steps.make_step(k, graphdef, tx, schedule, norms, c.loss),
                         in_shardings=(state_sh, frozen_sh, batch_sh), out_shardings=(state_sh, None),
                         donate_argnums=(0,)) for k in kinds}
  return Trainer(c, model, kinds, pipes, total, state, frozen, state_sh, batch_sh, step_fns, graphdef, mesh, skips,
                 n_records=len(source))


def compile_step(t: Trainer, kind: str, batch: dict):
  """(compiled step, XLA's FLOPs per step or None, peak bytes per device or None) for `kind` on `batch`."""
  compiled = t.step_fns[kind].lower(t.state, t.frozen, batch).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  mem = compiled.memory_analysis()
  peak = None
  if mem is not None:
    peak = getattr(mem, "peak_memory_in_bytes", None) or (
        mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes)
  return compiled, (cost or {}).get("flops"), peak


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
    from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
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
  return runinfo.describe(c.to_dict(), param_shapes={k: (np.shape(v), np.asarray(v).dtype)
                                                     for k, v in t.model.flat.items()},
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
  ckpt = checkpointing.Checkpointer(workdir, c.checkpoint.keep)
  abstract_state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, t.state_sh)
  try:
    restored = ckpt.restore_latest(abstract_state)
  except checkpointing.Unrestorable:
    ckpt.close()
    raise
  start = 0
  if restored:
    start, state, data_states = restored
    if set(pipes) - set(data_states):  # a checkpoint of another method (from before run.json existed)
      ckpt.close()
      raise runinfo.RunMismatch(f"checkpoint step {start} in {workdir} holds data states for {sorted(data_states)}, "
                                f"this run needs {sorted(pipes)}: it is another method's; use a new --workdir")
    for k, p in pipes.items():
      p.restore(data_states[k])
    logging.info("resumed from step %d in %s", start, workdir)
  if previous is not None and runinfo.unmatched(previous["identity"], identity):
    logging.warning("%s: not recorded on both sides (another version of compclip_jax), not compared: %s", workdir,
                    ", ".join(runinfo.unmatched(previous["identity"], identity)))
  if previous is None and restored:
    logging.warning("%s has checkpoints but no %s (written by an older version): recording this config as the run's",
                    workdir, runinfo.RUN_FILE)
  for k, a, b in changes:
    logging.warning("continuing with a changed %s: was %s, now %s (--allow_config_change)", k, a, b)
  if jax.process_index() == 0:
    runinfo.record(workdir, identity, c.to_json_best_effort(indent=2), previous, changes, start)
  t.skips.resumed(start)  # skipped.jsonl keeps the load-time skips up to this checkpoint; later ones recur

  # --- loop
  writer = MetricWriter(workdir, t.total, c.batch_size, peak_flops=c.peak_flops * jax.device_count() or None,
                        start_step=start,  # drops metrics.jsonl lines past `start` (they are about to recur)
                        hparams=c.to_dict())
  evaluate_at = make_evaluator(c, t, workdir, writer)
  if start == 0:
    evaluate_at(0, state)  # the starting point, for before/after comparisons
  compiled, flops = {}, {}
  stop = {"signum": 0}

  def on_signal(signum, _):
    if stop["signum"] and signum == signal.SIGINT:  # a second Ctrl-C: out now, without a checkpoint
      raise KeyboardInterrupt
    stop["signum"] = signum
    print(f"{signal.Signals(signum).name}: writing a checkpoint after this step, then stopping"
          + (" (Ctrl-C again stops at once, without one)" if signum == signal.SIGINT else ""), file=sys.stderr,
          flush=True)

  handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
  last, recent = {}, {}
  try:
    for step in range(start, t.total):
      kind = kind_at(c, step)
      batch = t.global_batch(kind)
      # one executable per kind and token-width bucket (trimming picks the width per batch)
      key = (kind, tuple(x.shape for x in jax.tree.leaves(batch)))
      if key not in compiled:
        t.state = state
        compiled[key], flops[kind], _ = compile_step(t, kind, batch)
        writer.flops = (sum(f for f in flops.values() if f) / len(flops)) if all(flops.values()) else None
      state, metrics = compiled[key](state, t.frozen, batch)
      recent[kind] = metrics
      done = step + 1
      if done % c.log_every == 0 or done == t.total:
        last = writer.write(done, _log_dict(recent, kind, pipes))
        lock.heartbeat()
      if done == t.total or (c.evals.every_steps and done % c.evals.every_steps == 0):
        evaluate_at(done, state)
      if done % c.checkpoint.every_steps == 0 or done == t.total or stop["signum"]:
        writer.check_finite(done, metrics)  # never checkpoint a diverged state: loss, grad and parameter norms
        ckpt.save(done, state, {k: p.state() for k, p in pipes.items()})
        t.skips.checkpoint(done)  # skips since the last checkpoint → skipped.jsonl; counts by reason printed
      if stop["signum"]:
        raise Interrupted(stop["signum"], done, workdir)
  finally:
    for s, h in handlers.items():
      signal.signal(s, h)
    writer.close()
    ckpt.close()
    t.skips.finish()

  # --- export (frozen parameters from the initial checkpoint, trained ones from the state)
  if jax.process_count() > 1:  # FSDP shards may live on other hosts: every process joins the gather
    from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
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
  from compclip_jax.data.images import Preprocess  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluate import run_benchmarks  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluators.encoding import Encoder  # pylint: disable=import-outside-toplevel
  data_dir, image_dir = c.evals.data_dir, c.evals.image_dir
  if c.evals.generate:  # :runlocal — held-out scenes of the synthetic world in the real benchmark formats
    from compclip_jax import synthetic  # pylint: disable=import-outside-toplevel
    from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
    root = os.path.join(workdir, "world", "benchmarks")
    if jax.process_index() == 0:
      synthetic.write_benchmarks(root, c.evals.generate, seed=c.seed + 1000)
    multihost_utils.sync_global_devices("synthetic benchmarks written")
    data_dir, image_dir = synthetic.write_benchmarks(root, c.evals.generate).values()
  cfg = t.model.clip_cfg
  pre = Preprocess(cfg.vision.image_size, tuple(t.model.preprocess_mean), tuple(t.model.preprocess_std))
  current_clip = lambda state: clip_of(nnx.merge(t.graphdef, state.trainable, t.frozen))
  encoder = None

  def evaluate_at(step: int, state) -> None:
    nonlocal encoder
    clip = current_clip(state)
    if encoder is None:
      encoder = Encoder(clip, t.model.tokenizer, pre, c.evals.batch_size, t.mesh, progress=False)
    encoder.set_params(clip)
    results = run_benchmarks(encoder, list(c.evals.benchmarks), data_dir, image_dir, c.evals.tie)
    flat = {f"eval/{b}/{k}": v for b, r in results.items() for k, v in r["metrics"].items()
            if isinstance(v, (int, float))}
    writer.write(step, flat, console=False, rate=False)
    if jax.process_index() == 0:
      summary = [f"{b} {k} {100 * r['metrics'][k]:.1f}" for b, r in results.items() for k in EVAL_SUMMARY
                 if k in r["metrics"]]
      print(f"eval step {step} | " + " | ".join(summary), flush=True)
  return evaluate_at


def _log_dict(recent: dict, kind: str, pipes: dict) -> dict:
  """The latest metrics of every step kind (CLIC and its CLIP steps both show), `loss` being this step's.

  The unprefixed step metrics (lr, grad_norm, param_norm) are this step's too: `kind` is merged last, whatever order
  the kinds were first seen in (after a resume that order flips, and an older step's lr would show).
  """
  out = {"loss": recent[kind]["loss"]}
  for k, m in sorted(recent.items(), key=lambda km: km[0] == kind):
    out.update({(f"loss/{k}" if name == "loss" else name): v for name, v in m.items()})
  for k, p in pipes.items():
    out.update({f"data/{k}/{name}": v for name, v in p.stats().items()})
  return out


def export(c, workdir: str, model: Model, trainable) -> None:
  flat = dict(model.flat)
  flat.update({".".join(map(str, p)): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(trainable)})
  if c.method == "read":
    if c.export.t5_decoder:
      out = os.path.join(workdir, "export", "t5")
      hf.save_t5_decoder_dir(model.t5_cfg, {k[len("decoder."):]: v for k, v in flat.items()
                                            if k.startswith("decoder.")}, out)
      shutil.copyfile(model.t5_tokenizer.path, os.path.join(out, "spiece.model"))
      logging.info("exported the T5 decoder: %s", out)
    flat = {k[len("clip."):]: v for k, v in flat.items() if k.startswith("clip.")}
  clip = params.fill(params.abstract(lambda: CLIP(model.clip_cfg, rngs=nnx.Rngs(0))), flat)
  from compclip_jax.data.images import Preprocess  # pylint: disable=import-outside-toplevel
  pre = Preprocess(model.clip_cfg.vision.image_size, tuple(model.preprocess_mean), tuple(model.preprocess_std))
  if c.export.hf:
    written = loading.save_clip(clip, os.path.join(workdir, "export", "hf"), "hf", tokenizer=model.tokenizer,
                                preprocess=pre)
    logging.info("exported HF CLIPModel: %s", os.path.dirname(written[0]))
  if c.export.open_clip:
    loading.save_clip(clip, os.path.join(workdir, "export", "open_clip", "model.safetensors"), "open_clip",
                      preprocess=pre)
