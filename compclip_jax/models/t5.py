"""Flax NNX T5 v1.1 decoder (METHODS §2.1, §4): the frozen text decoder READ reconstructs captions with.

Only what READ runs exists here: shared embedding, decoder blocks (causal self-attention with a relative position
bias computed in block 0 and shared by all blocks, cross-attention without a bias, gated-GELU FFN), the final
RMSNorm and an untied `lm_head`. Names mirror transformers' `T5ForConditionalGeneration`
(`decoder.block.0.layer.0.SelfAttention.relative_attention_bias`), leaves use Flax's spelling.
Dropout runs only when a `dropout_rng` is passed.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from compclip_jax.models.layers import DTypes, attention_implementation, check_attention, remat_policy_fn
from compclip_jax.models.layers import Linear


@dataclasses.dataclass(frozen=True)
class T5Config:
  vocab_size: int = 32128
  d_model: int = 1024
  d_kv: int = 64
  d_ff: int = 2816
  num_decoder_layers: int = 24
  num_heads: int = 16
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  dropout_rate: float = 0.1
  layer_norm_epsilon: float = 1e-6
  decoder_start_token_id: int = 0
  pad_token_id: int = 0
  eos_token_id: int = 1

  @classmethod
  def v1_1(cls, d_model: int, layers: int, vocab: int) -> "T5Config":
    """A decoder in T5 v1.1's proportions (64-wide heads, d_ff = 2.75 d_model: 2816 at large's 1024), e.g. the
    random tiny decoder of `t5.random`."""
    return cls(vocab_size=vocab, d_model=d_model, d_kv=64, d_ff=int(2.75 * d_model), num_decoder_layers=layers,
               num_heads=max(1, d_model // 64))

  @classmethod
  def from_hf_dict(cls, d: Mapping[str, Any]) -> "T5Config":
    """Reads a transformers T5 `config.json`; only v1.1 decoders (gated-GELU, untied lm_head) are supported."""
    if d.get("feed_forward_proj", "gated-gelu") != "gated-gelu":
      raise ValueError(f"T5 feed_forward_proj {d.get('feed_forward_proj')!r}: only v1.1 'gated-gelu' is supported")
    # v1.1 does not rescale the decoder output by d_model^-0.5; original T5 does. transformers 5 records this as
    # `scale_decoder_outputs`; older configs signal v1.1 by `tie_word_embeddings: false`.
    scaled = d.get("scale_decoder_outputs", d.get("tie_word_embeddings", True) is not False)
    if scaled:
      raise ValueError("this T5 config rescales decoder outputs (original T5); READ uses T5 v1.1, which does not "
                       "(config.json: tie_word_embeddings false or scale_decoder_outputs false)")
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in d.items() if k in names and v is not None}
    kw.setdefault("num_decoder_layers", d.get("num_layers", cls.num_decoder_layers))
    return cls(**kw)

  def to_hf_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d.update(model_type="t5", architectures=["T5ForConditionalGeneration"], feed_forward_proj="gated-gelu",
             tie_word_embeddings=False, scale_decoder_outputs=False, num_layers=self.num_decoder_layers,
             is_encoder_decoder=True)
    return d


def relative_position_bucket(relative_position: jax.Array, num_buckets: int, max_distance: int) -> jax.Array:
  """Causal (unidirectional) T5 bucketing of `key_pos - query_pos`: exact below num_buckets/2, log-spaced above."""
  n = jnp.maximum(-relative_position, 0)
  max_exact = num_buckets // 2
  log_ratio = jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / max_exact) / math.log(max_distance / max_exact)
  large = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
  return jnp.where(n < max_exact, n, jnp.minimum(large, num_buckets - 1))


def _dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


class _Keys:
  """Hands out a fresh dropout key per use (or None when dropout is off)."""
  def __init__(self, key: jax.Array | None):
    self.key, self.n = key, 0

  def __call__(self) -> jax.Array | None:
    if self.key is None:
      return None
    self.n += 1
    return jax.random.fold_in(self.key, self.n)


class RMSNorm(nnx.Module):
  """T5LayerNorm: x·rsqrt(mean(x²)+eps)·w, statistics in fp32, no mean subtraction, no bias."""
  def __init__(self, dim: int, eps: float, dt: DTypes):
    self.weight = nnx.Param(jnp.ones((dim,), dt.param))
    self.eps, self.dt = eps, dt

  def __call__(self, x):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (self.weight[...].astype(jnp.float32) * y).astype(self.dt.compute)


class T5Attention(nnx.Module):
  """Attention without 1/√d scaling; block 0's self-attention owns the relative position bias table.

  `attention` (models.layers.ATTENTION): "explicit" is the formulation the parity test pins; the fused ones call
  `jax.nn.dot_product_attention` with scale 1 and the bias. Dropout on the attention probabilities (READ's frozen
  decoder in train mode) is not something the fused kernels do, so with a dropout key the explicit path runs.
  """
  def __init__(self, cfg: T5Config, dt: DTypes, has_relative_bias: bool, *, rngs: nnx.Rngs,
               attention: str = "explicit"):
    self.implementation = attention_implementation(attention, dt.compute)
    inner = cfg.num_heads * cfg.d_kv
    lin = lambda i, o: Linear(i, o, use_bias=False, dtype=dt.compute, param_dtype=dt.param, rngs=rngs)
    self.q, self.k, self.v = lin(cfg.d_model, inner), lin(cfg.d_model, inner), lin(cfg.d_model, inner)
    self.o = lin(inner, cfg.d_model)
    self.cfg = cfg
    if has_relative_bias:
      self.relative_attention_bias = nnx.Embed(cfg.relative_attention_num_buckets, cfg.num_heads, dtype=dt.compute,
                                               param_dtype=dt.param, rngs=rngs)

  def position_bias(self, q_len: int, k_len: int) -> jax.Array:
    """[1, H, q_len, k_len] bias from the bucketed relative positions."""
    rel = jnp.arange(k_len)[None, :] - jnp.arange(q_len)[:, None]
    buckets = relative_position_bucket(rel, self.cfg.relative_attention_num_buckets,
                                       self.cfg.relative_attention_max_distance)
    return self.relative_attention_bias(buckets).transpose(2, 0, 1)[None].astype(jnp.float32)

  def __call__(self, x, kv, bias, keys: _Keys, causal: bool = False):
    """x [B, Lq, D], kv [B, Lk, D], bias [1, H, Lq, Lk] fp32 or None → [B, Lq, D]. With `causal` the bias is the bare
    position bias and the causal mask is applied here; without it the bias carries any mask already."""
    h, d = self.cfg.num_heads, self.cfg.d_kv
    split = lambda t: t.reshape(t.shape[0], t.shape[1], h, d)
    q, k, v = split(self.q(x)), split(self.k(kv)), split(self.v(kv))
    if self.implementation is not None and (keys.key is None or self.cfg.dropout_rate == 0.0):
      out = jax.nn.dot_product_attention(q, k, v, bias=None if bias is None else bias.astype(q.dtype), scale=1.0,
                                         is_causal=causal, implementation=self.implementation)
      return self.o(out.reshape(out.shape[0], out.shape[1], h * d))
    if bias is None:
      bias = jnp.zeros((), jnp.float32)
    if causal:
      lq, lk = x.shape[1], kv.shape[1]
      bias = jnp.where(jnp.tril(jnp.ones((lq, lk), bool)), bias, jnp.finfo(jnp.float32).min)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) + bias
    probs = _dropout(jax.nn.softmax(scores, axis=-1), self.cfg.dropout_rate, keys()).astype(v.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
    return self.o(out.reshape(out.shape[0], out.shape[1], h * d))


class T5LayerSelfAttention(nnx.Module):
  def __init__(self, cfg, dt, has_relative_bias, *, rngs, attention="explicit"):
    self.SelfAttention = T5Attention(cfg, dt, has_relative_bias, rngs=rngs, attention=attention)
    self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon, dt)
    self.rate = cfg.dropout_rate

  def __call__(self, x, bias, keys, causal=False):
    y = self.layer_norm(x)
    return x + _dropout(self.SelfAttention(y, y, bias, keys, causal), self.rate, keys())


class T5LayerCrossAttention(nnx.Module):
  def __init__(self, cfg, dt, *, rngs, attention="explicit"):
    # READ cross-attends to a length-1 sequence: the XLA formulation is all it needs, cuDNN gains nothing there.
    self.EncDecAttention = T5Attention(cfg, dt, False, rngs=rngs, attention="xla" if attention == "auto" else attention)
    self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon, dt)
    self.rate = cfg.dropout_rate

  def __call__(self, x, enc, keys):
    bias = None if self.EncDecAttention.implementation is not None else jnp.zeros((), jnp.float32)
    out = self.EncDecAttention(self.layer_norm(x), enc, bias, keys)
    return x + _dropout(out, self.rate, keys())


class T5DenseGatedActDense(nnx.Module):
  """gelu_tanh(wi_0 x) · wi_1 x → dropout → wo."""
  def __init__(self, cfg, dt, *, rngs):
    lin = lambda i, o: Linear(i, o, use_bias=False, dtype=dt.compute, param_dtype=dt.param, rngs=rngs)
    self.wi_0, self.wi_1, self.wo = lin(cfg.d_model, cfg.d_ff), lin(cfg.d_model, cfg.d_ff), lin(cfg.d_ff, cfg.d_model)
    self.rate = cfg.dropout_rate

  def __call__(self, x, keys):
    h = jax.nn.gelu(self.wi_0(x), approximate=True) * self.wi_1(x)
    return self.wo(_dropout(h, self.rate, keys()))


class T5LayerFF(nnx.Module):
  def __init__(self, cfg, dt, *, rngs):
    self.DenseReluDense = T5DenseGatedActDense(cfg, dt, rngs=rngs)
    self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon, dt)
    self.rate = cfg.dropout_rate

  def __call__(self, x, keys):
    return x + _dropout(self.DenseReluDense(self.layer_norm(x), keys), self.rate, keys())


class T5Block(nnx.Module):
  def __init__(self, cfg, dt, first: bool, *, rngs, attention="explicit"):
    self.layer = nnx.List([
        T5LayerSelfAttention(cfg, dt, first, rngs=rngs, attention=attention),
        T5LayerCrossAttention(cfg, dt, rngs=rngs, attention=attention),
        T5LayerFF(cfg, dt, rngs=rngs)
    ])

  def __call__(self, x, enc, self_bias, keys, causal=False):
    x = self.layer[0](x, self_bias, keys, causal)
    return self.layer[2](self.layer[1](x, enc, keys), keys)


class T5Stack(nnx.Module):
  def __init__(self, cfg, dt, *, rngs, attention="explicit"):
    self.block = nnx.List(
        [T5Block(cfg, dt, i == 0, rngs=rngs, attention=attention) for i in range(cfg.num_decoder_layers)])
    self.final_layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon, dt)


class T5Decoder(nnx.Module):
  """`T5ForConditionalGeneration` minus the encoder; `attention` as T5Attention's. `remat` rematerialises each block
  in the backward pass under `remat_policy` (models/clip.py's REMAT_POLICIES): READ's gradient flows through the
  frozen decoder to W and CLIP, so without it every block's activations are kept (docs/tpu.md)."""
  def __init__(self, cfg: T5Config, dt: DTypes = DTypes(), *, rngs: nnx.Rngs, attention: str = "explicit",
               remat: bool = False, remat_policy: str = "full"):
    self.cfg, self.dt = cfg, dt
    self.attention = check_attention(attention)
    self.policy = remat_policy_fn(remat_policy)
    self.remat = remat and remat_policy != "none"
    self.shared = nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=dt.compute, param_dtype=dt.param,
                            embedding_init=nnx.initializers.normal(1.0), rngs=rngs)
    self.decoder = T5Stack(cfg, dt, rngs=rngs, attention=attention)
    self.lm_head = Linear(cfg.d_model, cfg.vocab_size, use_bias=False, dtype=dt.compute, param_dtype=dt.param,
                          rngs=rngs)

  def __call__(self, decoder_input_ids: jax.Array, encoder_hidden_states: jax.Array,
               dropout_rng: jax.Array | None = None) -> jax.Array:
    """decoder_input_ids int [B, T], encoder_hidden_states [B, S, d_model] (no mask) → logits [B, T, vocab] fp32."""
    keys = _Keys(dropout_rng)
    t = decoder_input_ids.shape[1]
    x = _dropout(self.shared(decoder_input_ids), self.cfg.dropout_rate, keys())
    first_attn = self.decoder.block[0].layer[0].SelfAttention
    fused = self.attention != "explicit"
    if fused:  # the bare position bias; each attention applies the causal mask its own way
      self_bias = first_attn.position_bias(t, t)
    else:
      self_bias = jnp.where(jnp.tril(jnp.ones((t, t), bool)), first_attn.position_bias(t, t),
                            jnp.finfo(jnp.float32).min)
    enc = encoder_hidden_states.astype(self.dt.compute)
    for block in self.decoder.block:
      if self.remat:  # the same dropout keys: `keys` hands them out in the same order while the block is traced
        graphdef, state = nnx.split(block)  # functional: the frozen block's state goes in, nothing is written back
        run = lambda st, h, e, s, g=graphdef: nnx.merge(g, st)(h, e, s, keys, fused)
        x = jax.checkpoint(run, policy=self.policy)(state, x, enc, self_bias)
      else:
        x = block(x, enc, self_bias, keys, fused)
    x = _dropout(self.decoder.final_layer_norm(x), self.cfg.dropout_rate, keys())
    return self.lm_head(x).astype(jnp.float32)


def shift_right(labels: jax.Array, start_token_id: int = 0, pad_token_id: int = 0) -> jax.Array:
  """Decoder inputs from targets [B, T]: prepend the start token, drop the last, -100 (ignored labels) → pad."""
  shifted = jnp.concatenate([jnp.full_like(labels[:, :1], start_token_id), labels[:, :-1]], axis=1)
  return jnp.where(shifted == -100, pad_token_id, shifted)
