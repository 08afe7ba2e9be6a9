"""Plain CLIP's loss (METHODS §1.4): pure, fp32."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from compclip_jax.methods.losses import accuracy, cross_entropy, diagonal_labels, sigmoid_pairs

Array = jax.Array


def clip_loss(img: Array, txt: Array, scale: Array, bias: Array | None = None) -> tuple[Array, dict]:
  """Symmetric InfoNCE ½(CE_i2t + CE_t2i) (METHODS §1.4, CLIC's plain CLIP step). img [B, D], txt [B, D].
  `bias` (a sigmoid family's b): SigLIP's own loss instead, Σ −log σ(±(s⟨î, t̂⟩ + b)) / B (docs/siglip.md)."""
  if bias is not None:
    logits = scale * img @ txt.T + bias
    loss = sigmoid_pairs(logits, diagonal_labels(img.shape[0])) / img.shape[0]
    return loss, {"loss": loss, "clip/sigmoid": loss, "clip/acc_i2t": accuracy(logits)}
  logits = scale * img @ txt.T  # [B, B]
  labels = jnp.arange(img.shape[0])
  i2t, t2i = cross_entropy(logits, labels).mean(), cross_entropy(logits.T, labels).mean()
  loss = 0.5 * (i2t + t2i)
  return loss, {"loss": loss, "clip/i2t": i2t, "clip/t2i": t2i, "clip/acc_i2t": accuracy(logits)}
