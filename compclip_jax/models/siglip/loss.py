"""SigLIP's pairwise sigmoid loss (Zhai et al. 2023, eq. 1; transformers' `SiglipModel` with `return_loss=True`):
every (image, text) pair is a binary problem, +1 on the diagonal, −1 elsewhere,

  L = −1/B · Σ_i Σ_j log σ(z_ij · (t̂_j · î_i · exp(t') + b)),

and its sharded form: each device scores its own images against its own texts (the diagonal block) and against every
other device's text block, passed round the ring with `ppermute` — remote blocks are negatives only — so a device
holds one [b, b] block at a time (memory O(b²) for a local batch b, not O(B²)). The same sum; equal to ≤ 1e-6
(tests/models/test_siglip_loss.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P


def _pairs(img: jax.Array, txt: jax.Array, scale: jax.Array, bias: jax.Array, labels) -> jax.Array:
  """Σ −log σ(labels · logits) over the pairs of img [n, D] × txt [m, D] (labels broadcastable to [n, m])."""
  logits = img @ txt.T * scale + bias
  return -jnp.sum(jax.nn.log_sigmoid(labels * logits))


def sigmoid_loss(img: jax.Array, txt: jax.Array, logit_scale: jax.Array, logit_bias: jax.Array) -> jax.Array:
  """img, txt [B, D] L2-normalised fp32 (row i of each is a pair); logit_scale (a log) and logit_bias scalars or
  [1] → the mean over images of the summed pair losses, fp32 []."""
  labels = 2.0 * jnp.eye(img.shape[0]) - 1.0
  scale, bias = jnp.exp(jnp.reshape(logit_scale, ())), jnp.reshape(logit_bias, ())
  return _pairs(img, txt, scale, bias, labels) / img.shape[0]


def sharded_sigmoid_loss(img: jax.Array, txt: jax.Array, logit_scale: jax.Array, logit_bias: jax.Array, mesh: Mesh,
                         axis: str = "data") -> jax.Array:
  """`sigmoid_loss` with img, txt [B, D] sharded over mesh axis `axis` (B divisible by its size): text blocks go
  round the ring, one [b, b] block of pairs per device at a time. → fp32 [], replicated."""
  n = mesh.shape[axis]
  ring = [(k, (k + 1) % n) for k in range(n)]

  def local(img_b, txt_b, logit_scale, logit_bias):
    scale, bias = jnp.exp(jnp.reshape(logit_scale, ())), jnp.reshape(logit_bias, ())
    total = _pairs(img_b, txt_b, scale, bias, 2.0 * jnp.eye(img_b.shape[0]) - 1.0)  # the diagonal block
    block = txt_b
    for _ in range(n - 1):  # every other device's texts once: negatives only
      block = jax.lax.ppermute(block, axis, ring)
      total += _pairs(img_b, block, scale, bias, -1.0)
    return jax.lax.psum(total, axis)

  total = jax.shard_map(local, mesh=mesh, in_specs=(P(axis), P(axis), P(), P()), out_specs=P())(img, txt, logit_scale,
                                                                                                logit_bias)
  return total / img.shape[0]
