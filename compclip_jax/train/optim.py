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


def warmup_steps_cosine(total_steps: int, peak: float = 1e-5, warmup_steps: int = 50) -> optax.Schedule:
  """Linear warm-up 0 → peak over `warmup_steps`, then cosine to 0 (transformers' cosine-with-warmup,
  METHODS §2.4)."""
  return optax.warmup_cosine_decay_schedule(0.0, peak, min(warmup_steps, total_steps - 1),
                                            max(total_steps, warmup_steps + 1), end_value=0.0)


def make_schedule(kind: str, total_steps: int, cfg) -> optax.Schedule:
  if kind == "warmup_frac_cosine":
    return warmup_frac_cosine(total_steps, cfg.lr, cfg.start_lr, cfg.end_lr, cfg.warmup_frac)
  if kind == "warmup_steps_cosine":
    return warmup_steps_cosine(total_steps, cfg.lr, cfg.warmup_steps)
  if kind == "constant":
    return optax.constant_schedule(cfg.lr)
  raise ValueError(f"optim.schedule {kind!r}: use one of {SCHEDULES}")


def make_optimizer(schedule: optax.Schedule, decay_mask, cfg) -> optax.GradientTransformation:
  """AdamW (decoupled decay, PyTorch's convention) on the trainable partition, optional global-norm clipping.

  `decay_mask`: a pytree of bools over the trainable parameters (True → weight decay).
  """
  chain = [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip else []
  chain.append(optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask))
  return optax.chain(*chain)


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
