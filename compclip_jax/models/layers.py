"""A dense layer whose kernel is stored in torch's layout, [out, in] (METHODS §4), shared by CLIP, T5 and READ.

Why not `nnx.Linear` ([in, out]): a checkpoint from transformers or open_clip then loads with no dense kernel
transposed, so `load_clip` is in effect one copy of the file's bytes onto the device (a transposing copy of a
ViT-B/32's 600 MB took most of the load time, docs/performance.md; only the patch conv and open_clip's two
projections are still transposed, a few MB), and exports write the arrays as they are. The matmul contracts
the kernel's last axis, which XLA does without a transpose (measured on CPU, forward + backward of a 12-layer text
stack: the same time as [in, out], docs/performance.md).

Initialisers keep `nnx.Linear`'s meaning — they are called with the shape [in, out], and the draw is transposed —
so a model built from scratch has exactly the weights it had with `nnx.Linear` (same keys, same order: kernel, then
bias).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes as nnx_dtypes


def _out_in(value):
  """A kernel drawn as [in, out] → [out, in] (shape-only structs too)."""
  if isinstance(value, jax.ShapeDtypeStruct):
    return jax.ShapeDtypeStruct(tuple(value.shape[::-1]), value.dtype)
  return jnp.swapaxes(value, 0, 1)


class Linear(nnx.Module):
  """y = x · kernelᵀ + bias with kernel [out, in], bias [out]; x [..., in] → y [..., out] in `dtype` (compute)."""
  def __init__(self, in_features: int, out_features: int, *, use_bias: bool = True, dtype=None, param_dtype=jnp.float32,
               kernel_init=nnx.initializers.lecun_normal(), bias_init=nnx.initializers.zeros_init(), rngs: nnx.Rngs):
    self.kernel = nnx.Param(_out_in(kernel_init(rngs.params(), (in_features, out_features), param_dtype)))
    if use_bias:
      self.bias = nnx.Param(bias_init(rngs.params(), (out_features,), param_dtype))
    else:
      self.bias = nnx.data(None)
    self.dtype = dtype

  def __call__(self, x: jax.Array) -> jax.Array:
    bias = self.bias[...] if self.bias is not None else None
    x, kernel, bias = nnx_dtypes.promote_dtype((x, self.kernel[...], bias), dtype=self.dtype)
    y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (1,)), ((), ())))
    return y if bias is None else y + bias
