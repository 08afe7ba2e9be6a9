"""Optimiser: per-parameter rules from config regex lists, AdamW, and both reference LR schedules.

Rules (big_vision's habit: every parameter must be covered, so nothing is frozen or decayed by accident):
- `trainable` / `frozen`: each parameter path matches exactly one regex of the two lists together;
- `decay` / `no_decay`: each trainable parameter matches exactly one regex of these two lists.
Frozen parameters get no optimiser state at all (the optimiser only ever sees the trainable partition).
"""
from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from compclip_jax.errors import UserError
from compclip_jax.weights.params import tree_path_str

SCHEDULES = ("warmup_frac_cosine", "warmup_steps_cosine", "constant")


class RuleError(UserError, ValueError):
  pass


def assign(paths: Iterable[str], groups: dict[str, Sequence[str]]) -> dict[str, str]:
  """{path: group} where each path fully matches exactly one regex across all groups; raises RuleError otherwise,
  listing every uncovered and every doubly covered path."""
  compiled = {g: [re.compile(p) for p in pats] for g, pats in groups.items()}
  out, none, many = {}, [], []
  for path in paths:
    hits = [(g, p.pattern) for g, ps in compiled.items() for p in ps if p.fullmatch(path)]
    if not hits:
      none.append(path)
    elif len(hits) > 1:
      many.append(f"{path} ← {hits}")
    else:
      out[path] = hits[0][0]
  if none or many:
    msg = [f"parameter rules {list(groups)} must cover every parameter exactly once:"]
    if none:
      msg += [f"  matched by no rule ({len(none)}): {none[:10]}"]
    if many:
      msg += [f"  matched by several rules ({len(many)}): {many[:10]}"]
    raise RuleError("\n".join(msg))
  return out


def warmup_frac_cosine(total_steps: int, peak: float = 1e-6, start: float = 1e-7, end: float = 1e-8,
                       warmup_frac: float = 0.2) -> optax.Schedule:
  """Linear warm-up start → peak over the first `warmup_frac` of the optimiser steps, then cosine to `end` (METHODS
  §1.4)."""
  warmup = max(1, int(round(warmup_frac * total_steps)))
  return optax.join_schedules([
      optax.linear_schedule(start, peak, warmup),
      optax.cosine_decay_schedule(peak, max(1, total_steps - warmup), alpha=end / peak)
  ], [warmup])


def reference_warmup_cosine(total_steps: int, peak: float = 1e-6, start: float = 1e-7, end: float = 1e-8,
                            warmup_frac: float = 0.2, epochs: int = 1) -> optax.Schedule:
  """`warmup_frac_cosine` as the reference that uses it computes it (`optim.reference_warmup_cosine`; the recipes:
  docs/methods.md): its train.py reads step t of `cosine_scheduler(peak, end, epochs, loader_len + 1,
  warmup_epochs=warmup_frac × epochs, start)` (utils/train_utils.py) while each epoch runs loader_len steps. So the
  schedule is one step per epoch longer than the run, and the cosine stops one step per epoch short of `end`; the
  warm-up is np.linspace(start, peak, W) over W = int(warmup_frac × epochs × (loader_len + 1)) steps: `peak` at step
  W − 1 and again at W. (`warmup_frac_cosine`: W = round(warmup_frac × total_steps), `peak` first at W, `end` at the
  last step.) `epochs` passes of total_steps / epochs steps each; the reference's float64 values, read as float32."""
  per_epoch = total_steps // max(1, epochs) + 1  # their loader_len + 1
  length = max(1, epochs) * per_epoch
  warmup = int(warmup_frac * max(1, epochs) * per_epoch)  # int(args.warmup_epochs * niter_per_ep)
  decay = np.arange(length - warmup)
  table = np.concatenate(
      [np.linspace(start, peak, warmup),
       end + 0.5 * (peak - end) * (1 + np.cos(np.pi * decay / max(1, len(decay))))]).astype(np.float32)

  def schedule(step):
    return jnp.asarray(table)[jnp.clip(step, 0, length - 1)]

  return schedule


def warmup_steps_cosine(total_steps: int, peak: float = 1e-5, warmup_steps: int = 50) -> optax.Schedule:
  """Linear warm-up 0 → peak over `warmup_steps`, then cosine to 0 (transformers' cosine-with-warmup,
  METHODS §2.4): optax.warmup_cosine_decay_schedule's values, its cosine peak·½(1 + cos πp) written
  peak·sin²(πr/2) of the fraction left, r = 1 − p = (end − step) / decay steps. In float32 1 + cos πp cancels near
  the end (p → 1): at the last of 50 steps optax's rate was 1.1e-5 off transformers' float64 one
  (tests/train/test_trajectory_read.py), at the last of 1,617 2e-4; r is one rounding from exact integers."""
  warmup = min(warmup_steps, total_steps - 1)
  end = max(total_steps, warmup_steps + 1)

  def schedule(count):
    count = jnp.asarray(count, jnp.float32)
    left = jnp.clip((end - count) / (end - warmup), 0.0, 1.0)
    return jnp.where(count < warmup, peak * count / max(warmup, 1), peak * jnp.sin(0.5 * jnp.pi * left) ** 2)

  return schedule


