"""Fused self-attention for the short sequences of CLIP's towers (77 text tokens, 50–257 image patches), a Pallas TPU
kernel: every score stays in on-chip memory.

XLA's attention on a TPU writes the [B, H, L, L] scores and probabilities to HBM and reads them back (forward,
rematerialised forward, backward), and moves q/k/v between the [B, L, H, D] layout of the projections and the
head-major one its matmuls want (docs/tpu.md measures both on CLIC's step, with and without this kernel). Here a grid
step holds `block` whole sequences in VMEM in the projections' own [B, L, W] layout (W = H·D) and computes each head
from a 128-lane group of it: a head of D < 128 lanes is picked out of its group by zeroing the group's other lanes,
so every load and store is lane-aligned and no transpose is needed, at the price of a 128-deep contraction for a
D-deep head in the two score matmuls (2× their FLOPs at D = 64, which the cost estimate counts). HBM sees q, k, v
read once and the output written once; the backward kernel recomputes the probabilities from q and k (no [L, L]
residual, no log-sum-exp) and reads q, k, v and the output gradient once.

The numerics are the explicit attention's (`layers.Attention._explicit`): logits and softmax in fp32, probabilities
cast to the value dtype before the weighted sum. `interpret=True` runs the same kernels on any backend (the CPU tests).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

LANES = 128
# one grid step's share of VMEM per [block, L, W] array (each double-buffered; the backward pass has seven of them)
_BLOCK_BYTES = 1 << 20


def supported(width: int, heads: int) -> bool:
  """Whether the kernel applies: W a whole number of 128-lane groups, each holding whole heads (D divides 128)."""
  d = width // heads
  return width % LANES == 0 and d * heads == width and LANES % d == 0


def block_size(batch: int, length: int, width: int, itemsize: int) -> int:
  """The largest divisor of `batch` whose [block, L, W] block fits _BLOCK_BYTES (at least 1)."""
  rows = max(1, _BLOCK_BYTES // (max(length, 8) * width * itemsize))
  return max(d for d in range(1, min(batch, rows) + 1) if batch % d == 0)


def _probs(qg, kg, mask, keep, scale):
  """One head's probabilities: qg, kg [L, 128] (the head's lane group), mask bool [1, 128] its lanes → fp32 [L, L]."""
  s = jax.lax.dot_general(jnp.where(mask, qg, 0), kg, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  s = s * scale
  if keep is not None:
    s = jnp.where(keep, s, jnp.finfo(jnp.float32).min)
  e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
  return e / jnp.sum(e, axis=-1, keepdims=True)


def _groups(width: int, heads: int):
  """(lane slice, [(mask [1, 128] of head i's lanes)]) per 128-lane group of W."""
  d = width // heads
  lane_head = jax.lax.div(jax.lax.broadcasted_iota(jnp.int32, (1, LANES), 1), d)  # (no floor: lanes are ≥ 0)
  return [(pl.ds(g * LANES, LANES), [lane_head == i for i in range(LANES // d)]) for g in range(width // LANES)]


def _keep(length: int, causal: bool):
  if not causal:
    return None
  rows = jax.lax.broadcasted_iota(jnp.int32, (length, length), 0)
  return jax.lax.broadcasted_iota(jnp.int32, (length, length), 1) <= rows


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, *, heads: int, causal: bool, scale: float):
  """Refs [block, L, W] → o_ref [block, L, W]."""
  block, length, width = q_ref.shape
  keep = _keep(length, causal)
  groups = _groups(width, heads)

  def sequence(b, carry):
    for lanes, masks in groups:
      qg, kg, vg = q_ref[b, :, lanes], k_ref[b, :, lanes], v_ref[b, :, lanes]
      out = jnp.zeros((length, LANES), jnp.float32)
      for mask in masks:
        p = _probs(qg, kg, mask, keep, scale)
        out = jnp.where(mask, jnp.dot(p.astype(vg.dtype), vg, preferred_element_type=jnp.float32), out)
      o_ref[b, :, lanes] = out.astype(o_ref.dtype)
    return carry

  jax.lax.fori_loop(0, block, sequence, 0)


def _backward_kernel(q_ref, k_ref, v_ref, do_ref, dq_ref, dk_ref, dv_ref, *, heads: int, causal: bool, scale: float):
  """Refs [block, L, W] → dq, dk, dv [block, L, W]; p recomputed, ds = p ⊙ (dp − Σ p ⊙ dp)."""
  block, length, width = q_ref.shape
  keep = _keep(length, causal)
  groups = _groups(width, heads)
  tn = (((0,), (0,)), ((), ()))  # aᵀ b: contract the rows of both

  def sequence(b, carry):
    for lanes, masks in groups:
      qg, kg, vg, dog = q_ref[b, :, lanes], k_ref[b, :, lanes], v_ref[b, :, lanes], do_ref[b, :, lanes]
      dq = dk = dv = jnp.zeros((length, LANES), jnp.float32)
      for mask in masks:
        p = _probs(qg, kg, mask, keep, scale)
        dp = jax.lax.dot_general(jnp.where(mask, dog, 0), vg, (((1,), (1,)), ((), ())),
                                 preferred_element_type=jnp.float32)
        ds = (p * (dp - jnp.sum(p * dp, axis=-1, keepdims=True)) * scale).astype(qg.dtype)
        dv = jnp.where(mask, jax.lax.dot_general(p.astype(dog.dtype), dog, tn, preferred_element_type=jnp.float32), dv)
        dq = jnp.where(mask, jnp.dot(ds, kg, preferred_element_type=jnp.float32), dq)
        dk = jnp.where(mask, jax.lax.dot_general(ds, qg, tn, preferred_element_type=jnp.float32), dk)
      dq_ref[b, :, lanes], dk_ref[b, :, lanes], dv_ref[b, :, lanes] = (dq.astype(dq_ref.dtype), dk.astype(dk_ref.dtype),
                                                                       dv.astype(dv_ref.dtype))
    return carry

  jax.lax.fori_loop(0, block, sequence, 0)


def _call(kernel, inputs, outputs: int, heads: int, causal: bool, interpret: bool, passes: int):
  """pallas_call of `kernel` over blocks of whole sequences; `passes`: score-sized matmuls per head (cost estimate)."""
  batch, length, width = inputs[0].shape
  block = block_size(batch, length, width, inputs[0].dtype.itemsize)
  spec = pl.BlockSpec((block, length, width), lambda i: (i, 0, 0))
  shape = jax.ShapeDtypeStruct(inputs[0].shape, inputs[0].dtype)
  nbytes = math.prod(shape.shape) * shape.dtype.itemsize
  cost = pl.CostEstimate(  # what runs: `passes` [L, 128] × [128, L]-sized matmuls per head, every array moved once
      flops=2 * passes * batch * heads * length * length * LANES, transcendentals=batch * heads * length * length,
      bytes_accessed=(len(inputs) + outputs) * nbytes)
  compiler_params = None
  if not interpret:
    from jax.experimental.pallas import tpu as pltpu  # pylint: disable=import-outside-toplevel
    compiler_params = pltpu.CompilerParams(dimension_semantics=("parallel",))
  return pl.pallas_call(functools.partial(kernel, heads=heads, causal=causal, scale=1.0 / math.sqrt(width // heads)),
                        out_shape=[shape] * outputs, grid=(batch // block,), in_specs=[spec] * len(inputs),
                        out_specs=[spec] * outputs, compiler_params=compiler_params, cost_estimate=cost,
                        interpret=interpret, name=kernel.__name__.strip("_"))(*inputs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def fused_attention(q, k, v, heads: int, causal: bool, interpret: bool = False):
  """Self-attention of q, k, v [B, L, W] (heads of D = W / heads lanes side by side, the projections' layout) →
  [B, L, W] in q's dtype; `causal`: position i sees keys ≤ i. Requires `supported(W, heads)`."""
  return _call(_forward_kernel, (q, k, v), 1, heads, causal, interpret, passes=2)[0]


def _fwd(q, k, v, heads, causal, interpret):
  return fused_attention(q, k, v, heads, causal, interpret), (q, k, v)


def _bwd(heads, causal, interpret, residuals, do):
  return tuple(
      _call(_backward_kernel, (*residuals, do.astype(residuals[0].dtype)), 3, heads, causal, interpret, passes=5))


fused_attention.defvjp(_fwd, _bwd)
