"""Flax NNX CLIP: text tower, vision tower and the two-tower model (METHODS §4).

Module and parameter names mirror transformers' `CLIPModel` (`text_model.encoder.layers.3.self_attn.q_proj.kernel`,
`vision_model.pre_layrnorm.scale`, …) so that the weight maps in `compclip_jax.weights` are plain renames; leaves use
Flax's spelling (`scale`, `embedding`, `kernel`); dense kernels are in torch's layout [out, in]
(compclip_jax/models/layers.py), the patch conv's in Flax's HWIO.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from compclip_jax.models.clip_config import CLIPConfig, TextConfig, VisionConfig
from compclip_jax.models.layers import Linear


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


def _inits(rngs, *names: str, **given) -> dict:
  """The initializer keywords to pass to an nnx layer: `given` (else the layer's defaults) for real `rngs`, shape-only
  ones for `ShapeOnlyRngs`."""
  return {n: _shape_only_init for n in names} if isinstance(rngs, ShapeOnlyRngs) else given


# `attention` knob (model.attention): "explicit" is the formulation the parity tests pin (einsum, fp32 softmax, mask by
# jnp.where); the others call `jax.nn.dot_product_attention`, whose XLA path computes the same thing (fp32 logits and
# softmax) and whose cuDNN path is a fused flash-attention kernel (GPU, bf16/fp16 only). "auto": cuDNN where it
# applies, XLA otherwise.
ATTENTION = ("explicit", "xla", "cudnn", "auto")
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
  return name


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
    lin = lambda: Linear(width, width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                         **_inits(rngs, "kernel_init", "bias_init"))
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
    init = _inits(rngs, "kernel_init", "bias_init")
    self.fc1 = Linear(width, hidden, dtype=dt.compute, param_dtype=dt.param, rngs=rngs, **init)
    self.fc2 = Linear(hidden, width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs, **init)

  def __call__(self, x):
    return self.fc2(activation(self.act, self.fc1(x)))


def _layer_norm(width: int, eps: float, dt: DTypes, rngs: nnx.Rngs) -> nnx.LayerNorm:
  return nnx.LayerNorm(width, epsilon=eps, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                       **_inits(rngs, "scale_init", "bias_init"))


class EncoderLayer(nnx.Module):
  """Pre-LN block: x + attn(LN(x)); x + mlp(LN(x))."""
  def __init__(self, cfg: TextConfig | VisionConfig, dt: DTypes, *, rngs: nnx.Rngs, attention: str = "explicit"):
    self.layer_norm1 = _layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.self_attn = Attention(cfg.width, cfg.heads, dt, rngs=rngs, attention=attention)
    self.layer_norm2 = _layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.mlp = MLP(cfg.width, cfg.mlp_dim, cfg.act, dt, rngs=rngs)

  def __call__(self, x, causal: bool, rows: jax.Array | None = None):
    """x [B, L, W] → [B, L, W]; with `rows` int [B], only the output at position rows[b] → [B, W]."""
    h = self.self_attn(self.layer_norm1(x), causal, rows)
    x = x + h if rows is None else at_rows(x, rows) + h
    return x + self.mlp(self.layer_norm2(x))


class Encoder(nnx.Module):
  """`remat` (bool) rematerialises each block in the backward pass under `remat_policy` (REMAT_POLICIES); `scan`
  (bool) runs the blocks before the last as one `jax.lax.scan` over their stacked parameters."""
  def __init__(self, cfg: TextConfig | VisionConfig, dt: DTypes, *, rngs: nnx.Rngs, remat: bool = False,
               attention: str = "explicit", remat_policy: str = "full", scan: bool = False):
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


class TextTransformer(nnx.Module):
  """Token + position embeddings, causal encoder, final LN, EOT pooling (METHODS §4)."""
  def __init__(self, cfg: TextConfig, dt: DTypes = DTypes(), *, rngs: nnx.Rngs, remat: bool = False,
               attention: str = "explicit", remat_policy: str = "full", scan: bool = False):
    self.cfg, self.dt = cfg, dt
    self.embeddings = Embeddings()
    self.embeddings.token_embedding = nnx.Embed(
        cfg.vocab_size, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **_inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.02)))
    self.embeddings.position_embedding = nnx.Embed(
        cfg.context_length, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **_inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.01)))
    self.encoder = Encoder(cfg, dt, rngs=rngs, remat=remat, attention=attention, remat_policy=remat_policy, scan=scan)
    self.final_layer_norm = _layer_norm(cfg.width, cfg.eps, dt, rngs)

  def __call__(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] (L ≤ context_length) → pooled [B, W]: the final-LN hidden state at EOT. The last block runs
    at the EOT position only (Encoder's `rows`): `hidden_states(ids)[b, eot[b]]` to fp32 rounding (≤ 1e-6, tested)."""
    return self.final_layer_norm(self.encoder(self._embed(ids), causal=True, rows=eot_positions(ids, self.cfg)))

  def hidden_states(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] → hidden [B, L, W] after the final LN, every position (HF's `last_hidden_state`)."""
    return self.final_layer_norm(self.encoder(self._embed(ids), causal=True))

  def _embed(self, ids: jax.Array) -> jax.Array:
    e = self.embeddings
    return e.token_embedding(ids) + e.position_embedding.embedding[:ids.shape[1]].astype(self.dt.compute)


def eot_positions(ids: jax.Array, cfg: TextConfig) -> jax.Array:
  """[B] index of the pooled token: argmax(ids) under the legacy rule, else the first eos_token_id."""
  if cfg.pools_at_argmax:
    return jnp.argmax(ids, axis=-1)
  return jnp.argmax(ids == cfg.eos_token_id, axis=-1)


class VisionTransformer(nnx.Module):
  """Patch conv (no bias) + class token + positions, pre-LN, encoder, post-LN on the class token."""
  def __init__(self, cfg: VisionConfig, dt: DTypes = DTypes(), *, rngs: nnx.Rngs, remat: bool = False,
               attention: str = "explicit", remat_policy: str = "full", scan: bool = False):
    self.cfg, self.dt = cfg, dt
    self.embeddings = Embeddings()
    init = _inits(rngs, "init", init=nnx.initializers.normal(cfg.width ** -0.5))["init"]
    self.embeddings.class_embedding = nnx.Param(init(rngs.params(), (cfg.width,), dt.param))
    self.embeddings.patch_embedding = nnx.Conv(3, cfg.width, kernel_size=(cfg.patch_size,) * 2,
                                               strides=(cfg.patch_size,) * 2, padding="VALID", use_bias=False,
                                               dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                                               **_inits(rngs, "kernel_init"))
    self.embeddings.position_embedding = nnx.Embed(
        cfg.num_patches + 1, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **_inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.02)))
    self.pre_layrnorm = _layer_norm(cfg.width, cfg.eps, dt, rngs)  # sic: HF's spelling
    self.encoder = Encoder(cfg, dt, rngs=rngs, remat=remat, attention=attention, remat_policy=remat_policy, scan=scan)
    self.post_layernorm = _layer_norm(cfg.width, cfg.eps, dt, rngs)

  def __call__(self, pixels: jax.Array) -> jax.Array:
    """pixels [B, H, W, 3] (normalised, H = W = image_size) → pooled [B, width]."""
    x = self.embed(pixels)
    # Only the class token is read: the last block runs at position 0 only (Encoder's `rows`; exact).
    return self.post_layernorm(self.encoder(x, causal=False, rows=jnp.zeros(x.shape[0], int)))

  def embed(self, pixels: jax.Array) -> jax.Array:
    """pixels [B, H, W, 3] → the encoder's input [B, 1 + patches, width]: class token + patches, positions, pre-LN."""
    e = self.embeddings
    x = e.patch_embedding(pixels.astype(self.dt.compute))
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    cls = jnp.broadcast_to(e.class_embedding[...].astype(x.dtype), (x.shape[0], 1, x.shape[-1]))
    return self.pre_layrnorm(jnp.concatenate([cls, x], axis=1) + e.position_embedding.embedding[...].astype(x.dtype))


