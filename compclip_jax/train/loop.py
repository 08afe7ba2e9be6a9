"""Training: `run(config, workdir)` — setup (train/trainer.py), then the loop's phases in order: open the run
(this run, or another one?), restore, then per step read → step → log / evaluate / save, then export.

Every step kind is one `jax.jit` (state donated) with its own pipeline over one shared shuffled order (step g gets
global batch g, from the pipeline of the kind the method runs at g, METHODS §1.4). Checkpoints hold the trainable
state, the optimiser state and every pipeline's iterator state, so a rerun with the same workdir continues exactly
where the last checkpoint left off. Nothing here names a method.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import signal
import sys
from typing import Mapping, Sequence

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils

from compclip_jax import compat, methods
from compclip_jax.evaluators import run as evaluation
from compclip_jax.evaluators.encoding import Encoder
from compclip_jax.models.clip import CLIP, clip_of
from compclip_jax.train import checkpointing, runinfo
from compclip_jax.train.metrics import MetricWriter
from compclip_jax.train.state import Model, initial_flat
from compclip_jax.train.trainer import ConfigError, Trainer, barrier, compile_step, setup, validate
from compclip_jax.weights import loading, params

__all__ = ["ConfigError", "Interrupted", "export", "run", "setup", "validate"]


class Interrupted(Exception):
  """SIGTERM / SIGINT stopped training after a checkpoint; `exit_code` 143 / 130 (128 + the signal's number), so a
  scheduler does not mistake the stop for a finished run."""
  def __init__(self, signum: int, step: int, workdir: str):
    name = signal.Signals(signum).name
    super().__init__(f"{name}: checkpoint written at step {step} in {workdir}; rerun the same command to resume")
    self.signum, self.step, self.exit_code = signum, step, 128 + signum


def run(c: ml_collections.ConfigDict, workdir: str, allow_config_change: tuple[str, ...] = (),
        batches: Mapping[str, Sequence[dict]] | None = None) -> dict:
  """Trains `c` in `workdir` (resuming if it holds checkpoints of the same run); returns the last logged metrics.
  `batches` (tests): each kind's global batches, fed instead of its pipeline's (`trainer.setup`).

  The workdir is one run (train/runinfo.py): a rerun whose config or inputs differ from the recorded ones raises
  runinfo.RunMismatch unless every difference is named in `allow_config_change` (keys or dotted prefixes, e.g.
  ("total_steps",)); checkpoints that exist but do not restore raise checkpointing.Unrestorable; a workdir held by
  another live process raises runinfo.WorkdirBusy. SIGTERM / SIGINT write a checkpoint, then raise Interrupted.
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
    return _run(c, workdir, tuple(allow_config_change), lock, batches)
  finally:
    lock.release()


def run_identity(c: ml_collections.ConfigDict, t: Trainer) -> dict:
  """What makes this run (runinfo.describe): config, parameter shapes, trainable set, data size, schedule length."""
  return runinfo.describe(c.to_dict(), param_shapes=initial_flat(t.model), trainable=t.trainable_paths,
                          data_records=t.n_records, total_steps=t.total,
                          neutral=tuple(k for s in t.method.sections for k in s.neutral))


def _run(c: ml_collections.ConfigDict, workdir: str, allow: tuple[str, ...], lock: runinfo.Lock,
         batches: Mapping[str, Sequence[dict]] | None = None) -> dict:
  t = setup(c, workdir, batches)
  identity, previous, changes = _open_run(c, t, workdir, allow)
  ckpt = checkpointing.Checkpointer(workdir, c.checkpoint.keep, c.checkpoint.asynchronous)
  try:
    start, state = _restore(t, workdir, ckpt)
  except checkpointing.Unrestorable:
    ckpt.close()
    raise
  for k, a, b in changes:
    logging.warning("continuing with a changed %s: was %s, now %s (--allow_config_change)", k, a, b)
  if jax.process_index() == 0:
    runinfo.record(workdir, identity, c.to_json_best_effort(indent=2), previous, changes, start)
  t.skips.resumed(start)  # skipped.jsonl keeps the load-time skips up to this checkpoint; later ones recur
  last, state = _loop(c, t, workdir, state, start, ckpt, lock)
  _export_final(c, t, workdir, state)
  return last


# ------------------------------------------------------------------------------------------------- open the run
def _previous_identity(workdir: str, identity: dict) -> dict | None:
  """The recorded run of `workdir`, its older config keys read as today's (one warning line)."""
  previous = runinfo.load(workdir)
  if previous is None:
    return None
  previous["identity"] = compat.read_recorded_identity(previous["identity"], identity,
                                                       os.path.join(workdir, runinfo.RUN_FILE))
  return previous


def _open_run(c, t: Trainer, workdir: str, allow: tuple[str, ...]) -> tuple[dict, dict | None, list]:
  """This run, or another one? (before anything in the workdir is read or written) → (identity, the recorded run or
  None, the allowed changes). Refuses a workdir whose results no recorded run wrote."""
  identity = run_identity(c, t)
  previous = _previous_identity(workdir, identity)
  fixed = tuple(k for s in t.method.sections for k in s.fixed)
  changes = runinfo.check(runinfo.differences(previous["identity"], identity), allow, workdir, fixed) \
      if previous else []
  ckpt_dir = os.path.join(workdir, "checkpoints")
  has_steps = os.path.isdir(ckpt_dir) and any(d.isdigit() for d in os.listdir(ckpt_dir))
  if previous is None and not has_steps and os.path.isdir(os.path.join(workdir, "export")):
    raise runinfo.WorkdirError(f"{workdir} holds an export but no record of the run that wrote it ({runinfo.RUN_FILE})"
                               ": use a new --workdir, or move export/ away if it is not wanted")
  if previous is None and has_steps:  # run.json is written before the first step: these are older than it
    raise runinfo.RunMismatch(compat.checkpoints_without_run_file(ckpt_dir, workdir, runinfo.RUN_FILE))
  if previous is not None and runinfo.unmatched(previous["identity"], identity):
    logging.warning("%s: not recorded on both sides (another version of compclip_jax), not compared: %s", workdir,
                    ", ".join(runinfo.unmatched(previous["identity"], identity)))
  return identity, previous, changes


def _restore(t: Trainer, workdir: str, ckpt: checkpointing.Checkpointer) -> tuple[int, object]:
  """(first step, state): the latest checkpoint's, every pipeline put back where it was; (0, initial) without one."""
  abstract_state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), t.state, t.state_sh)
  restored = ckpt.restore_latest(abstract_state)
  if not restored:
    return 0, t.state
  start, state, data_states = restored
  for k, p in t.pipes.items():
    p.restore(data_states[k])
  logging.info("resumed from step %d in %s", start, workdir)
  return start, state


