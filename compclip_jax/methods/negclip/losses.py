"""NegCLIP's loss (METHODS §1.5): pure, fp32, on L2-normalised embeddings."""
from __future__ import annotations

import jax

from compclip_jax.methods.losses import hard_negative_contrastive

Array = jax.Array


def negclip_loss(img: Array, txt: Array, neg_valid: Array, scale: Array) -> tuple[Array, dict]:
  """METHODS §1.5 "our NegCLIP": img [B, D], txt [2B, D] stacked [T; n], neg_valid [B]."""
  b = img.shape[0]
  return hard_negative_contrastive(img, txt[:b], txt[b:][None], neg_valid[:, None], scale)
