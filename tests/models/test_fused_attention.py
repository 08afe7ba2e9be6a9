"""compclip_jax/models/fused_attention.py: the Pallas attention kernel, run by Pallas's interpreter on CPU, equals the
explicit attention (layers.Attention._explicit, which the parity tests pin to transformers) in its output and its
three gradients; a tower with model.attention="pallas" lowers to XLA's attention off a TPU; for a TPU it compiles to
the kernel inside the step, per device (tests/cli/test_compile.py has the compiler's bytes)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compclip_jax.models import fused_attention as fa
from compclip_jax.models.layers import Attention, DTypes


def _explicit(q, k, v, heads, causal):
  b, l, w = q.shape
  split = lambda t: t.reshape(b, l, heads, w // heads)
  keep = jnp.tril(jnp.ones((l, l), bool)) if causal else None
  return Attention._explicit(split(q), split(k), split(v), keep).reshape(b, l, w)


@pytest.mark.parametrize(
    "length,width,heads,causal,dtype",
    [
        (77, 256, 4, True, jnp.float32),  # CLIP's text: 77 tokens, causal, heads of 64 lanes (two per 128-lane group)
        (50, 128, 4, False, jnp.float32),  # a ViT-B/32's 50 tokens, heads of 32 lanes (four per group)
        (77, 256, 4, True, jnp.bfloat16),  # the recipes' precision: bf16 operands, fp32 scores and softmax
    ])
def test_the_kernel_and_its_gradients_equal_the_explicit_attention(length, width, heads, causal, dtype):
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  q, k, v, do = (jax.random.normal(key, (3, length, width), dtype) for key in keys)
  ours = lambda q, k, v: fa.fused_attention(q, k, v, heads, causal, True)  # interpret=True: the CPU runs the kernel
  ref = lambda q, k, v: _explicit(q, k, v, heads, causal)
  out, vjp = jax.vjp(ours, q, k, v)
  want, want_vjp = jax.vjp(ref, q, k, v)
  assert out.shape == want.shape and out.dtype == want.dtype
  # fp32: ≤ 1e-5 on unit-scale values; bf16: both round p and ds to bf16 before their matmuls, in other orders
  tol = 1e-5 if dtype == jnp.float32 else 3e-2
  f32 = lambda t: np.asarray(t, np.float32)
  np.testing.assert_allclose(f32(out), f32(want), atol=tol, rtol=tol)
  for name, a, b in zip("qkv", vjp(do), want_vjp(do)):
    np.testing.assert_allclose(f32(a), f32(b), atol=tol * 4, rtol=tol, err_msg=f"d{name}")


def test_what_the_kernel_takes_and_its_blocks():
  assert fa.supported(512, 8) and fa.supported(768, 12) and fa.supported(1024, 16)  # CLIP B and L towers (D = 64)
  assert not fa.supported(1152, 16)  # SigLIP so400m: heads of 72 lanes straddle the 128-lane groups
  assert not fa.supported(96, 3)  # W not a whole number of lane groups
  # the largest divisor of the batch whose [block, L, W] block fits a MiB: 500 texts of 77 × 512 bf16 → 10 (770 KiB)
  assert fa.block_size(500, 77, 512, 2) == 10 and fa.block_size(7, 77, 512, 2) == 7
  assert fa.block_size(3, 77, 8192, 4) == 1


def test_a_pallas_tower_lowers_to_xlas_attention_off_a_tpu():
  """On this CPU the "pallas" knob's platform_dependent branch is XLA's attention: the explicit output, and no kernel
  in the program."""
  dt = DTypes(jnp.float32, jnp.float32)
  fused = Attention(128, 4, dt, rngs=nnx.Rngs(0), attention="pallas")
  explicit = Attention(128, 4, dt, rngs=nnx.Rngs(0), attention="explicit")
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 9, 128))
  np.testing.assert_allclose(np.asarray(fused(x, True)), np.asarray(explicit(x, True)), atol=1e-5, rtol=1e-5)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))
  with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
    hlo = jax.jit(lambda x: fused(x, True)).lower(x).as_text()
  assert "tpu_custom_call" not in hlo and "dot_general" in hlo
