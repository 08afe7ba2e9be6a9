"""The pieces the methods' losses share (each method's own loss is in its folder, methods/<name>/losses.py): pure,
on L2-normalised embeddings, fp32. Each cites its METHODS section.

Shapes: B images in the global batch, D embedding width, `scale` = exp(logit_scale) (a scalar array).
Every similarity matrix is computed once; negatives enter only the rows or columns they belong to.

A sigmoid family (SigLIP: logits s·⟨î, t̂⟩ + b, each pair a binary problem) reads the same terms through
`sigmoid_pairs` (docs/siglip.md, "Methods on SigLIP"): a label matrix, +1 for each of an image's positives, −1 for
every other text, a method's hard negatives as extra −1 columns; summed over the pairs and divided by B, as SigLIP's
own loss is.
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


def sigmoid_pairs(logits: Array, labels, mask: Array | None = None) -> Array:
  """Σ −log σ(labels · logits) over the pairs of logits [N, C] that `mask` [N, C] keeps (SigLIP's summand, Zhai et
  al. 2023 eq. 1); labels ±1, broadcastable to [N, C]. fp32 []."""
  terms = -jax.nn.log_sigmoid(jnp.asarray(labels, jnp.float32) * logits.astype(jnp.float32))
  if mask is not None:
    terms = jnp.where(mask, terms, 0.0)
  return jnp.sum(terms)


def diagonal_labels(b: int) -> Array:
  """[B, B]: +1 on the diagonal (an image and its own caption), −1 elsewhere."""
  return 2.0 * jnp.eye(b, dtype=jnp.float32) - 1.0


NEGATIVE_FORMS = ("columns", "pair_softmax")


def pair_softmax(pos_logits: Array, neg_logits: Array, valid: Array) -> Array:
  """−log softmax of each (positive, negative) pair, softplus(neg − pos), averaged over the valid pairs (CLIC's S-Neg,
  METHODS §1.3; a bias added to both logits cancels). pos_logits, neg_logits, valid broadcastable to one shape."""
  terms = jax.nn.softplus(neg_logits - pos_logits)
  return masked_mean(terms, jnp.broadcast_to(valid, terms.shape))


def sigmoid_hard_negative(img: Array, pos: Array, negs: Array, neg_valid: Array, scale: Array, bias: Array,
                          negatives: str = "columns") -> tuple[Array, dict]:
  """NegCLIP's and READ's L_con on a sigmoid family (METHODS §1.5, §2.3; docs/siglip.md). "columns": image b's row
  holds +1 at its positive, −1 at the other B − 1 positives and at every valid negative (K·B extra columns, invalid
  ones left out); Σ −log σ over the pairs / B. "pair_softmax": SigLIP's loss on the B × B positives, plus the softmax
  over each (positive, own negative) pair (`pair_softmax`, with the model's scale; its bias cancels).

  img [B, D], pos [B, D], negs [K, B, D] (negative k of sample b at [k, b]), neg_valid [B, K] bool.
  """
  if negatives not in NEGATIVE_FORMS:
    raise ValueError(f"siglip.negatives {negatives!r}: use one of {NEGATIVE_FORMS}")
  b, k = img.shape[0], negs.shape[0]
  in_batch = scale * img @ pos.T + bias  # [B, B]
  own_neg = jnp.einsum("bd,kbd->bk", img, negs) * scale + bias  # [B, K]: each negative against its own image
  if negatives == "columns":
    neg_cols = scale * img @ negs.reshape(k * b, -1).T + bias  # [B, K·B]: every image against every negative
    valid_cols = jnp.broadcast_to(neg_valid.T.reshape(1, k * b), (b, k * b))
    l_neg = sigmoid_pairs(neg_cols, -1.0, valid_cols) / b
  else:
    l_neg = pair_softmax(jnp.diagonal(in_batch)[:, None], own_neg, neg_valid)
  l_pos = sigmoid_pairs(in_batch, diagonal_labels(b)) / b
  loss = l_pos + l_neg
  return loss, {
      "loss": loss, "con/sigmoid": l_pos, "con/negatives": l_neg, "con/acc_i2t": accuracy(in_batch),
      "con/neg_acc": masked_mean(jnp.diagonal(in_batch)[:, None] > own_neg, neg_valid)
  }


def contrastive_with_negatives(img: Array, pos: Array, negs: Array, neg_valid: Array, scale: Array,
                               bias: Array | None = None, negatives: str = "columns") -> tuple[Array, dict]:
  """`hard_negative_contrastive` (bias None: a softmax family, the references' form) or, with SigLIP's bias,
  `sigmoid_hard_negative`."""
  if bias is None:
    return hard_negative_contrastive(img, pos, negs, neg_valid, scale)
  return sigmoid_hard_negative(img, pos, negs, neg_valid, scale, bias, negatives)
