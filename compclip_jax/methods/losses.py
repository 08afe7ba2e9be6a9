"""The pieces the methods' losses share (each method's own loss is in its folder, methods/<name>/losses.py): pure,
on L2-normalised embeddings, fp32. Each cites its METHODS section.

Shapes: B images in the global batch, D embedding width, `scale` = exp(logit_scale) (a scalar array).
Every similarity matrix is computed once; negatives enter only the rows or columns they belong to.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def cross_entropy(logits: Array, labels: Array, mask: Array | None = None) -> Array:
  """Per-row softmax CE [N] of logits [N, C] with integer labels [N]; `mask` [N, C] False removes a column of a row
  from the softmax denominator."""
  logits = logits.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, -jnp.inf)
  return jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]


def masked_mean(x: Array, mask: Array) -> Array:
  mask = mask.astype(jnp.float32)
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def accuracy(logits: Array) -> Array:
  return jnp.mean(jnp.argmax(logits, axis=-1) == jnp.arange(logits.shape[0]))


def hard_negative_contrastive(img: Array, pos: Array, negs: Array, neg_valid: Array,
                              scale: Array) -> tuple[Array, dict]:
  """NegCLIP (METHODS §1.5) and READ's L_con (§2.3): i2t = CE of each image over [B positives; K·B negatives]
  (invalid negatives masked out of the denominator), t2i = CE of each positive over the B images; ½(i2t + t2i).

  img [B, D], pos [B, D], negs [K, B, D] (negative k of sample b at [k, b]), neg_valid [B, K] bool.
  """
  b, k = img.shape[0], negs.shape[0]
  texts = jnp.concatenate([pos, negs.reshape(k * b, -1)])  # [(1+K)B, D]
  logits = scale * img @ texts.T  # [B, (1+K)B]
  mask = jnp.concatenate([jnp.ones((b, b), bool), jnp.broadcast_to(neg_valid.T.reshape(1, k * b), (b, k * b))], 1)
  labels = jnp.arange(b)
  i2t = cross_entropy(logits, labels, mask).mean()
  t2i = cross_entropy(logits[:, :b].T, labels).mean()
  loss = 0.5 * (i2t + t2i)
  neg_sim = jnp.einsum("bd,kbd->bk", img, negs) * scale
  return loss, {
      "loss": loss, "con/i2t": i2t, "con/t2i": t2i, "con/acc_i2t": accuracy(logits[:, :b]),
      "con/neg_acc": masked_mean(jnp.diagonal(logits)[:, None] > neg_sim, neg_valid)
  }
