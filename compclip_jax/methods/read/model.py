"""READ's model (METHODS §2.1): CLIP + a trainable projection W (text width → d_model, no bias) + the frozen T5 v1.1
decoder that reconstructs a caption from W·pooled(text), a length-1 sequence it cross-attends to."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from compclip_jax import assets
from compclip_jax.data.tokenizers import T5Tokenizer
from compclip_jax.errors import UserError
from compclip_jax.methods.base import Extension
from compclip_jax.models.clip import CLIP
from compclip_jax.models.layers import DTypes
from compclip_jax.models.layers import Linear
from compclip_jax.models.t5 import T5Config, T5Decoder
from compclip_jax.weights import loading, params

PROJ_INITS = ("torch_linear", "lecun_normal")


def torch_linear_init(key: jax.Array, shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
  """torch `nn.Linear`'s default weight init, called with the shape [fan_in, fan_out] as every kernel initialiser is
  (compclip_jax/models/layers.py; the kernel itself is stored [out, in]): kaiming_uniform with a = √5, i.e.
  uniform in ±gain·√(3/fan_in) with gain = √(2/(1 + a²)) = √(1/3) → ±1/√fan_in (std 1/√(3·fan_in))."""
  bound = 1.0 / math.sqrt(shape[0])
  return jax.random.uniform(key, shape, dtype, -bound, bound)


def proj_init(name: str):
  """The initialiser of W (`read.proj_init`, METHODS §2.1): "torch_linear" (the reference's nn.Linear
  default) or "lecun_normal" (truncated normal, std 1/√fan_in: the old default)."""
  if name == "torch_linear":
    return torch_linear_init
  if name == "lecun_normal":
    return nnx.initializers.lecun_normal()
  raise ValueError(f"read.proj_init {name!r}: use one of {PROJ_INITS}")


class READModel(nnx.Module):
  def __init__(self, clip: CLIP, t5_cfg: T5Config, *, rngs: nnx.Rngs, t5_dtypes: DTypes = DTypes(),
               decoder: T5Decoder | None = None, t5_attention: str = "explicit", t5_remat: bool = False,
               t5_remat_policy: str = "full"):
    self.clip = clip
    self.proj = Linear(clip.cfg.text.width, t5_cfg.d_model, use_bias=False, kernel_init=torch_linear_init,
                       rngs=rngs)  # training sets W itself (`extend_model`, `read.proj_init`)
    if decoder is None:
      decoder = T5Decoder(t5_cfg, t5_dtypes, rngs=rngs, attention=t5_attention, remat=t5_remat,
                          remat_policy=t5_remat_policy)
    self.decoder = decoder

  def reconstruct(self, pooled: jax.Array, decoder_input_ids: jax.Array,
                  dropout_rng: jax.Array | None = None) -> jax.Array:
    """pooled [B, width] (EOT hidden state after the final LN, before text_projection, not normalised) →
    decoder logits [B, T, vocab]."""
    return self.decoder(decoder_input_ids, self.proj(pooled)[:, None, :], dropout_rng)


def _decoder(c: ml_collections.ConfigDict, dt: DTypes, shapes_only: bool) -> tuple[T5Config, dict | None, T5Tokenizer]:
  """(config, flat parameters, tokenizer) of the frozen decoder: read.t5.init's checkpoint, or a random one;
  `shapes_only`: no parameters (None), the checkpoint's config alone is read."""
  t5 = c.read.t5
  if t5.init:
    if shapes_only:
      (cfg, tok), flat = loading.load_t5_decoder_meta(t5.init, t5.tokenizer or None), None
    else:
      cfg, flat, tok = loading.load_t5_decoder_params(t5.init, dt, t5.tokenizer or None)
    if tok is None:
      raise UserError(f"{t5.init} has no spiece.model: copy the checkpoint's tokenizer there or set read.t5.tokenizer")
  else:  # read.t5.random: a tiny random decoder; its tokenizer is data-independent (default: the bundled model)
    tok = T5Tokenizer(t5.tokenizer or assets.SYNTHETIC_SPIECE)
    cfg = T5Config.v1_1(t5.random_d_model, t5.random_layers, max(int(tok.sp.get_piece_size()), t5.random_vocab))
    flat = None if shapes_only else params.flat_params(T5Decoder(cfg, dt, rngs=nnx.Rngs(c.seed + 1)))
  if tok.sp.get_piece_size() > cfg.vocab_size:
    raise UserError(f"the T5 tokenizer has {tok.sp.get_piece_size()} pieces but the decoder's vocabulary is "
                    f"{cfg.vocab_size}: read.t5.init's spiece.model and config.json do not belong together")
  return cfg, flat, tok


def extend_model(c: ml_collections.ConfigDict, clip_cfg, clip_flat: dict, make_clip,
                 shapes_only: bool = False) -> Extension:
  """CLIP + W + the frozen T5 v1.1 decoder (`Method.extend_model`): parameters `clip.*`, `proj.kernel`, `decoder.*`.
  The decoder computes in `model.compute_dtype`; `model.remat_text` / `remat_policy` rematerialise its blocks too
  (the text side: the decoder's backward pass carries the reconstruction loss's gradient to W and CLIP).
  `shapes_only` (train/state.build_model): `flat` holds the parameters' ShapeDtypeStructs, nothing read or drawn."""
  dt = DTypes(compute=c.model.compute_dtype)
  t5_cfg, t5_flat, t5_tok = _decoder(c, dt, shapes_only)
  abstract = params.abstract(
      lambda rngs: READModel(make_clip(clip_cfg, rngs), t5_cfg, rngs=rngs, t5_dtypes=dt, t5_attention=c.model.attention,
                             t5_remat=c.model.remat_text, t5_remat_policy=c.model.remat_policy))
  if shapes_only:
    return Extension(abstract, params.param_structs(abstract), t5_tok, t5_cfg)
  # drawn as [in, out], as every kernel initialiser is called; stored [out, in] (models/layers.py)
  w = proj_init(c.read.proj_init)(jax.random.PRNGKey(c.seed + 2), (clip_cfg.text.width, t5_cfg.d_model))
  flat = {
      **{f"clip.{k}": v for k, v in clip_flat.items()},
      **{f"decoder.{k}": v for k, v in t5_flat.items()}, "proj.kernel": np.asarray(w).T
  }
  return Extension(abstract, flat, t5_tok, t5_cfg)
