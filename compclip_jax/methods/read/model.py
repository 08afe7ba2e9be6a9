"""READ's model (METHODS §2.1): CLIP + a trainable projection W (text width → d_model, no bias) + the frozen T5 v1.1
decoder that reconstructs a caption from W·pooled(text), a length-1 sequence it cross-attends to."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from compclip_jax.models.clip import CLIP, DTypes
from compclip_jax.models.layers import Linear
from compclip_jax.models.t5 import T5Config, T5Decoder

READ_PROJ_INITS = ("torch_linear", "lecun_normal")


def torch_linear_init(key: jax.Array, shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
  """torch `nn.Linear`'s default weight init, called with the shape [fan_in, fan_out] as every kernel initialiser is
  (compclip_jax/models/layers.py; the kernel itself is stored [out, in]): kaiming_uniform with a = √5, i.e.
  uniform in ±gain·√(3/fan_in) with gain = √(2/(1 + a²)) = √(1/3) → ±1/√fan_in (std 1/√(3·fan_in))."""
  bound = 1.0 / math.sqrt(shape[0])
  return jax.random.uniform(key, shape, dtype, -bound, bound)


def read_proj_init(name: str):
  """The initialiser of W (`model.read_proj_init`, METHODS §2.1): "torch_linear" (the reference's nn.Linear
  default) or "lecun_normal" (truncated normal, std 1/√fan_in: the old default)."""
  if name == "torch_linear":
    return torch_linear_init
  if name == "lecun_normal":
    return nnx.initializers.lecun_normal()
  raise ValueError(f"model.read_proj_init {name!r}: use one of {READ_PROJ_INITS}")


class READModel(nnx.Module):
  def __init__(self, clip: CLIP, t5_cfg: T5Config, *, rngs: nnx.Rngs, t5_dtypes: DTypes = DTypes(),
               decoder: T5Decoder | None = None, t5_attention: str = "explicit"):
    self.clip = clip
    self.proj = Linear(clip.cfg.text.width, t5_cfg.d_model, use_bias=False, kernel_init=torch_linear_init,
                       rngs=rngs)  # training sets W itself (train.build_model, `model.read_proj_init`)
    if decoder is None:
      decoder = T5Decoder(t5_cfg, t5_dtypes, rngs=rngs, attention=t5_attention)
    self.decoder = decoder

  def reconstruct(self, pooled: jax.Array, decoder_input_ids: jax.Array,
                  dropout_rng: jax.Array | None = None) -> jax.Array:
    """pooled [B, width] (EOT hidden state after the final LN, before text_projection, not normalised) →
    decoder logits [B, T, vocab]."""
    return self.decoder(decoder_input_ids, self.proj(pooled)[:, None, :], dropout_rng)


def clip_of(model) -> CLIP:
  """The CLIP inside a model: READ's `.clip`, or the model itself."""
  return model.clip if isinstance(model, READModel) else model