# -------------------------------------------------------------------------------------------------------- loop
@dataclasses.dataclass
class _Loop:
  """What the loop carries from step to step."""
  state: object
  compiled: dict = dataclasses.field(default_factory=dict)  # (kind, batch shapes) → executable
  flops: dict = dataclasses.field(default_factory=dict)  # kind → XLA FLOPs per step
  recent: dict = dataclasses.field(default_factory=dict)  # kind → its latest metrics
  last: dict = dataclasses.field(default_factory=dict)  # the last logged line
  ahead: object = None  # the next step's (kind, batch), read while this step runs (`_ReadAhead`)
  stop: int = 0  # the signal that asked to stop


def _loop(c, t: Trainer, workdir: str, state, start: int, ckpt, lock) -> tuple[dict, object]:
  """Steps `start` … total: read → step → log / evaluate / save; a signal stops after a checkpoint (Interrupted)."""
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
  lp = _Loop(state)
  handlers = _catch_signals(lp)
  try:
    for step in range(start, t.total):
      kind, metrics, stats, save_now = _step(c, t, lp, step, writer)
      _after_step(c, t, lp, step + 1, kind, metrics, stats, save_now, writer, evaluate_at, ckpt, lock)
      if lp.stop:
        raise Interrupted(lp.stop, step + 1, workdir)
  finally:
    for s, h in handlers.items():
      signal.signal(s, h)
    writer.close()
    ckpt.close()  # waits for an asynchronous save in flight: a checkpoint written on a signal is committed here
    t.skips.finish()
  return lp.last, lp.state


def _catch_signals(lp: _Loop) -> dict:
  """SIGTERM / SIGINT set `lp.stop` (a checkpoint follows this step); a second Ctrl-C stops at once."""
  def on_signal(signum, _):
    if lp.stop and signum == signal.SIGINT:  # a second Ctrl-C: out now, without a checkpoint
      raise KeyboardInterrupt
    lp.stop = signum
    print(
        f"{signal.Signals(signum).name}: writing a checkpoint after this step, then stopping" +
        (" (Ctrl-C again stops at once, without one)" if signum == signal.SIGINT else ""), file=sys.stderr, flush=True)

  return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}


def _step(c, t: Trainer, lp: _Loop, step: int, writer: MetricWriter) -> tuple[str, dict, dict, bool]:
  """Read (or take the read-ahead batch), compile on a new (kind, width), dispatch the step; read the next batch while
  it runs. → (kind, metrics, data counters, whether this step saves)."""
  kind, batch = lp.ahead.take() if lp.ahead is not None else _read(c, t, step)
  lp.ahead = None
  key = (kind, tuple(x.shape for x in jax.tree.leaves(batch)))  # one executable per kind and token-width bucket
  compiling = key not in lp.compiled
  if compiling:
    lp.compiled[key], lp.flops[kind], _ = compile_step(t, kind, lp.state, batch)
    writer.set_flops((sum(lp.flops.values()) / len(lp.flops)) if all(lp.flops.values()) else None)
  done = step + 1
  save_now = done % c.checkpoint.every_steps == 0 or done == t.total
  # between the log, eval and checkpoint points nothing is fetched from the devices: the step is dispatched
  # (asynchronously) and the next batch is read and put on the devices while it runs. `loop.forbid_host_sync`
  # makes any fetch there an error (the tests run with it).
  with _no_fetch(c.loop.forbid_host_sync and not compiling):
    lp.state, metrics = lp.compiled[key](lp.state, t.frozen, batch)
    lp.recent[kind] = metrics
    stats = {k: p.stats() for k, p in t.pipes.items()}  # this step's data counters, before any read-ahead
    if c.loop.read_ahead and not save_now and not lp.stop:
      lp.ahead = _ReadAhead(c, t, done)
  return kind, metrics, stats, save_now