def make_schedule(kind: str, total_steps: int, cfg, epochs: int = 1) -> optax.Schedule:
  """`cfg` the config's optim section; `epochs` the passes over the data the run's steps make (1 for a given
  total_steps), which `reference_warmup_cosine` needs."""
  if kind == "warmup_frac_cosine" and cfg.reference_warmup_cosine:
    return reference_warmup_cosine(total_steps, cfg.lr, cfg.start_lr, cfg.end_lr, cfg.warmup_frac, epochs)
  if kind == "warmup_frac_cosine":
    return warmup_frac_cosine(total_steps, cfg.lr, cfg.start_lr, cfg.end_lr, cfg.warmup_frac)
  if kind == "warmup_steps_cosine":
    return warmup_steps_cosine(total_steps, cfg.lr, cfg.warmup_steps)
  if kind == "constant":
    return optax.constant_schedule(cfg.lr)
  raise ValueError(f"optim.schedule {kind!r}: use one of {SCHEDULES}")


def make_optimizer(schedule: optax.Schedule, decay_mask, cfg) -> optax.GradientTransformation:
  """AdamW (decoupled decay, PyTorch's convention) on the trainable partition, optional global-norm clipping.

  `decay_mask`: a pytree of bools over the trainable parameters (True → weight decay). `cfg.fp32_decay_factor`:
  the decay as torch.optim.AdamW applies it (`torch_decay_and_rate`) instead of optax.adamw's lr·wd·θ.
  """
  chain = [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip else []
  if cfg.fp32_decay_factor:
    chain += [
        optax.scale_by_adam(b1=cfg.b1, b2=cfg.b2, eps=cfg.eps),
        torch_decay_and_rate(schedule, cfg.weight_decay, decay_mask)
    ]
  else:
    chain.append(
        optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask))
  return optax.chain(*chain)


def torch_decay_and_rate(schedule: optax.Schedule, weight_decay: float, decay_mask) -> optax.GradientTransformation:
  """After optax.scale_by_adam: the update −lr·u, and on the decayed parameters θ·f − θ with f = 1 − lr·wd rounded to
  float32 — torch.optim.AdamW's `param.mul_(1 - lr * weight_decay)` on fp32 parameters, which both references train
  with (`optim.fp32_decay_factor`). Below 1, float32 has steps of 2⁻²⁴ ≈ 5.96e-8, so the decay a
  step applies is a multiple of that: at lr 1e-6 and wd 0.1 it is 1.19e-7 instead of 1e-7, and below lr·wd ≈ 2.98e-8
  (lr 3e-7 at wd 0.1) it is none; and θ·f is rounded to a float32 before the Adam step is added, as torch stores it.

  Written as θ·f = θ − θ·δ, δ = 1 − f = 2⁻²⁴·rint(lr·wd·2²⁴) (round half to even, as the float32 rounding of 1 − lr·wd
  is): one rounding of the exact value whether or not XLA fuses the multiply and the subtraction (it fuses θ·f − θ
  into one multiply-add, which skips the rounding of θ·f that torch's mul_ makes)."""
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    lr = jnp.asarray(schedule(state.count), jnp.float32)
    delta = jnp.round(lr * jnp.float32(weight_decay) * 2.0 ** 24) * 2.0 ** -24  # 1 − fp32(1 − lr·wd), exactly
    decayed = lambda p: (p - p * delta) - p  # fp32(θ·f) − θ: exact (Sterbenz), so θ + it is torch's θ·f
    out = jax.tree.map(lambda u, p, decay: -lr * u + (decayed(p) if decay else 0.0), updates, params, decay_mask)
    return out, optax.ScaleByScheduleState(count=optax.safe_int32_increment(state.count))

  return optax.GradientTransformation(init, update)


# open_clip's training clamp of the logit scale (log of the softmax temperature's inverse): [0, ln 100]
LOGIT_SCALE_RANGE = (0.0, math.log(100))


def clamp_logit_scale(trainable, low: float = LOGIT_SCALE_RANGE[0], high: float = LOGIT_SCALE_RANGE[1]):
  """The trainable nnx.State with every `logit_scale` parameter clipped to [low, high] after an update
  (`optim.clamp_logit_scale`): what one reference's `logit_scale.data.clamp_(0, 4.6052)` intends. That line acts on
  a copy, so the references train unclamped: the default here too (docs/fidelity.md, row 13)."""
  def clamp(path, x):
    return jax.numpy.clip(x, low, high).astype(x.dtype) if tree_path_str(path).endswith("logit_scale") else x

  return jax.tree_util.tree_map_with_path(clamp, trainable)


def decay_mask_tree(trainable_state, groups: dict[str, str]):
  """Bool pytree over the trainable nnx.State: True where the parameter's rule group is 'decay'."""
  return jax.tree_util.tree_map_with_path(lambda path, _: groups[tree_path_str(path)] == "decay", trainable_state)
