"""Model FLOPs of a training step, counted from the architecture and the batch (no compiler): what MFU divides by, so
that rematerialisation (a block's forward run again in the backward pass) cannot raise it.

A matmul [m, k] @ [k, n] is 2·m·k·n FLOPs. A tower whose weights train costs its forward three times (the forward,
and the backward's two matmuls per weight: the activations' gradient and the weights'); a frozen tower the gradient
flows through to something that trains (a frozen decoder, into its input's projection and the text tower) about
twice (`decoder_input_gradient`); a frozen tower nothing flows back through (a frozen vision tower) once. Counted:
every weight matmul, the attention's scores and weighted sum, the patch embedding, the projections, the decoder's LM
head. Left out, as in PaLM's MFU (Chowdhery et al. 2022, appendix B): elementwise work, softmax, layer norms,
embedding lookups and the losses' logit matrices (the TPU compiler's count of the ViT-B/32 step of a text-side
method without rematerialisation, all of them included, is within 1 % of this one: docs/tpu.md).
"""
from __future__ import annotations

import dataclasses
import math

import jax
from flax import nnx


def encoder(width: int, layers: int, mlp_dim: int, tokens: int, pooled: bool = False) -> float:
  """Forward FLOPs of `layers` pre-LN transformer blocks on one sequence of `tokens`: q, k, v, out projections,
  scores and weighted sum, the two MLP matmuls. `pooled`: the tower reads one position of the last block
  (layers.Encoder's `rows`), whose keys and values still cover every token but whose query, out projection and MLP
  run at that position alone."""
  full = 2 * tokens * (4 * width * width + 2 * width * mlp_dim) + 4 * tokens * tokens * width
  if not pooled:
    return layers * full
  last = 2 * tokens * 2 * width * width + 2 * (2 * width * width + 2 * width * mlp_dim) + 4 * tokens * width
  return (layers - 1) * full + last


def text_forward(text_cfg, embed_dim: int, tokens: int) -> float:
  """One caption of `tokens` through a CLIP or SigLIP text tower (pooled at one token) and its projection."""
  return encoder(text_cfg.width, text_cfg.layers, text_cfg.mlp_dim, tokens, pooled=True) + \
      2 * text_cfg.width * embed_dim


def vision_forward(vision_cfg, embed_dim: int) -> float:
  """One image through a ViT: the patch embedding, the blocks, and its pooling — CLIP's class token (the last block
  at that position alone), or SigLIP's attention-pooling head (keys and values of every patch, one query, its MLP at
  one position) — and CLIP's projection."""
  w, patches = vision_cfg.width, (vision_cfg.image_size // vision_cfg.patch_size) ** 2
  embed = 2 * patches * 3 * vision_cfg.patch_size ** 2 * w
  if getattr(vision_cfg, "use_head", None) is None:  # CLIP: a class token, pooled; a projection
    return embed + encoder(w, vision_cfg.layers, vision_cfg.mlp_dim, patches + 1, pooled=True) + 2 * w * embed_dim
  head = 0
  if vision_cfg.use_head:  # k, v of every patch; the probe's query, out projection and MLP at one position
    head = 2 * patches * 2 * w * w + 2 * (2 * w * w + 2 * w * vision_cfg.mlp_dim) + 4 * patches * w
  return embed + encoder(w, vision_cfg.layers, vision_cfg.mlp_dim, patches) + head


def _decoder_parts(cfg, tokens: int, encoder_tokens: int) -> tuple[float, float, float, float]:
  """(self-attention, cross-attention, gated FF) of one decoder block in T5 v1.1's layout, and the LM head, for one
  target of `tokens`."""
  d, inner, ff = cfg.d_model, cfg.num_heads * cfg.d_kv, cfg.d_ff
  self_attn = 2 * tokens * 4 * d * inner + 4 * tokens * tokens * inner
  cross = 2 * tokens * 2 * d * inner + 2 * encoder_tokens * 2 * d * inner + 4 * tokens * encoder_tokens * inner
  return self_attn, cross, 2 * tokens * 3 * d * ff, 2 * tokens * d * cfg.vocab_size


def decoder_forward(cfg, tokens: int, encoder_tokens: int = 1) -> float:
  """One target of `tokens` through a decoder in T5 v1.1's layout (self-attention, cross-attention to
  `encoder_tokens` projected states, gated FF, LM head)."""
  self_attn, cross, ff, head = _decoder_parts(cfg, tokens, encoder_tokens)
  return cfg.num_decoder_layers * (self_attn + cross + ff) + head


def decoder_input_gradient(cfg, tokens: int, encoder_tokens: int = 1) -> float:
  """The backward pass of a frozen decoder into its encoder states alone: the forward's matmuls once more
  (no weight gradients), less the first block's self-attention, whose input (the target's embeddings) needs none."""
  return decoder_forward(cfg, tokens, encoder_tokens) - _decoder_parts(cfg, tokens, encoder_tokens)[0]


@dataclasses.dataclass(frozen=True)
class Trains:
  """Which parts' weights train (from the trainable/frozen rules' split of the parameters)."""
  text: bool
  vision: bool


def trains(trainable_state) -> Trains:
  """Trains of a state's trainable parameters: a tower trains when any of its parameters does."""
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(trainable_state)]
  return Trains(text=any("text_model" in p for p in paths), vision=any("vision_model" in p for p in paths))


def decoder_of(module: nnx.Module):
  """The config of the encoder-decoder decoder inside `module` (a method's extra module: a submodule whose `cfg`
  has `num_decoder_layers`), or None."""
  for _, node in nnx.iter_graph(module):
    cfg = getattr(node, "cfg", None)
    if isinstance(node, nnx.Module) and hasattr(cfg, "num_decoder_layers"):
      return cfg
  return None


def step(shapes: dict, clip_cfg, decoder_cfg, parts: Trains) -> float:
  """Model FLOPs of one training step on a global batch of `shapes` (StepKind.batch_shapes: {key: (shape, dtype)};
  the token width is the ids' last axis)."""
  images = shapes["image"][0][0]
  texts, width = math.prod(shapes["ids"][0][:-1]), shapes["ids"][0][-1]
  if "para_ids" in shapes:
    texts += shapes["para_ids"][0][0]
  embed = clip_cfg.embed_dim
  total = texts * text_forward(clip_cfg.text, embed, width) * (3 if parts.text else 1)
  total += images * vision_forward(clip_cfg.vision, embed) * (3 if parts.vision else 1)
  if decoder_cfg is not None and "t5_target" in shapes:
    rows, tokens = shapes["t5_target"][0]
    total += rows * (decoder_forward(decoder_cfg, tokens) + decoder_input_gradient(decoder_cfg, tokens))
  return float(total)
