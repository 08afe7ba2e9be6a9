"""Flax NNX CLIP: text tower, vision tower and the two-tower model (METHODS §4).

Module and parameter names mirror transformers' `CLIPModel` (`text_model.encoder.layers.3.self_attn.q_proj.kernel`,
`vision_model.pre_layrnorm.scale`, …) so that the weight maps in `compclip_jax.weights` are plain renames; leaves use
Flax's spelling (`scale`, `embedding`, `kernel`); dense kernels are in torch's layout [out, in]
(compclip_jax/models/layers.py), the patch conv's in Flax's HWIO.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from compclip_jax.models.clip_config import CLIPConfig, TextConfig, VisionConfig
from compclip_jax.models.layers import (DTypes, Embeddings, Encoder, inits, layer_norm)
from compclip_jax.models.layers import Linear


class TextTransformer(nnx.Module):
  """Token + position embeddings, causal encoder, final LN, EOT pooling (METHODS §4)."""
  def __init__(self, cfg: TextConfig, dt: DTypes = DTypes(), *, rngs: nnx.Rngs, remat: bool = False,
               attention: str = "explicit", remat_policy: str = "full", scan: bool = False, pad_tokens_to: int = 1):
    self.cfg, self.dt, self.pad_tokens_to = cfg, dt, pad_tokens_to
    self.embeddings = Embeddings()
    self.embeddings.token_embedding = nnx.Embed(
        cfg.vocab_size, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.02)))
    self.embeddings.position_embedding = nnx.Embed(
        cfg.context_length, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.01)))
    self.encoder = Encoder(cfg, dt, rngs=rngs, remat=remat, attention=attention, remat_policy=remat_policy, scan=scan)
    self.final_layer_norm = layer_norm(cfg.width, cfg.eps, dt, rngs)

  def __call__(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] (L ≤ context_length) → pooled [B, W]: the final-LN hidden state at EOT. The last block runs
    at the EOT position only (Encoder's `rows`): `hidden_states(ids)[b, eot[b]]` to fp32 rounding (≤ 1e-6, tested)."""
    eot = eot_positions(ids, self.cfg)
    return self.final_layer_norm(self.encoder(self._embed(self._padded(ids)), causal=True, rows=eot))

  def hidden_states(self, ids: jax.Array) -> jax.Array:
    """ids int [B, L] → hidden [B, L, W] after the final LN, every position (HF's `last_hidden_state`)."""
    hidden = self.final_layer_norm(self.encoder(self._embed(self._padded(ids)), causal=True))
    return hidden[:, :ids.shape[1]]

  def _padded(self, ids: jax.Array) -> jax.Array:
    """ids [B, L] → [B, L'], L rounded up to a multiple of `pad_tokens_to` with token 0 after the text. Exact: under
    the causal mask no position before L sees one after it, and the pooled position is found in the unpadded ids.
    Why (docs/tpu.md, "The token width"): at 77 tokens XLA:TPU lays a projection's [B, 77, W] output out with the
    77 axis outermost and copies it into the row-major layout the attention kernel reads, once per projection and
    pass; at 80 it writes the kernel's layout directly."""
    extra = -ids.shape[1] % self.pad_tokens_to
    return jnp.pad(ids, ((0, 0), (0, extra))) if extra else ids

  def _embed(self, ids: jax.Array) -> jax.Array:
    """ids [B, L] → [B, L, W] in the compute dtype: looked up and summed in the tables' dtype, then cast (so trained
    fp32 tables get fp32 gradients under bf16 compute). Positions past the context length (`_padded`'s) get no
    position embedding."""
    e = self.embeddings
    positions = e.position_embedding.embedding[:ids.shape[1]]
    positions = jnp.pad(positions, ((0, ids.shape[1] - positions.shape[0]), (0, 0)))
    x = jnp.take(e.token_embedding.embedding[...], ids, axis=0) + positions
    return x.astype(self.dt.compute)


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
    init = inits(rngs, "init", init=nnx.initializers.normal(cfg.width ** -0.5))["init"]
    self.embeddings.class_embedding = nnx.Param(init(rngs.params(), (cfg.width,), dt.param))
    self.embeddings.patch_embedding = nnx.Conv(3, cfg.width, kernel_size=(cfg.patch_size,) * 2,
                                               strides=(cfg.patch_size,) * 2, padding="VALID", use_bias=False,
                                               dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
                                               **inits(rngs, "kernel_init"))
    self.embeddings.position_embedding = nnx.Embed(
        cfg.num_patches + 1, cfg.width, dtype=dt.compute, param_dtype=dt.param, rngs=rngs,
        **inits(rngs, "embedding_init", embedding_init=nnx.initializers.normal(0.02)))
    self.pre_layrnorm = layer_norm(cfg.width, cfg.eps, dt, rngs)  # sic: HF's spelling
    self.encoder = Encoder(cfg, dt, rngs=rngs, remat=remat, attention=attention, remat_policy=remat_policy, scan=scan)
    self.post_layernorm = layer_norm(cfg.width, cfg.eps, dt, rngs)

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
    # the class and position embeddings added in their own dtype, then cast (fp32 gradients for trained fp32 ones)
    cls = jnp.broadcast_to(e.class_embedding[...], (x.shape[0], 1, x.shape[-1]))
    x = jnp.concatenate([cls, x.astype(cls.dtype)], axis=1) + e.position_embedding.embedding[...]
    return self.pre_layrnorm(x.astype(self.dt.compute))


