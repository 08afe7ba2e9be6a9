"""Loss functions: pure, on L2-normalised embeddings (and decoder logits), fp32. Each cites its METHODS.md section.

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


def _masked_mean(x: Array, mask: Array) -> Array:
  mask = mask.astype(jnp.float32)
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def _accuracy(logits: Array) -> Array:
  return jnp.mean(jnp.argmax(logits, axis=-1) == jnp.arange(logits.shape[0]))


def clip_loss(img: Array, txt: Array, scale: Array) -> tuple[Array, dict]:
  """Symmetric InfoNCE ½(CE_i2t + CE_t2i) (METHODS §1.4, CLIC's plain CLIP step). img [B, D], txt [B, D]."""
  logits = scale * img @ txt.T  # [B, B]
  labels = jnp.arange(img.shape[0])
  i2t, t2i = cross_entropy(logits, labels).mean(), cross_entropy(logits.T, labels).mean()
  loss = 0.5 * (i2t + t2i)
  return loss, {"loss": loss, "clip/i2t": i2t, "clip/t2i": t2i, "clip/acc_i2t": _accuracy(logits)}


def clic_loss(img: Array, txt: Array, neg_valid: Array, scale: Array, w_cont: float = 0.5, w_sneg: float = 0.5,
              w_uni: float = 1.0) -> tuple[Array, dict]:
  """METHODS §1.3. img [B, D]; txt [5B, D] stacked [p1; p2; p3; p4; n]; neg_valid [B] bool.

  Contrastive with 4 positive sets: L_i2t(k) = CE of image b over the B texts of set k, L_t2i(k) = CE of text b of
  set k over the B images; L_cont = ½(mean_k L_i2t(k) + mean_k L_t2i(k)).
  S-Neg: softplus(s⟨v_b, n_b⟩ − s⟨v_b, p^k_b⟩) over valid b and all k. Uni: ‖p̂1_b − p̂2_b‖² (not scaled by s).
  L = w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni (0.5, 0.5, 1.0; w_uni = 0 for the single-image ablation).
  """
  b = img.shape[0]
  pos = txt[:4 * b].reshape(4, b, -1)  # [4, B, D]
  negs = txt[4 * b:]  # [B, D]
  logits = scale * jnp.einsum("id,ktd->kit", img, pos)  # [4, B, B]: the one image × positive-text product
  labels = jnp.arange(b)
  i2t = jax.vmap(lambda l: cross_entropy(l, labels).mean())(logits)  # [4]
  t2i = jax.vmap(lambda l: cross_entropy(l.T, labels).mean())(logits)  # [4]
  l_cont = 0.5 * (i2t.mean() + t2i.mean())
  pos_sim = jnp.diagonal(logits, axis1=1, axis2=2)  # [4, B] = s⟨v_b, p^k_b⟩
  neg_sim = scale * jnp.sum(img * negs, axis=-1)  # [B]: each negative only against its own image
  l_sneg = _masked_mean(jax.nn.softplus(neg_sim[None] - pos_sim), jnp.broadcast_to(neg_valid[None], pos_sim.shape))
  l_uni = jnp.mean(jnp.sum(jnp.square(pos[0] - pos[1]), axis=-1))
  loss = w_cont * l_cont + w_sneg * l_sneg + w_uni * l_uni
  return loss, {
      "loss": loss, "clic/cont": l_cont, "clic/sneg": l_sneg, "clic/uni": l_uni, "clic/acc_i2t": _accuracy(logits[0]),
      "clic/neg_acc": _masked_mean(pos_sim[0] > neg_sim, neg_valid),
      "clic/neg_valid_frac": jnp.mean(neg_valid.astype(jnp.float32))
  }


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
      "loss": loss, "con/i2t": i2t, "con/t2i": t2i, "con/acc_i2t": _accuracy(logits[:, :b]),
      "con/neg_acc": _masked_mean(jnp.diagonal(logits)[:, None] > neg_sim, neg_valid)
  }


def token_reconstruction(logits: Array, targets: Array, pad_id: int = 0) -> Array:
  """READ L_rec (METHODS §2.3): mean token CE over all non-pad target tokens of the batch.

  logits [B, T, V] from the frozen decoder, targets [B, T] (EOS included, pad = `pad_id`).
  """
  ce = cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
  return _masked_mean(ce, targets.reshape(-1) != pad_id)


ALIGN_DIRECTIONS = ("para_to_orig", "orig_to_para", "both")


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
              w_con: float = 1.0) -> tuple[Array, dict]:
  """L_READ = L_con + 0.1·L_rec + 0.5·L_align (METHODS §2.3). `w_con` (1 in READ) lets the synthetic-world demo
  train the decoder alone (w_con = w_align = 0).

  img [B, D]; txt [4B, D] stacked [T; n1; n2; n3]; neg_valid [B, 3]; para [B, D]; dec_logits [B, T5, V];
  targets [B, T5].
  """
  b = img.shape[0]
  negs = txt[b:].reshape(-1, b, txt.shape[-1])
  l_con, m = hard_negative_contrastive(img, txt[:b], negs, neg_valid, scale)
  l_rec = token_reconstruction(dec_logits, targets, pad_id)
  l_align = sentence_alignment(para, txt[:b], scale, align_direction)
  loss = w_con * l_con + w_rec * l_rec + w_align * l_align
  return loss, {**m, "loss": loss, "read/con": l_con, "read/rec": l_rec, "read/align": l_align}


def negclip_loss(img: Array, txt: Array, neg_valid: Array, scale: Array) -> tuple[Array, dict]:
  """METHODS §1.5 "our NegCLIP": img [B, D], txt [2B, D] stacked [T; n], neg_valid [B]."""
  b = img.shape[0]
  return hard_negative_contrastive(img, txt[:b], txt[b:][None], neg_valid[:, None], scale)
