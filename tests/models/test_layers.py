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


def test_mixed_precision_gradients_are_fp32():
  """A bf16-computed Linear over fp32 parameters (layers.mixed_dense): the forward is the bf16 matmul, and the
  kernel's and bias's gradients are the fp32 sums over the batch of the bf16 operands — not rounded to bf16, as the
  plain bf16 dot's would be (~4e-3 relative) before the data-parallel all-reduce sums them."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from compclip_jax.models import layers
  rng = np.random.default_rng(0)
  x, w = rng.normal(size=(16, 24, 64)).astype(np.float32), rng.normal(size=(16, 24, 96)).astype(np.float32)
  lin = layers.Linear(64, 96, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
  kernel, bias = lin.kernel[...], lin.bias[...]
  loss = lambda k, b: jnp.sum(layers.mixed_dense(jnp.asarray(x), k, b, jnp.dtype(jnp.bfloat16)) * w)
  dk, db = jax.grad(loss, argnums=(0, 1))(kernel, bias)
  assert dk.dtype == db.dtype == jnp.float32
  g = np.asarray(jnp.asarray(w).astype(jnp.bfloat16).astype(jnp.float32), np.float64)  # the cotangent, in bf16
  xc = np.asarray(jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32), np.float64)
  want_k, want_b = np.einsum("blo,bli->oi", g, xc), g.sum((0, 1))
  np.testing.assert_allclose(dk, want_k, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(db, want_b, rtol=1e-5, atol=1e-4)
  # the plain bf16 dot's kernel gradient: rounded to bf16
  plain = jax.grad(
      lambda k: jnp.sum(jnp.einsum("bli,oi->blo",
                                   jnp.asarray(x).astype(jnp.bfloat16), k.astype(jnp.bfloat16)) * w))(kernel)
  assert np.max(np.abs(plain - want_k) / (np.abs(want_k) + 1)) > 1e-3
  # the forward is the bf16 matmul, and Linear takes this path for fp32 parameters in bf16
  np.testing.assert_array_equal(lin(jnp.asarray(x)), layers.mixed_dense(jnp.asarray(x), kernel, bias, jnp.bfloat16))
  assert lin(jnp.asarray(x)).dtype == jnp.bfloat16
