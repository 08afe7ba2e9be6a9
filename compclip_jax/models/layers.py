"""The transformer parts CLIP, SigLIP, T5 and READ share: the dense layer (`Linear`), the pre-LN encoder block and
stack (`EncoderLayer`, `Encoder`: attention knobs, rematerialisation, scan), `MLP`, `Attention`, the dtypes of a
tower and the shape-only initialisers that build a model without drawing weights.

`Linear` keeps its kernel in torch's layout, [out, in] (METHODS §4).

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

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes as nnx_dtypes

from compclip_jax.models import fused_attention


def _out_in(value):
  """A kernel drawn as [in, out] → [out, in] (shape-only structs too)."""
  if isinstance(value, jax.ShapeDtypeStruct):
    return jax.ShapeDtypeStruct(tuple(value.shape[::-1]), value.dtype)
  return jnp.swapaxes(value, 0, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def mixed_dense(x: jax.Array, kernel: jax.Array, bias: jax.Array | None, dtype) -> jax.Array:
  """x [..., in] · kernel [out, in]ᵀ + bias [out] computed in `dtype` (bf16) from fp32 parameters, whose gradients
  come out fp32: the kernel's as an fp32-accumulated matmul over the batch, the bias's as an fp32 sum. A plain
  `dot_general` on the cast operands would give the kernel's gradient in bf16, and the data-parallel all-reduce of
  it would sum in bf16 (mixed precision keeps gradients and their reduction in fp32)."""
  return _mixed_dense_fwd(x, kernel, bias, dtype)[0]


def _mixed_dense_fwd(x, kernel, bias, dtype):
  xc, kc = x.astype(dtype), kernel.astype(dtype)
  y = jax.lax.dot_general(xc, kc, (((x.ndim - 1,), (1,)), ((), ())))
  # residuals: the cast operands, x's dtype as a 0-d array, and whether there is a bias (None: a static empty tree)
  has_bias = None if bias is None else jnp.zeros((), bool)
  return (y if bias is None else y + bias.astype(dtype)), (xc, kc, jnp.zeros((), x.dtype), has_bias)


def _mixed_dense_bwd(dtype, res, g):
  del dtype
  xc, kc, x_proto, has_bias = res
  batch = tuple(range(g.ndim - 1))
  dx = jax.lax.dot_general(g, kc, (((g.ndim - 1,), (0,)), ((), ()))).astype(x_proto.dtype)
  dk = jax.lax.dot_general(g, xc, ((batch, batch), ((), ())), preferred_element_type=jnp.float32)
  db = None if has_bias is None else jnp.sum(g.astype(jnp.float32), axis=batch)
  return dx, dk, db


mixed_dense.defvjp(_mixed_dense_fwd, _mixed_dense_bwd)


class Linear(nnx.Module):
  """y = x · kernelᵀ + bias with kernel [out, in], bias [out]; x [..., in] → y [..., out] in `dtype` (compute).
  fp32 parameters computed in a narrower `dtype` go through `mixed_dense` (their gradients fp32)."""
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
    kernel = self.kernel[...]
    if self.dtype is not None and kernel.dtype == jnp.float32 and jnp.dtype(self.dtype).itemsize < 4:
      return mixed_dense(x, kernel, bias, jnp.dtype(self.dtype))
    x, kernel, bias = nnx_dtypes.promote_dtype((x, kernel, bias), dtype=self.dtype)
    y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (1,)), ((), ())))
    return y if bias is None else y + bias


@dataclasses.dataclass(frozen=True)
class DTypes:
  """Storage and compute dtypes of one tower (fp32 default; bf16 is the usual choice for a frozen tower)."""
  param: jnp.dtype = jnp.float32
  compute: jnp.dtype = jnp.float32


class ShapeOnlyRngs:
  """Stands in for `nnx.Rngs` when only the parameters' shapes and dtypes are wanted (loading a checkpoint): every
  initializer returns a `jax.ShapeDtypeStruct`, so building a model costs no tracing and no random draws."""
  def params(self) -> None:
    return None


def _shape_only_init(_key, shape, dtype=jnp.float32) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(tuple(shape), dtype)


def inits(rngs, *names: str, **given) -> dict:
  """The initializer keywords to pass to an nnx layer: `given` (else the layer's defaults) for real `rngs`, shape-only
  ones for `ShapeOnlyRngs`."""
  return {n: _shape_only_init for n in names} if isinstance(rngs, ShapeOnlyRngs) else given


# `attention` knob (model.attention): "explicit" is the formulation the parity tests pin (einsum, fp32 softmax, mask by
# jnp.where); "xla" and "cudnn" call `jax.nn.dot_product_attention`, whose XLA path computes the same thing (fp32 logits
# and softmax) and whose cuDNN path is a fused flash-attention kernel (GPU, bf16/fp16 only); "pallas" is
# models/fused_attention.py's TPU kernel for CLIP's and SigLIP's towers (XLA's attention elsewhere: other platforms,
# T5's biased attention, head sizes it does not take, programs traced without a mesh). "auto": cuDNN on a GPU, the
# Pallas kernel on a TPU, XLA otherwise.
ATTENTION = ("explicit", "xla", "cudnn", "pallas", "auto")
# `remat_policy` knob (model.remat_policy), used when a tower is rematerialised, in order of the memory it keeps
# (XLA:TPU's buffer assignment, tests/cli/test_compile.py; docs/tpu.md): "full" saves nothing of a block (one extra
# forward per block in the backward pass); "dots_no_batch" keeps the outputs of the weight matmuls (q/k/v, out,
# fc1, fc2) and recomputes the attention scores and the elementwise ops; "dots_saveable" keeps every matmul output,
# the [B, H, L, L] attention scores included, which is about what no remat keeps (no saving; it only skips the
# recomputation); "none" turns rematerialisation off.
REMAT_POLICIES = ("none", "full", "dots_no_batch", "dots_saveable")
_POLICIES = {
    "full": None, "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable
}


def check_attention(name: str) -> str:
  if name not in ATTENTION:
    raise ValueError(f"model.attention {name!r}: use one of {ATTENTION}")
  return name


def attention_implementation(name: str, dtype) -> str | None:
  """The `implementation` argument of `jax.nn.dot_product_attention` for knob `name` (None: the explicit einsum
  formulation). cuDNN runs only on GPUs and only in bf16/fp16, so "auto" picks it there and XLA elsewhere."""
  check_attention(name)
  if name == "explicit":
    return None
  if name == "auto":
    fused_ok = jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
    return "cudnn" if fused_ok else "xla"
  return "xla" if name == "pallas" else name


def _fused_or_xla(q, k, v, causal: bool, other: str):
  """q, k, v [B, L, H, D] → [B, L, H, D]: the Pallas kernel where the program is lowered for a TPU, under the mesh
  its step was traced with (each device attends its own sequences: `jax.shard_map` over the batch, split over every
  mesh axis as sharding.BATCH splits it); `jax.nn.dot_product_attention`'s `other` implementation when lowered for
  another platform."""
  b, l, h, d = q.shape
  xla = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=other)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or b % mesh.size:  # no mesh to split the batch over (an evaluation encoder): XLA's attention
    return xla(q, k, v)
  batch = jax.sharding.PartitionSpec(tuple(mesh.axis_names))

  def tpu(q, k, v):
    flat = lambda t: t.reshape(b, l, h * d)  # the projections' own layout: a free reshape
    run = functools.partial(fused_attention.fused_attention, heads=h, causal=causal)
    out = jax.shard_map(run, mesh=mesh, in_specs=(batch,) * 3, out_specs=batch, check_vma=False)(*map(flat, (q, k, v)))
    return out.reshape(b, l, h, d)

  return jax.lax.platform_dependent(q, k, v, tpu=tpu, default=xla)


def remat_policy_fn(name: str):
  """`jax.checkpoint` policy of knob `name` ("full" → None: save nothing)."""
  if name not in REMAT_POLICIES:
    raise ValueError(f"model.remat_policy {name!r}: use one of {REMAT_POLICIES}")
  return _POLICIES.get(name)


def activation(name: str, x: jax.Array) -> jax.Array:
  if name == "quick_gelu":
    return x * jax.nn.sigmoid(1.702 * x)
  if name == "gelu_pytorch_tanh":  # SigLIP's: the tanh approximation
    return jax.nn.gelu(x, approximate=True)
  return jax.nn.gelu(x, approximate=False)  # HF "gelu" is the exact erf form


class Attention(nnx.Module):
  """Multi-head self-attention with separate q/k/v projections (HF layout); `attention` is a knob of ATTENTION."""
  def __init__(self, width: int, heads: int, dt: DTypes, *, rngs: nnx.Rngs, attention: str = "explicit"):
    self.heads = heads
    self.implementation = attention_implementation(attention, dt.compute)
    # the Pallas kernel, picked at lowering: "pallas", or "auto" when the program is lowered for a TPU
    self.fused = attention in ("pallas", "auto") and fused_attention.supported(width, heads)
    lin = lambda: Linear(width, width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                         **inits(rngs, "kernel_init", "bias_init"))
    self.q_proj, self.k_proj, self.v_proj, self.out_proj = lin(), lin(), lin(), lin()

  def __call__(self, x: jax.Array, causal: bool, rows: jax.Array | None = None) -> jax.Array:
    """x [B, L, W] → [B, L, W]; with `rows` int [B], only the output at position rows[b] of each sequence → [B, W]
    (the queries of those positions against every key; under `causal` the keys up to rows[b])."""
    b, l, w = x.shape
    split = lambda t: t.reshape(b, -1, self.heads, w // self.heads)
    k, v = split(self.k_proj(x)), split(self.v_proj(x))
    if rows is not None:  # one query per sequence: explicit whatever the knob (a fused kernel buys nothing at 1 × L)
      q = split(self.q_proj(at_rows(x, rows)[:, None]))  # [B, 1, H, D]
      keep = (jnp.arange(l)[None, :] <= rows[:, None]) if causal else jnp.ones((b, l), bool)  # [B, L]
      return self.out_proj(self._explicit(q, k, v, keep[:, None, None, :]).reshape(b, w))
    q = split(self.q_proj(x))
    if self.fused:
      return self.out_proj(_fused_or_xla(q, k, v, causal, self.implementation).reshape(b, l, w))
    if self.implementation is not None:  # [B, L, H, D] is dot_product_attention's layout: no transposes needed
      out = jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=self.implementation)
      return self.out_proj(out.reshape(b, l, w))
    keep = jnp.tril(jnp.ones((l, l), bool)) if causal else None
    return self.out_proj(self._explicit(q, k, v, keep).reshape(b, l, w))

  @staticmethod
  def _explicit(q, k, v, keep):
    """q [B, Q, H, D], k/v [B, L, H, D], keep bool broadcastable to [B, H, Q, L] or None → [B, Q, H, D]."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(q.shape[-1])
    if keep is not None:
      scores = jnp.where(keep, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)  # softmax in fp32 whatever the compute dtype
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def at_rows(x: jax.Array, rows: jax.Array) -> jax.Array:
  """x [B, L, W], rows int [B] → [B, W], x[b, rows[b]] (a gather batched over B, which sharding keeps per device)."""
  return jnp.take_along_axis(x, rows[:, None, None], axis=1)[:, 0]


class MLP(nnx.Module):
  def __init__(self, width: int, hidden: int, act: str, dt: DTypes, *, rngs: nnx.Rngs):
    self.act = act
    init = inits(rngs, "kernel_init", "bias_init")
    self.fc1 = Linear(width, hidden, dtype=dt.compute, param_dtype=dt.param, rngs=rngs, **init)
    self.fc2 = Linear(hidden, width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs, **init)

  def __call__(self, x):
    return self.fc2(activation(self.act, self.fc1(x)))


class LayerNorm(nnx.LayerNorm):
  """nnx.LayerNorm computed in fp32 — statistics, scale and bias, so their gradients are fp32 sums — with its output
  in `out_dtype` (the tower's compute dtype; with fp32 compute, exactly nnx.LayerNorm)."""
  def __init__(self, width: int, eps: float, dt: DTypes, *, rngs: nnx.Rngs, **kw):
    super().__init__(width, epsilon=eps, dtype=jnp.float32, param_dtype=dt.param, rngs=rngs, **kw)
    self.out_dtype = dt.compute

  def __call__(self, x, *args, **kwargs):
    return super().__call__(x, *args, **kwargs).astype(self.out_dtype)


def layer_norm(width: int, eps: float, dt: DTypes, rngs: nnx.Rngs) -> LayerNorm:
  return LayerNorm(width, eps, dt, rngs=rngs, **inits(rngs, "scale_init", "bias_init"))


class EncoderLayer(nnx.Module):
  """Pre-LN block: x + attn(LN(x)); x + mlp(LN(x)). `cfg`: a tower's config (width, heads, mlp_dim, act, eps)."""
  def __init__(self, cfg, dt: DTypes, *, rngs: nnx.Rngs, attention: str = "explicit"):
    self.layer_norm1 = layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.self_attn = Attention(cfg.width, cfg.heads, dt, rngs=rngs, attention=attention)
    self.layer_norm2 = layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.mlp = MLP(cfg.width, cfg.mlp_dim, cfg.act, dt, rngs=rngs)

  def __call__(self, x, causal: bool, rows: jax.Array | None = None):
    """x [B, L, W] → [B, L, W]; with `rows` int [B], only the output at position rows[b] → [B, W]."""
    h = self.self_attn(self.layer_norm1(x), causal, rows)
    x = x + h if rows is None else at_rows(x, rows) + h
    return x + self.mlp(self.layer_norm2(x))


class Encoder(nnx.Module):
  """`remat` (bool) rematerialises each block in the backward pass under `remat_policy` (REMAT_POLICIES); `scan`
  (bool) runs the blocks before the last as one `jax.lax.scan` over their stacked parameters."""
  def __init__(self, cfg, dt: DTypes, *, rngs: nnx.Rngs, remat: bool = False, attention: str = "explicit",
               remat_policy: str = "full", scan: bool = False):
    self.layers = nnx.List([EncoderLayer(cfg, dt, rngs=rngs, attention=attention) for _ in range(cfg.layers)])
    self.policy = remat_policy_fn(remat_policy)  # validates the name even when remat is off
    self.remat = remat and remat_policy != "none"
    self.scan = scan

  def __call__(self, x, causal: bool, rows: jax.Array | None = None):
    """x [B, L, W] → [B, L, W]; with `rows` int [B] → [B, W], the last block's output at those positions only.

    `rows` is for a tower whose output is read at one position per sequence (the pooled token, METHODS §4): no
    later block reads the last block's other positions, so computing its queries, attention output and MLP at
    one position instead of L is exact and saves ~10/12 of the last block's matmuls (docs/performance.md).
    """
    *body, last = self.layers
    if self.scan and len(body) > 1:
      x = self._scanned(body, x, causal)
    else:
      for layer in body:
        x = self._block(layer, x, causal, None)
    return self._block(last, x, causal, rows)

  def _block(self, layer: EncoderLayer, x, causal: bool, rows):
    # Rematerialisation trades a second forward per block for not storing its activations (training only).
    if self.remat:
      return nnx.remat(lambda m, h, r: m(h, causal, r), policy=self.policy)(layer, x, rows)
    return layer(x, causal, rows)

  def _scanned(self, layers: list[EncoderLayer], x, causal: bool):
    """The blocks `layers` as one scan step each over their parameters stacked [n, …]: the same function (each
    step is a block), compiled once instead of n times. The layers keep their own parameters (checkpoints and
    weight maps see no difference); the stack is a copy made inside the step, and its gradient flows back to them.
    Under `remat` each step is rematerialised: the backward pass is a loop too, so at most one block's activations
    are recomputed at a time (an unrolled stack of remat blocks leaves XLA free to schedule every recomputation at
    once)."""
    graphdef, state = nnx.split(layers[0])
    leaves, treedef = jax.tree.flatten(state)
    # plain arrays through the scan (and jax.checkpoint): the Variables are rebuilt inside each step
    stacked = [jnp.stack(xs) for xs in zip(*(jax.tree.leaves(nnx.state(layer)) for layer in layers))]
    assert len(stacked) == len(leaves)

    def step(h, arrays):
      return nnx.merge(graphdef, jax.tree.unflatten(treedef, arrays))(h, causal), None

    if self.remat:
      step = jax.checkpoint(step, policy=self.policy)
    return jax.lax.scan(step, x, stacked)[0]


class Embeddings(nnx.Module):
  """A namespace holding a tower's embedding parameters, so their paths read like HF's (`….embeddings.…`)."""
