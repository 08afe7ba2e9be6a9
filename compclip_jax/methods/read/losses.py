"""READ's losses (METHODS §2.3): pure, fp32, on L2-normalised embeddings and decoder logits."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from compclip_jax.methods.losses import contrastive_with_negatives, cross_entropy, masked_mean

Array = jax.Array

ALIGN_DIRECTIONS = ("para_to_orig", "orig_to_para", "both")


def token_reconstruction(logits: Array, targets: Array, pad_id: int = 0) -> Array:
  """READ L_rec (METHODS §2.3): mean token CE over all non-pad target tokens of the batch.

  logits [B, T, V] from the frozen decoder, targets [B, T] (EOS included, pad = `pad_id`).
  """
  ce = cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
  return masked_mean(ce, targets.reshape(-1) != pad_id)


def sentence_alignment(para: Array, orig: Array, scale: Array, direction: str = "para_to_orig") -> Array:
  """READ L_align (METHODS §2.3): logits = s·P̂T̂ᵀ [B, B]; 'para_to_orig' (reference) classifies each paraphrase among
  the originals, 'orig_to_para' (the paper's formula) the transpose, 'both' averages the two."""
  if direction not in ALIGN_DIRECTIONS:
    raise ValueError(f"alignment direction {direction!r}: use one of {ALIGN_DIRECTIONS}")
  logits = scale * para @ orig.T
  labels = jnp.arange(para.shape[0])
  p2o, o2p = cross_entropy(logits, labels).mean(), cross_entropy(logits.T, labels).mean()
  return {"para_to_orig": p2o, "orig_to_para": o2p, "both": 0.5 * (p2o + o2p)}[direction]


def read_loss(img: Array, txt: Array, neg_valid: Array, para: Array, dec_logits: Array, targets: Array, scale: Array,
              w_rec: float = 0.1, w_align: float = 0.5, align_direction: str = "para_to_orig", pad_id: int = 0,
              w_con: float = 1.0, bias: Array | None = None, negatives: str = "columns") -> tuple[Array, dict]:
  """L_READ = L_con + 0.1·L_rec + 0.5·L_align (METHODS §2.3). `w_con` (1 in READ) lets the synthetic-world demo
  train the decoder alone (w_con = w_align = 0).

  img [B, D]; txt [4B, D] stacked [T; n1; n2; n3]; neg_valid [B, 3]; para [B, D]; dec_logits [B, T5, V];
  targets [B, T5]. `bias` (a sigmoid family's b): L_con in its sigmoid form (`negatives`: methods/losses.py
  `sigmoid_hard_negative`); L_rec and L_align, text-side, unchanged (docs/siglip.md).
  """
  b = img.shape[0]
  negs = txt[b:].reshape(-1, b, txt.shape[-1])
  l_con, m = contrastive_with_negatives(img, txt[:b], negs, neg_valid, scale, bias, negatives)
  l_rec = token_reconstruction(dec_logits, targets, pad_id)
  l_align = sentence_alignment(para, txt[:b], scale, align_direction)
  loss = w_con * l_con + w_rec * l_rec + w_align * l_align
  return loss, {**m, "loss": loss, "read/con": l_con, "read/rec": l_rec, "read/align": l_align}
