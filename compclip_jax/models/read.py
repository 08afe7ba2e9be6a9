"""READ's model (METHODS §2.1): CLIP + a trainable projection W (text width → d_model, no bias) + the frozen T5 v1.1
decoder that reconstructs a caption from W·pooled(text), a length-1 sequence it cross-attends to."""
from __future__ import annotations

import jax
from flax import nnx

from compclip_jax.models.clip import CLIP, DTypes
from compclip_jax.models.t5 import T5Config, T5Decoder


class READModel(nnx.Module):
  def __init__(self, clip: CLIP, t5_cfg: T5Config, *, rngs: nnx.Rngs, t5_dtypes: DTypes = DTypes(),
               decoder: T5Decoder | None = None):
    self.clip = clip
    self.proj = nnx.Linear(clip.cfg.text.width, t5_cfg.d_model, use_bias=False, rngs=rngs)
    self.decoder = decoder if decoder is not None else T5Decoder(t5_cfg, t5_dtypes, rngs=rngs)

  def reconstruct(self, pooled: jax.Array, decoder_input_ids: jax.Array,
                  dropout_rng: jax.Array | None = None) -> jax.Array:
    """pooled [B, width] (EOT hidden state after the final LN, before text_projection, not normalised) →
    decoder logits [B, T, vocab]."""
    return self.decoder(decoder_input_ids, self.proj(pooled)[:, None, :], dropout_rng)


def clip_of(model) -> CLIP:
  """The CLIP inside a model: READ's `.clip`, or the model itself."""
  return model.clip if isinstance(model, READModel) else model
