"""CLIC's loss (METHODS §1.3): pure, fp32, on L2-normalised embeddings."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from compclip_jax.methods.losses import accuracy, cross_entropy, masked_mean

Array = jax.Array


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
  l_sneg = masked_mean(jax.nn.softplus(neg_sim[None] - pos_sim), jnp.broadcast_to(neg_valid[None], pos_sim.shape))
  l_uni = jnp.mean(jnp.sum(jnp.square(pos[0] - pos[1]), axis=-1))
  loss = w_cont * l_cont + w_sneg * l_sneg + w_uni * l_uni
  return loss, {
      "loss": loss, "clic/cont": l_cont, "clic/sneg": l_sneg, "clic/uni": l_uni, "clic/acc_i2t": accuracy(logits[0]),
      "clic/neg_acc": masked_mean(pos_sim[0] > neg_sim, neg_valid),
      "clic/neg_valid_frac": jnp.mean(neg_valid.astype(jnp.float32))
  }
