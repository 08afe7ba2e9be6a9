"""NegCLIP's loss (METHODS §1.5): pure, fp32, on L2-normalised embeddings."""
from __future__ import annotations

import jax

from compclip_jax.methods.losses import contrastive_with_negatives

Array = jax.Array


def negclip_loss(img: Array, txt: Array, neg_valid: Array, scale: Array, bias: Array | None = None,
                 negatives: str = "columns") -> tuple[Array, dict]:
  """METHODS §1.5 "our NegCLIP": img [B, D], txt [2B, D] stacked [T; n], neg_valid [B]. `bias` (SigLIP's b): the
  sigmoid form, the negatives as `negatives` says (methods/losses.py `sigmoid_hard_negative`)."""
  b = img.shape[0]
  return contrastive_with_negatives(img, txt[:b], txt[b:][None], neg_valid[:, None], scale, bias, negatives)
