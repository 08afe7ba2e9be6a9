"""Train steps: one pure, jittable function per step kind (CLIC, CLIC's CLIP step, CLIP, NegCLIP, READ).

A step takes (TrainState, frozen parameters, global batch) and returns (new TrainState, metrics). The model is
`nnx.merge(graphdef, trainable, frozen)` inside the step; gradients are taken w.r.t. the trainable partition only,
so frozen towers cost a forward pass and no optimiser state. Images arrive as uint8 and are normalised here.
"""
from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from compclip_jax import losses
from compclip_jax.models.read import clip_of

STEP_KINDS = ("clic", "clic_clip", "clip", "negclip", "read")


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # int32 [], optimiser steps taken (CLIC and CLIP steps share it, METHODS §1.4)
  trainable: Any  # nnx.State of the trainable parameters
  opt_state: Any
  rng: jax.Array  # base key; step k uses fold_in(rng, k) (T5 dropout)


def normalize_images(images_u8: jax.Array, mean, std) -> jax.Array:
  """uint8 [B, H, W, 3] → float32 (x/255 − mean)/std."""
  x = images_u8.astype(jnp.float32) / 255.0
  return (x - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)


def _unit(x):
  x = x.astype(jnp.float32)
  return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def _texts(ids: jax.Array) -> jax.Array:
  """[B, K, L] per-sample caption sets → [K·B, L] stacked set by set ([p1 (B); p2 (B); …])."""
  return jnp.swapaxes(ids, 0, 1).reshape(-1, ids.shape[-1])


def loss_fn(kind: str, model, batch: dict, rng: jax.Array, norms: dict, loss_cfg) -> tuple[jax.Array, dict]:
  """The loss of one step kind on a merged model (METHODS §1.3, §1.4, §1.5, §2.3)."""
  clip = clip_of(model)
  img = _unit(clip.encode_image(normalize_images(batch["image"], *norms[kind])))
  scale = jnp.exp(clip.logit_scale[...].astype(jnp.float32))
  if kind in ("clic_clip", "clip"):
    return losses.clip_loss(img, _unit(clip.encode_text(batch["ids"][:, 0])), scale)
  if kind == "clic":
    txt = _unit(clip.encode_text(_texts(batch["ids"])))
    return losses.clic_loss(img, txt, batch["neg_valid"], scale, loss_cfg.w_cont, loss_cfg.w_sneg, loss_cfg.w_uni)
  if kind == "negclip":
    return losses.negclip_loss(img, _unit(clip.encode_text(_texts(batch["ids"]))), batch["neg_valid"], scale)
  # READ: the positives' pooled output (before text_projection) feeds the frozen decoder through W.
  ids = _texts(batch["ids"])
  _, pooled = clip.text_model(ids)
  txt = _unit(clip.text_projection(pooled))
  b = img.shape[0]
  dropout_rng = rng if loss_cfg.t5_dropout else None  # the reference leaves the frozen decoder in train mode
  dec_logits = model.reconstruct(pooled[:b], batch["t5_input"], dropout_rng)
  para = _unit(clip.encode_text(batch["para_ids"]))
  return losses.read_loss(img, txt, batch["neg_valid"], para, dec_logits, batch["t5_target"], scale,
                          loss_cfg.w_rec, loss_cfg.w_align, loss_cfg.align_direction, w_con=loss_cfg.w_con)


def make_step(kind: str, graphdef, tx: optax.GradientTransformation, schedule: optax.Schedule, norms: dict,
              loss_cfg) -> Callable:
  """The (unjitted) step function of `kind`; `train.py` jits it with shardings and donation."""
  if kind not in STEP_KINDS:
    raise ValueError(f"step kind {kind!r}: use one of {STEP_KINDS}")

  def step(state: TrainState, frozen, batch: dict) -> tuple[TrainState, dict]:
    rng = jax.random.fold_in(state.rng, state.step)

    def objective(trainable):
      return loss_fn(kind, nnx.merge(graphdef, trainable, frozen), batch, rng, norms, loss_cfg)

    (_, metrics), grads = jax.value_and_grad(objective, has_aux=True)(state.trainable)
    updates, opt_state = tx.update(grads, state.opt_state, state.trainable)
    trainable = optax.apply_updates(state.trainable, updates)
    metrics = {**metrics, "lr": schedule(state.step), "grad_norm": optax.global_norm(grads),
               "param_norm": optax.global_norm(trainable)}
    return TrainState(state.step + 1, trainable, opt_state, state.rng), metrics

  return step


def clic_schedule_kind(step: int, clip_every: int) -> str:
  """METHODS §1.4 alternation: with clip_every = 1 the steps go CLIC, CLIP, CLIC, CLIP…; with n, n CLIC steps then
  one CLIP step; 0 disables CLIP steps."""
  if clip_every <= 0:
    return "clic"
  return "clic_clip" if step % (clip_every + 1) == clip_every else "clic"
