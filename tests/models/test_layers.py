"""compclip_jax/models/layers.py: the [out, in] dense layer computes what `nnx.Linear` computes with the transposed
kernel, and draws the same initial weights (a model built from scratch is the model it was with nnx.Linear)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compclip_jax.models.layers import Linear


@pytest.mark.parametrize("use_bias,dtype", [(True, jnp.float32), (False, jnp.float32), (True, jnp.bfloat16)])
def test_linear_is_nnx_linear_with_the_kernel_transposed(use_bias, dtype):
  ours = Linear(5, 3, use_bias=use_bias, dtype=dtype, rngs=nnx.Rngs(7), bias_init=nnx.initializers.normal(1.0))
  ref = nnx.Linear(5, 3, use_bias=use_bias, dtype=dtype, rngs=nnx.Rngs(7), bias_init=nnx.initializers.normal(1.0))
  assert ours.kernel[...].shape == (3, 5)
  np.testing.assert_array_equal(np.asarray(ours.kernel[...]), np.asarray(ref.kernel[...]).T)
  if use_bias:
    np.testing.assert_array_equal(np.asarray(ours.bias[...]), np.asarray(ref.bias[...]))
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 5))
  y = ours(x)
  assert y.shape == (2, 4, 3) and y.dtype == ref(x).dtype
  np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(ref(x), np.float32), rtol=1e-6, atol=1e-6)
  # torch's nn.Linear on the same [out, in] weight, by hand: x · Wᵀ + b
  want = np.asarray(x) @ np.asarray(ours.kernel[...], np.float32).T
  if use_bias:
    want = want + np.asarray(ours.bias[...], np.float32)
  tol = 1e-5 if dtype == jnp.float32 else 5e-2
  np.testing.assert_allclose(np.asarray(y, np.float32), want, rtol=tol, atol=tol)


def test_shape_only_initialisers_give_the_out_in_shape():
  lin = Linear(5, 3, rngs=nnx.Rngs(0), kernel_init=lambda _k, s, d: jax.ShapeDtypeStruct(s, d))
  assert lin.kernel.get_value().shape == (3, 5)
