"""Model FLOPs counted from the architecture (compclip_jax/train/flops.py) against XLA's own count of the same
programs (cost analysis of the compiled forward and gradient, on this host's CPU): each tower's forward, the gradient
of a tower that trains (3×), of a frozen decoder the gradient flows through (~2×), and a whole training step."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP
from compclip_jax.models.t5 import T5Config, T5Decoder
from compclip_jax.train import flops

# wide enough that the matmuls are nearly all of XLA's count (its elementwise work is < 2 % here)
CFG = clip_config.CLIPConfig(
    text=clip_config.TextConfig(width=256, layers=2, heads=4, mlp_dim=1024, context_length=64, vocab_size=1000),
    vision=clip_config.VisionConfig(image_size=64, patch_size=8, width=256, layers=2, heads=4, mlp_dim=1024),
    embed_dim=128)


def _xla_flops(fn, *args) -> float:
  cost = jax.jit(fn).lower(*args).compile().cost_analysis()
  return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


def _model():
  return nnx.eval_shape(lambda: CLIP(CFG, rngs=nnx.Rngs(0)))


def test_text_tower_forward_and_gradient():
  gd, p = nnx.split(_model(), nnx.Param)
  ids = jax.ShapeDtypeStruct((8, 64), jnp.int32)
  fwd = lambda p, x: jnp.sum(nnx.merge(gd, p).encode_text(x))
  want = 8 * flops.text_forward(CFG.text, CFG.embed_dim, 64)
  assert _xla_flops(fwd, p, ids) == pytest.approx(want, rel=0.03)
  text_only = nnx.All(nnx.Param, nnx.Not(nnx.PathContains("vision_model")))
  gd2, trained, rest = nnx.split(_model(), text_only, ...)
  grad = jax.grad(lambda t, r, x: jnp.sum(nnx.merge(gd2, t, r).encode_text(x)))
  assert _xla_flops(grad, trained, rest, ids) == pytest.approx(3 * want, rel=0.05)


def test_vision_tower_forward_and_gradient():
  gd, p = nnx.split(_model(), nnx.Param)
  pixels = jax.ShapeDtypeStruct((8, 64, 64, 3), jnp.float32)
  want = 8 * flops.vision_forward(CFG.vision, CFG.embed_dim)
  assert _xla_flops(lambda p, x: jnp.sum(nnx.merge(gd, p).encode_image(x)), p, pixels) == pytest.approx(want, rel=0.03)
  grad = jax.grad(lambda p, x: jnp.sum(nnx.merge(gd, p).encode_image(x)))
  assert _xla_flops(grad, p, pixels) == pytest.approx(3 * want, rel=0.05)


def test_frozen_decoder_the_gradient_flows_through_costs_two_forwards():
  """READ's decoder: frozen, but the loss's gradient flows through it into its input (W and the text tower)."""
  t5 = T5Config.v1_1(256, 2, 1000)
  t5 = dataclasses.replace(t5, dropout_rate=0.0)
  gd, p = nnx.split(nnx.eval_shape(lambda: T5Decoder(t5, rngs=nnx.Rngs(0))), nnx.Param)
  ids, enc = jax.ShapeDtypeStruct((8, 32), jnp.int32), jax.ShapeDtypeStruct((8, 1, 256), jnp.float32)
  # a loss that reads every logit through a softmax (a plain sum would let XLA skip the LM head's backward matmul)
  fwd = lambda e, p, x: jnp.sum(jax.nn.log_softmax(nnx.merge(gd, p)(x, e))[..., 0])
  want = 8 * flops.decoder_forward(t5, 32)
  assert _xla_flops(fwd, enc, p, ids) == pytest.approx(want, rel=0.03)
  back = 8 * flops.decoder_input_gradient(t5, 32)
  assert _xla_flops(jax.grad(fwd), enc, p, ids) == pytest.approx(want + back, rel=0.03)


def test_a_training_step_counts_what_trains():
  """negclip's :runlocal step compiled on the 8 CPU devices (text side trains, vision frozen): XLA's FLOPs (per
  device, × 8) are the model count plus what it leaves out — here, on a 64-wide model, the elementwise work and the
  AdamW update each device repeats (~17 %); counting the text tower once instead of three times, or the frozen
  vision tower three times, would leave the band. The count follows the trainable rules."""
  from compclip_jax.train import aot
  from configs import negclip
  c = negclip.get_config("runlocal")
  c.batch_size = 64
  c.model.random = "tiny"
  r = aot.compile_steps(c, jax.devices(), encoders=False)["negclip"]
  assert 0.75 < r.model_flops / (8 * r.flops) < 1.0, (r.model_flops, 8 * r.flops)
  shapes = {"image": ((4, 32, 32, 3), "uint8"), "ids": ((4, 2, 16), "int32")}
  frozen_vision = flops.step(shapes, CFG, None, flops.Trains(text=True, vision=False))
  both = flops.step(shapes, CFG, None, flops.Trains(text=True, vision=True))
  assert both - frozen_vision == pytest.approx(2 * 4 * flops.vision_forward(CFG.vision, CFG.embed_dim))
  assert np.isfinite(both)