def l2_normalize(x: jax.Array) -> jax.Array:
  """x [..., D] → fp32 x / ‖x‖ over the last axis (every embedding that is compared: encode_*, the losses)."""
  x = x.astype(jnp.float32)
  return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


class CLIP(nnx.Module):
  """The two-tower model. `logit_scale` is stored as a log (METHODS §4).

  Precision (docs/performance.md): each tower has its own DTypes, storage (`param`) and `compute`; parameters that
  are trained stay fp32 (`param`), so gradients and AdamW moments are fp32 whatever the compute dtype; embeddings
  leave the towers through `l2_normalize` in fp32, so logits and losses are fp32. `attention` (ATTENTION) and
  `remat_policy` (REMAT_POLICIES, used with `remat_text` / `remat_vision`) and `scan_layers` (both towers' blocks as
  a scan) change speed, memory and compile time, not the function computed. `remat_vision` matters only where the
  vision tower trains (READ): a frozen tower has no backward pass to recompute for.
  """
  def __init__(self, cfg: CLIPConfig, *, rngs: nnx.Rngs, text_dtypes: DTypes = DTypes(),
               vision_dtypes: DTypes = DTypes(), remat_text: bool = False, attention: str = "explicit",
               remat_policy: str = "full", scan_layers: bool = False, remat_vision: bool = False):
    self.cfg = cfg
    self.text_model = TextTransformer(cfg.text, text_dtypes, rngs=rngs, remat=remat_text, attention=attention,
                                      remat_policy=remat_policy, scan=scan_layers)
    self.vision_model = VisionTransformer(cfg.vision, vision_dtypes, rngs=rngs, remat=remat_vision, attention=attention,
                                          remat_policy=remat_policy, scan=scan_layers)
    init = _inits(rngs, "kernel_init")
    self.text_projection = Linear(cfg.text.width, cfg.embed_dim, use_bias=False, dtype=text_dtypes.compute,
                                  param_dtype=text_dtypes.param, rngs=rngs, **init)
    self.visual_projection = Linear(cfg.vision.width, cfg.embed_dim, use_bias=False, dtype=vision_dtypes.compute,
                                    param_dtype=vision_dtypes.param, rngs=rngs, **init)
    scale = _inits(rngs, "init", init=lambda _k, s, d: jnp.asarray(cfg.logit_scale_init, d))["init"]
    self.logit_scale = nnx.Param(scale(None, (), jnp.float32))

  def encode_text(self, ids, normalize: bool = False) -> jax.Array:
    """ids int [N, L] → [N, embed_dim] (fp32 when normalised)."""
    x = self.text_projection(self.text_model(jnp.asarray(ids)))
    return l2_normalize(x) if normalize else x

  def pooled_text(self, ids) -> jax.Array:
    """ids int [N, L] → the EOT token's state after the final LN, before `text_projection` [N, width]."""
    return self.text_model(jnp.asarray(ids))

  def project_text(self, pooled: jax.Array) -> jax.Array:
    """[N, width] from `pooled_text` → the text embedding [N, embed_dim], not normalised."""
    return self.text_projection(pooled)

  def logit_bias_value(self) -> None:
    """CLIP's logits have no bias (a softmax family); SigLIP's `logit_bias_value` is b."""
    return None

  def encode_image(self, pixels, normalize: bool = False) -> jax.Array:
    """pixels float [N, H, W, 3] from `preprocess` → [N, embed_dim] (fp32 when normalised)."""
    x = self.visual_projection(self.vision_model(jnp.asarray(pixels)))
    return l2_normalize(x) if normalize else x

  def __call__(self, ids, pixels) -> tuple[jax.Array, jax.Array]:
    """→ (logits_per_image [N_img, N_txt], logits_per_text [N_txt, N_img]), scaled by exp(logit_scale)."""
    img = self.encode_image(pixels, normalize=True)
    txt = self.encode_text(ids, normalize=True)
    logits_per_image = jnp.exp(self.logit_scale[...]) * img @ txt.T
    return logits_per_image, logits_per_image.T


def clip_of(model: nnx.Module) -> CLIP:
  """The two-tower model inside a model (a CLIP or a SigLIP): the model itself, or a wrapper's `.clip` (a method's
  model around it, e.g. READ's)."""
  return model.clip if hasattr(model, "clip") else model