def l2_normalize(x: jax.Array) -> jax.Array:
  """x [..., D] → fp32 x / ‖x‖ over the last axis (every embedding that is compared: encode_*, the losses)."""
  x = x.astype(jnp.float32)
  return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


class CLIP(nnx.Module):
  """The two-tower model. `logit_scale` is stored as a log (METHODS §4).

  Precision (docs/performance.md): each tower has its own DTypes, storage (`param`) and `compute`; parameters that
  are trained stay fp32 (`param`), so gradients and AdamW moments are fp32 whatever the compute dtype; embeddings
  leave the towers through `l2_normalize` in fp32, so logits and losses are fp32. `attention` (ATTENTION) and
  `remat_policy` (REMAT_POLICIES, used with `remat_text` / `remat_vision`), `scan_layers` (both towers' blocks as
  a scan) and `pad_tokens_to` (the text tower's token width rounded up to a multiple of it: TextTransformer._padded)
  change speed, memory and compile time, not the function computed. `remat_vision` matters only where the vision
  tower trains (READ): a frozen tower has no backward pass to recompute for.
  """
  def __init__(self, cfg: CLIPConfig, *, rngs: nnx.Rngs, text_dtypes: DTypes = DTypes(),
               vision_dtypes: DTypes = DTypes(), remat_text: bool = False, attention: str = "explicit",
               remat_policy: str = "full", scan_layers: bool = False, remat_vision: bool = False,
               pad_tokens_to: int = 1):
    self.cfg = cfg
    self.text_model = TextTransformer(cfg.text, text_dtypes, rngs=rngs, remat=remat_text, attention=attention,
                                      remat_policy=remat_policy, scan=scan_layers, pad_tokens_to=pad_tokens_to)
    self.vision_model = VisionTransformer(cfg.vision, vision_dtypes, rngs=rngs, remat=remat_vision, attention=attention,
                                          remat_policy=remat_policy, scan=scan_layers)
    init = inits(rngs, "kernel_init")
    self.text_projection = Linear(cfg.text.width, cfg.embed_dim, use_bias=False, dtype=text_dtypes.compute,
                                  param_dtype=text_dtypes.param, rngs=rngs, **init)
    self.visual_projection = Linear(cfg.vision.width, cfg.embed_dim, use_bias=False, dtype=vision_dtypes.compute,
                                    param_dtype=vision_dtypes.param, rngs=rngs, **init)
    scale = inits(rngs, "init", init=lambda _k, s, d: jnp.asarray(cfg.logit_scale_init, d))["init"]
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