def _after_step(c, t: Trainer, lp: _Loop, done: int, kind: str, metrics: dict, stats: dict, save_now: bool,
                writer: MetricWriter, evaluate_at, ckpt, lock) -> None:
  """Log, evaluate and save at their points (a checkpoint also when a signal asked to stop)."""
  if done % c.log_every == 0 or done == t.total:
    lp.last = writer.write(done, _log_dict(lp.recent, kind, stats))
    lock.heartbeat()
  if done == t.total or (c.evals.every_steps and done % c.evals.every_steps == 0):
    evaluate_at(done, lp.state)
  if save_now or lp.stop:
    if lp.ahead is not None:  # a signal came after the next batch was read: the checkpoint is of this step's end
      lp.ahead.rewind()
      lp.ahead = None
    writer.check_finite(done, metrics)  # never checkpoint a diverged state: loss, grad and parameter norms
    ckpt.save(done, lp.state, {k: p.state() for k, p in t.pipes.items()})
    t.skips.checkpoint(done)  # skips since the last checkpoint → skipped.jsonl; counts by reason printed


def _export_final(c, t: Trainer, workdir: str, state) -> None:
  """Exports on process 0 (frozen parameters from the initial checkpoint, trained ones from the state)."""
  if jax.process_count() > 1:  # FSDP shards may live on other hosts: every process joins the gather
    trainable = multihost_utils.process_allgather(state.trainable, tiled=True)
  else:
    trainable = jax.device_get(state.trainable)
  if jax.process_index() == 0:
    export(c, workdir, t.model, trainable)


# ------------------------------------------------------------------------------------------- evaluate, read, log
EVAL_SUMMARY = ("mean", "add", "replace", "swap", "mean/itt", "swap/itt", "mean/tot", "image_retrieval_recall@1",
                "text_retrieval_recall@1", "acc1", "accuracy", "group", "macro_accuracy", "precision@1")


def make_evaluator(c, t: Trainer, workdir: str, writer: MetricWriter):
  """evaluate_at(step, state): the configured benchmarks on the current weights, logged as eval/<bench>/<metric>."""
  if not c.evals.benchmarks:
    return lambda step, state: None
  # the benchmark folders (a synthetic world's are written once, by process 0; evaluators/run.py)
  data_dir, image_dir = evaluation.benchmark_dirs(c.evals, workdir, c.seed, jax.process_index(), barrier)
  pre = t.model.preprocess
  current_clip = lambda state: clip_of(nnx.merge(t.graphdef, state.trainable, t.frozen))
  encoder = None

  def evaluate_at(step: int, state) -> None:
    nonlocal encoder
    clip = current_clip(state)
    if encoder is None:
      encoder = Encoder(clip, t.model.tokenizer, pre, c.evals.batch_size, t.mesh, progress=False)
    encoder.set_params(clip)
    results = evaluation.run_benchmarks(encoder, list(c.evals.benchmarks), data_dir, image_dir, c.evals.tie,
                                        tfds=evaluation.tfds_benchmarks(c.evals))
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
  no-op when off. On a CPU backend jax lets every fetch through (device memory is host memory):
  tests/train/test_train.py instruments this context for its CPU runs."""
  return jax.transfer_guard_device_to_host("disallow_explicit") if on else contextlib.nullcontext()


def _log_dict(recent: dict, kind: str, stats: dict) -> dict:
  """The latest metrics of every step kind (alternating kinds all show), `loss` being this step's.

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
  """HF (and open_clip) exports of the trained CLIP: frozen parameters from the initial ones, trained ones from the
  state; the method's own parts (`export_parts`) first."""
  flat = dict(model.flat)
  flat.update({".".join(map(str, p)): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(trainable)})
  method = methods.get(c.method)
  if method.export_parts is not None:  # the method's own parts; CLIP's parameters for the rest
    flat = method.export_parts(c, workdir, model.export_info, model.target_tokenizer, flat)
  clip = params.fill(params.abstract(lambda rngs: loading.model_class(model.clip_cfg)(model.clip_cfg, rngs=rngs)), flat)
  pre = model.preprocess
  if c.export.hf:
    written = loading.save_clip(clip, os.path.join(workdir, "export", "hf"), "hf", tokenizer=model.tokenizer,
                                preprocess=pre, source_config=model.source_config)
    kind = "CLIPModel" if isinstance(clip, CLIP) else "SiglipModel"
    logging.info("exported HF %s: %s", kind, os.path.dirname(written[0]))
  if c.export.open_clip:
    loading.save_clip(clip, os.path.join(workdir, "export", "open_clip", "model.safetensors"), "open_clip",
                      preprocess=pre, tokenizer=None if isinstance(clip, CLIP) else model.tokenizer)
