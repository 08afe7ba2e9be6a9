"""Train steps: one pure, jittable function per step kind, built from the kind's loss (compclip_jax/methods/).

A step takes (TrainState, frozen parameters, global batch) and returns (new TrainState, metrics). The model is
`nnx.merge(graphdef, trainable, frozen)` inside the step; gradients are taken w.r.t. the trainable partition only,
so frozen towers cost a forward pass and no optimiser state. Images arrive as uint8 and are normalised by the loss
with the kind's (mean, std) (methods/base.normalize_images).
"""
from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import optax
from flax import nnx

from compclip_jax.methods.base import StepKind
from compclip_jax.train import optim


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # int32 [], optimiser steps taken (every kind of a method shares it, METHODS §1.4)
  trainable: Any  # nnx.State of the trainable parameters
  opt_state: Any
  rng: jax.Array  # base key; step k uses fold_in(rng, k) (T5 dropout)


def make_step(kind: StepKind, graphdef: nnx.GraphDef, tx: optax.GradientTransformation, schedule: optax.Schedule,
              norm: tuple, loss_options, clamp_logit_scale: bool = False, grad_sharding=None) -> Callable:
  """The (unjitted) step function of `kind`, its images normalised with `norm` = (mean, std), its loss given
  `loss_options` (`kind.loss_options(config)`, built once); `clamp_logit_scale` clips logit_scale to [0, ln 100]
  after every update (optim.clamp_logit_scale). `grad_sharding` (the parameters' shardings), when the optimiser
  state is sharded otherwise: the gradients are reduced to it before the update, so the moments' sharding does not
  reach back into the backward pass. train/state.py jits it with shardings and donation."""
  def step(state: TrainState, frozen, batch: dict) -> tuple[TrainState, dict]:
    rng = jax.random.fold_in(state.rng, state.step)

    def objective(trainable):
      return kind.loss(nnx.merge(graphdef, trainable, frozen), batch, rng, norm, loss_options)

    (_, metrics), grads = jax.value_and_grad(objective, has_aux=True)(state.trainable)
    if grad_sharding is not None:
      # without it XLA computes each weight's gradient in slices as the moments hold them, in loops of
      # collective-permutes, more traffic than the sharded update saves (docs/tpu.md)
      grads = jax.lax.with_sharding_constraint(grads, grad_sharding)
    updates, opt_state = tx.update(grads, state.opt_state, state.trainable)
    trainable = optax.apply_updates(state.trainable, updates)
    if clamp_logit_scale:
      trainable = optim.clamp_logit_scale(trainable)
    metrics = {
        **metrics, "lr": schedule(state.step), "grad_norm": optax.global_norm(grads),
        "param_norm": optax.global_norm(trainable)
    }
    return TrainState(state.step + 1, trainable, opt_state, state.rng), metrics

  return step


def under_mesh(step: Callable, mesh) -> Callable:
  """`step` traced with `mesh` as the abstract mesh, so the model can place per-device work (the Pallas attention's
  `jax.shard_map` over the batch, models/layers.py) without being handed the mesh."""
  def traced(*args):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return step(*args)

  return traced


def compiled_flops(compiled) -> float | None:
  """XLA's FLOPs of one call of a compiled step (per device under SPMD), or None where XLA gives none."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return (cost or {}).get("flops")


def compiled_peak_bytes(compiled) -> int | None:
  """Compiled peak bytes per device: the larger of XLA's `peak_memory_in_bytes` and arguments + outputs + temporaries
  − donated aliases. (XLA:CPU's `peak_memory_in_bytes` counts the arguments only — 0.12 GB where the temporaries of
  the same ViT-B/32 step are 2.4 GB — so it alone under-reports by an order of magnitude.)"""
  mem = compiled.memory_analysis()
  if mem is None:
    return None
  total = mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
  return max(total, getattr(mem, "peak_memory_in_bytes", 0) or 0)
