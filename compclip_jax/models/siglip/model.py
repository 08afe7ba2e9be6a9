"""Flax NNX SigLIP / SigLIP 2 (fixed resolution): the two towers and the two-tower model with its sigmoid logits.

Module and parameter names mirror transformers' `SiglipModel` (`vision_model.head.attention.in_proj_weight`,
`text_model.head.kernel`, …), so the HF map is the CLIP one (`weights.maps.hf_rules`: leaf renames, the patch conv's
layout); dense kernels are [out, in] (models/layers.py). The encoder blocks are CLIP's (pre-LN, q/k/v/out with bias),
run without a causal mask, with SigLIP's activation (`gelu_pytorch_tanh`) and ε = 1e-6 from the config.

What differs from CLIP (docs/siglip.md): the vision tower has a patch conv *with* bias, positions for the patches only,
no class token and no pre-LayerNorm, and pools with a multi-head attention head (a learned probe attends to every
patch, then LN + MLP with a residual) — no projection after it; the text tower is not causal and pools at the **last
position** (`[:, -1]`, which may be padding: SigLIP pads with its EOS id and is trained without a mask), then a dense
head with bias. Logits: t̂ · îᵀ · exp(logit_scale) + logit_bias.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from compclip_jax.errors import InputError
from compclip_jax.models.clip import l2_normalize
from compclip_jax.models.layers import DTypes, Embeddings, Encoder, MLP, inits, layer_norm
from compclip_jax.models.layers import Linear
from compclip_jax.models.siglip.config import SiglipConfig, TextConfig, VisionConfig


class TextTransformer(nnx.Module):
  """Token + position embeddings, bidirectional encoder, final LN, the last position's state through `head`."""
  def __init__(self, cfg: TextConfig, dt: DTypes = DTypes(), *, rngs: nnx.Rngs, remat: bool = False,
               attention: str = "explicit", remat_policy: str = "full", scan: bool = False):
    self.cfg, self.dt = cfg, dt
    self.embeddings = Embeddings()
    self.embeddings.token_embedding = nnx.Embed(
        cfg.vocab_size, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.02)))
    self.embeddings.position_embedding = nnx.Embed(
        cfg.context_length, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.02)))
    self.encoder = Encoder(cfg, dt, rngs=rngs, remat=remat, attention=attention, remat_policy=remat_policy, scan=scan)
    self.final_layer_norm = layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.head = Linear(cfg.width, cfg.projection_size, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                       **inits(rngs, "kernel_init", "bias_init"))

  def __call__(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] (L ≤ context_length; SigLIP is trained on L = 64, padded) → [B, projection_size].

    Only the last position is read, so the last block runs there only (the encoder's `rows`): exact, as the query of
    that position attends to every key with no mask."""
    return self.head(self.pooled(ids))

  def pooled(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] → the last position's state after the final LN, before `head` [B, width] (HF's
    `pooler_output` before the head: what READ's decoder reads)."""
    x = self._embed(ids)
    last = jnp.full((x.shape[0],), x.shape[1] - 1)
    return self.final_layer_norm(self.encoder(x, causal=False, rows=last))

  def hidden_states(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] → [B, L, W] after the final LN, every position (HF's `last_hidden_state`)."""
    return self.final_layer_norm(self.encoder(self._embed(ids), causal=False))

  def _embed(self, ids: jax.Array) -> jax.Array:
    """As CLIP's text tower's: looked up and summed in the tables' dtype, then cast to the compute dtype."""
    e = self.embeddings
    x = jnp.take(e.token_embedding.embedding[...], ids, axis=0) + e.position_embedding.embedding[:ids.shape[1]]
    return x.astype(self.dt.compute)


class PoolingAttention(nnx.Module):
  """`torch.nn.MultiheadAttention` as SigLIP's head uses it: one fused [q; k; v] projection `in_proj_weight`
  [3W, W] + `in_proj_bias` [3W] (torch's names, so the HF map is a copy) and `out_proj`."""
  def __init__(self, width: int, heads: int, dt: DTypes, *, rngs: nnx.Rngs):
    self.heads, self.dt = heads, dt
    draw = inits(rngs, "init", init=nnx.initializers.lecun_normal())["init"]
    zeros = inits(rngs, "init", init=nnx.initializers.zeros_init())["init"]
    self.in_proj_weight = nnx.Param(draw(rngs.params(), (3 * width, width), dt.param))
    self.in_proj_bias = nnx.Param(zeros(rngs.params(), (3 * width,), dt.param))
    self.out_proj = Linear(width, width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                           **inits(rngs, "kernel_init", "bias_init"))

  def __call__(self, query: jax.Array, x: jax.Array) -> jax.Array:
    """query [B, Q, W] attends to x [B, L, W] → [B, Q, W] (no mask; softmax in fp32)."""
    w = x.shape[-1]
    weight = self.in_proj_weight[...].astype(self.dt.compute)
    bias = self.in_proj_bias[...].astype(self.dt.compute)
    proj = lambda t, k: t.astype(self.dt.compute) @ weight[k * w:(k + 1) * w].T + bias[k * w:(k + 1) * w]
    split = lambda t: t.reshape(t.shape[0], t.shape[1], self.heads, w // self.heads)
    q, k, v = split(proj(query, 0)), split(proj(x, 1)), split(proj(x, 2))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(q.shape[-1])
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(query.shape[0], query.shape[1], w)
    return self.out_proj(out)


class PoolingHead(nnx.Module):
  """SigLIP's multi-head attention pooling: h = attn(probe, x); h + mlp(LN(h)); → h[:, 0]."""
  def __init__(self, cfg: VisionConfig, dt: DTypes, *, rngs: nnx.Rngs):
    init = inits(rngs, "init", init=nnx.initializers.normal(1.0))["init"]  # torch.randn
    self.probe = nnx.Param(init(rngs.params(), (1, 1, cfg.width), dt.param))
    self.attention = PoolingAttention(cfg.width, cfg.heads, dt, rngs=rngs)
    self.layernorm = layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.mlp = MLP(cfg.width, cfg.mlp_dim, cfg.act, dt, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    """x [B, L, W] → [B, W]."""
    probe = jnp.broadcast_to(self.probe[...], (x.shape[0], 1, x.shape[-1]))
    h = self.attention(probe, x)
    return (h + self.mlp(self.layernorm(h)))[:, 0]


class VisionTransformer(nnx.Module):
  """Patch conv (with bias) + patch positions, encoder, post-LN, attention-pooling head."""
  def __init__(self, cfg: VisionConfig, dt: DTypes = DTypes(), *, rngs: nnx.Rngs, remat: bool = False,
               attention: str = "explicit", remat_policy: str = "full", scan: bool = False):
    self.cfg, self.dt = cfg, dt
    self.embeddings = Embeddings()
    self.embeddings.patch_embedding = nnx.Conv(3, cfg.width, kernel_size=(cfg.patch_size,) * 2,
                                               strides=(cfg.patch_size,) * 2, padding="VALID", use_bias=True,
                                               dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                                               **inits(rngs, "kernel_init", "bias_init"))
    self.embeddings.position_embedding = nnx.Embed(
        cfg.num_patches, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(cfg.width ** -0.5)))
    self.encoder = Encoder(cfg, dt, rngs=rngs, remat=remat, attention=attention, remat_policy=remat_policy, scan=scan)
    self.post_layernorm = layer_norm(cfg.width, cfg.eps, dt, rngs)
    self.head = PoolingHead(cfg, dt, rngs=rngs) if cfg.use_head else nnx.data(None)

  def __call__(self, pixels: jax.Array) -> jax.Array:
    """pixels [B, H, W, 3] (normalised, H = W = image_size) → pooled [B, width] (the head's output; without a head,
    the mean of the patches, as HF's pooler would be absent)."""
    x = self.post_layernorm(self.encoder(self.embed(pixels), causal=False))
    return self.head(x) if self.head is not None else x.mean(axis=1)

  def embed(self, pixels: jax.Array) -> jax.Array:
    """pixels [B, H, W, 3] → the encoder's input [B, patches, width]: patches + their positions."""
    e = self.embeddings
    x = e.patch_embedding(pixels.astype(self.dt.compute))
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    pos = e.position_embedding.embedding[...]
    return (x.astype(pos.dtype) + pos).astype(self.dt.compute)  # added in the table's dtype, as CLIP's


class SigLIP(nnx.Module):
  """The two-tower model; `logit_scale` (a log) and `logit_bias` of shape [1], as HF stores them. Precision knobs as
  `models.clip.CLIP`: each tower has its DTypes, embeddings leave `encode_*` normalised in fp32."""
  def __init__(self, cfg: SiglipConfig, *, rngs: nnx.Rngs, text_dtypes: DTypes = DTypes(),
               vision_dtypes: DTypes = DTypes(), remat_text: bool = False, attention: str = "explicit",
               remat_policy: str = "full", scan_layers: bool = False, remat_vision: bool = False,
               pad_tokens_to: int = 1):
    del pad_tokens_to  # CLIP's causal text tower only: SigLIP's attends both ways and pools the last position
    self.cfg = cfg
    self.text_model = TextTransformer(cfg.text, text_dtypes, rngs=rngs, remat=remat_text, attention=attention,
                                      remat_policy=remat_policy, scan=scan_layers)
    self.vision_model = VisionTransformer(cfg.vision, vision_dtypes, rngs=rngs, remat=remat_vision, attention=attention,
                                          remat_policy=remat_policy, scan=scan_layers)
    const = lambda v: inits(rngs, "init", init=lambda _k, s, d: jnp.full(s, v, d))["init"]
    self.logit_scale = nnx.Param(const(cfg.logit_scale_init)(None, (1,), jnp.float32))
    self.logit_bias = nnx.Param(const(cfg.logit_bias_init)(None, (1,), jnp.float32))

  def encode_text(self, ids, normalize: bool = False, attention_mask=None) -> jax.Array:
    """ids int [N, L] → [N, projection_size] (fp32 when normalised). `attention_mask` is refused: SigLIP was trained
    without one (padding is its EOS id and the last position is pooled), so masking changes what it computes —
    transformers 5's tokenizer returns one; pass the ids alone."""
    if attention_mask is not None:
      raise InputError("SigLIP's text tower takes no attention_mask: it was trained on ids padded with EOS and no "
                       "mask (pass input_ids alone; SiglipTokenizer gives the padded ids)")
    x = self.text_model(jnp.asarray(ids))
    return l2_normalize(x) if normalize else x

  def pooled_text(self, ids) -> jax.Array:
    """ids int [N, L] → the text tower's pooled state before its head [N, width] (`project_text` finishes it)."""
    return self.text_model.pooled(jnp.asarray(ids))

  def project_text(self, pooled: jax.Array) -> jax.Array:
    """[N, width] from `pooled_text` → the text embedding [N, projection_size], not normalised."""
    return self.text_model.head(pooled)

  def logit_bias_value(self) -> jax.Array:
    """b, fp32 [] (SigLIP's logits are t̂ · îᵀ · exp(t') + b)."""
    return self.logit_bias[...].astype(jnp.float32).reshape(())

  def encode_image(self, pixels, normalize: bool = False) -> jax.Array:
    """pixels float [N, H, W, 3] → [N, width] (fp32 when normalised)."""
    x = self.vision_model(jnp.asarray(pixels))
    return l2_normalize(x) if normalize else x

  def __call__(self, ids, pixels) -> tuple[jax.Array, jax.Array]:
    """→ (logits_per_image [N_img, N_txt], logits_per_text [N_txt, N_img]): t̂ · îᵀ · exp(t') + b."""
    img = self.encode_image(pixels, normalize=True)
    txt = self.encode_text(ids, normalize=True)
    logits_per_text = txt @ img.T * jnp.exp(self.logit_scale[...][0]) + self.logit_bias[...][0]
    return logits_per_text.T, logits_per_text
