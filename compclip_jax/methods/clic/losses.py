"""CLIC's loss (METHODS §1.3): pure, fp32, on L2-normalised embeddings."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from compclip_jax.methods.losses import (NEGATIVE_FORMS, accuracy, cross_entropy, diagonal_labels, masked_mean,
                                         pair_softmax, sigmoid_pairs)

Array = jax.Array


def clic_loss(img: Array, txt: Array, neg_valid: Array, scale: Array, w_cont: float = 0.5, w_sneg: float = 0.5,
              w_uni: float = 1.0, bias: Array | None = None, negatives: str = "columns") -> tuple[Array, dict]:
  """METHODS §1.3. img [B, D]; txt [5B, D] stacked [p1; p2; p3; p4; n]; neg_valid [B] bool.

  Contrastive with 4 positive sets: L_i2t(k) = CE of image b over the B texts of set k, L_t2i(k) = CE of text b of
  set k over the B images; L_cont = ½(mean_k L_i2t(k) + mean_k L_t2i(k)).
  S-Neg: softplus(s⟨v_b, n_b⟩ − s⟨v_b, p^k_b⟩) over valid b and all k. Uni: ‖p̂1_b − p̂2_b‖² (not scaled by s).
  L = w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni (0.5, 0.5, 1.0; w_uni = 0 for the single-image ablation).
  `bias` (a sigmoid family's b): `clic_sigmoid_terms` for L_cont and L_S-Neg (docs/siglip.md); L_Uni unchanged.
  """
  if bias is not None:
    return _weighted(img, txt, neg_valid, clic_sigmoid_terms(img, txt, neg_valid, scale, bias, negatives), w_cont,
                     w_sneg, w_uni)
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
  l_sneg = masked_mean(jax.nn.softplus(neg_sim[None] - pos_sim), jnp.broadcast_to(neg_valid[None], pos_sim.shape))
  l_uni = jnp.mean(jnp.sum(jnp.square(pos[0] - pos[1]), axis=-1))
  loss = w_cont * l_cont + w_sneg * l_sneg + w_uni * l_uni
  return loss, {
      "loss": loss, "clic/cont": l_cont, "clic/sneg": l_sneg, "clic/uni": l_uni, "clic/acc_i2t": accuracy(logits[0]),
      "clic/neg_acc": masked_mean(pos_sim[0] > neg_sim, neg_valid),
      "clic/neg_valid_frac": jnp.mean(neg_valid.astype(jnp.float32))
  }


def clic_sigmoid_terms(img: Array, txt: Array, neg_valid: Array, scale: Array, bias: Array,
                       negatives: str = "columns") -> tuple[Array, Array, Array, Array]:
  """CLIC's L_cont and L_S-Neg on a sigmoid family (docs/siglip.md). img [B, D]; txt [5B, D] [p1; p2; p3; p4; n].

  L_cont: the label matrix [B, 4B] with +1 at each of image b's four positives and −1 at every other text, Σ −log σ
  / 4B — the mean over the four sets of SigLIP's loss on [B, B] (the same pairs, so computed set by set).
  L_S-Neg, "columns": each valid negative an extra −1 column for every image, Σ −log σ / B; "pair_softmax": the
  reference's softplus(s⟨v_b, n_b⟩ − s⟨v_b, p^k_b⟩) (the bias cancels).
  → (L_cont, L_S-Neg, pos_logits [4, B] (image b with p^k_b), own-negative logits [B]).
  """
  if negatives not in NEGATIVE_FORMS:
    raise ValueError(f"siglip.negatives {negatives!r}: use one of {NEGATIVE_FORMS}")
  b = img.shape[0]
  pos = txt[:4 * b].reshape(4, b, -1)
  negs = txt[4 * b:]
  logits = scale * jnp.einsum("id,ktd->kit", img, pos) + bias  # [4, B, B]
  l_cont = sigmoid_pairs(logits, diagonal_labels(b)[None]) / (4 * b)
  # [4, B], image b with p^k_b: computed row by row, not read off the diagonal of `logits` (libtpu 0.0.42's
  # all-reduce-scatter fusion fails a RET_CHECK on that diagonal of the sharded [4, B, B] in this form: v5e-8, B 1024)
  pos_logits = scale * jnp.einsum("bd,kbd->kb", img, pos) + bias
  own_neg = scale * jnp.sum(img * negs, axis=-1) + bias  # [B]
  if negatives == "columns":
    l_sneg = sigmoid_pairs(scale * img @ negs.T + bias, -1.0, jnp.broadcast_to(neg_valid[None], (b, b))) / b
  else:
    l_sneg = pair_softmax(pos_logits, own_neg[None], neg_valid[None])
  return l_cont, l_sneg, pos_logits, own_neg


def _weighted(img: Array, txt: Array, neg_valid: Array, terms: tuple, w_cont: float, w_sneg: float,
              w_uni: float) -> tuple[Array, dict]:
  """L = w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni of `clic_sigmoid_terms`, with `clic_loss`'s metrics."""
  b = img.shape[0]
  l_cont, l_sneg, pos_logits, own_neg = terms
  pos = txt[:2 * b].reshape(2, b, -1)
  l_uni = jnp.mean(jnp.sum(jnp.square(pos[0] - pos[1]), axis=-1))
  loss = w_cont * l_cont + w_sneg * l_sneg + w_uni * l_uni
  return loss, {
      "loss": loss, "clic/cont": l_cont, "clic/sneg": l_sneg, "clic/uni": l_uni,
      "clic/acc_i2t": accuracy(img @ txt[:b].T), "clic/neg_acc": masked_mean(pos_logits[0] > own_neg, neg_valid),
      "clic/neg_valid_frac": jnp.mean(neg_valid.astype(jnp.float32))
  }
