"""SigLIP / SigLIP 2 (fixed resolution) architecture configuration, read from an HF `SiglipModel` config.json.

SigLIP 2's fixed-resolution checkpoints are `SiglipModel`s too (only the vocabulary and tokenizer differ); NaFlex
checkpoints (`Siglip2Model`, variable resolution) are not this family. Field names match the CLIP configs'
(`width`, `heads`, `layers`, `mlp_dim`, `act`, `eps`) so the CLIP encoder blocks run both families.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from compclip_jax.errors import InputError

ACTIVATIONS = ("gelu_pytorch_tanh", "gelu")
# SigLIP's images: squashed to the input size (bicubic), mean = std = 0.5 per channel
MEAN = STD = (0.5, 0.5, 0.5)


@dataclasses.dataclass(frozen=True)
class TextConfig:
  vocab_size: int = 32000
  width: int = 768
  layers: int = 12
  heads: int = 12
  mlp_dim: int = 3072
  context_length: int = 64
  act: str = "gelu_pytorch_tanh"
  eps: float = 1e-6
  # the text head's output (HF `projection_size`, default: the width); must equal the vision width, whose pooled
  # output is the image embedding (no projection on the vision side)
  projection_size: int = 768
  pad_token_id: int = 1
  eos_token_id: int = 1


@dataclasses.dataclass(frozen=True)
class VisionConfig:
  image_size: int = 224
  patch_size: int = 16
  width: int = 768
  layers: int = 12
  heads: int = 12
  mlp_dim: int = 3072
  act: str = "gelu_pytorch_tanh"
  eps: float = 1e-6
  use_head: bool = True  # the attention-pooling head (HF `vision_use_head`)

  @property
  def num_patches(self) -> int:
    """(image_size // patch_size)²: a remainder is dropped, as the stride-`patch_size` conv does (So400m/14 at
    384 px: 27 × 27)."""
    return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True)
class SiglipConfig:
  text: TextConfig = TextConfig()
  vision: VisionConfig = VisionConfig()
  # training from scratch: t' = log 10, b = −10 (SigLIP paper); checkpoints carry their own values
  logit_scale_init: float = math.log(10)
  logit_bias_init: float = -10.0

  @property
  def embed_dim(self) -> int:
    """The joint space's width: the text head's output, which is the vision tower's width."""
    return self.text.projection_size

  def __post_init__(self):
    for name, tower in (("text", self.text), ("vision", self.vision)):
      if tower.act not in ACTIVATIONS:
        raise ValueError(f"{name} activation {tower.act!r} is not supported; use one of {ACTIVATIONS}")
      if tower.heads < 1 or tower.width % tower.heads:
        raise ValueError(f"{name} width {tower.width} is not divisible by heads {tower.heads}")
    if self.text.projection_size != self.vision.width:
      raise ValueError(f"text projection_size {self.text.projection_size} must equal the vision width "
                       f"{self.vision.width}: the embeddings are compared")


def from_hf(d: Mapping[str, Any], source: str = "config.json") -> SiglipConfig:
  """An HF `SiglipModel` config dict → SiglipConfig; InputError for a SigLIP 2 NaFlex or another family's config."""
  kind = d.get("model_type")
  if kind == "siglip2":
    raise InputError(f"{source}: a Siglip2Model (NaFlex, variable resolution) checkpoint; only fixed-resolution "
                     "SigLIP / SigLIP 2 checkpoints (model_type 'siglip') are supported")
  if kind != "siglip" or "text_config" not in d or "vision_config" not in d:
    raise InputError(f"{source}: not an HF SiglipModel config (model_type {kind!r})")
  t, v = d["text_config"], d["vision_config"]
  text = TextConfig(vocab_size=t.get("vocab_size", 32000), width=t.get("hidden_size", 768),
                    layers=t.get("num_hidden_layers", 12), heads=t.get("num_attention_heads", 12),
                    mlp_dim=t.get("intermediate_size", 3072), context_length=t.get("max_position_embeddings", 64),
                    act=t.get("hidden_act", "gelu_pytorch_tanh"), eps=t.get("layer_norm_eps", 1e-6),
                    projection_size=t.get("projection_size") or t.get("hidden_size", 768),
                    pad_token_id=t.get("pad_token_id", 1), eos_token_id=t.get("eos_token_id", 1))
  vision = VisionConfig(image_size=v.get("image_size", 224), patch_size=v.get("patch_size", 16),
                        width=v.get("hidden_size", 768), layers=v.get("num_hidden_layers", 12),
                        heads=v.get("num_attention_heads", 12), mlp_dim=v.get("intermediate_size", 3072),
                        act=v.get("hidden_act", "gelu_pytorch_tanh"), eps=v.get("layer_norm_eps", 1e-6),
                        use_head=v.get("vision_use_head", True))
  return SiglipConfig(text, vision)


def to_hf(cfg: SiglipConfig) -> dict:
  """SiglipConfig → the config dict `transformers.SiglipConfig(**d)` builds the same architecture from."""
  t, v = cfg.text, cfg.vision
  return {
      "model_type": "siglip", "architectures": ["SiglipModel"], "text_config": {
          "vocab_size": t.vocab_size, "hidden_size": t.width, "num_hidden_layers": t.layers,
          "num_attention_heads": t.heads, "intermediate_size": t.mlp_dim, "max_position_embeddings": t.context_length,
          "hidden_act": t.act, "layer_norm_eps": t.eps, "projection_size": t.projection_size,
          "pad_token_id": t.pad_token_id, "eos_token_id": t.eos_token_id
      }, "vision_config": {
          "image_size": v.image_size, "patch_size": v.patch_size, "hidden_size": v.width, "num_hidden_layers": v.layers,
          "num_attention_heads": v.heads, "intermediate_size": v.mlp_dim, "hidden_act": v.act, "layer_norm_eps": v.eps,
          "vision_use_head": v.use_head
      }
  }


def tiny() -> SiglipConfig:
  """A random-init test size (two blocks per tower, 32 px images)."""
  return SiglipConfig(
      TextConfig(vocab_size=128, width=32, layers=2, heads=4, mlp_dim=64, context_length=16, projection_size=32),
      VisionConfig(image_size=32, patch_size=8, width=32, layers=2, heads=4, mlp_dim=64))


def demo() -> SiglipConfig:
  """The demo's SigLIP (model.random="siglip_demo"): the shapes of the demo's CLIP (clip_config.demo: a text tower of
  width 64, a vision tower of width 128, a 128-d joint space, two blocks each) with SigLIP's 64 text positions. A
  random model's input size is the run's data.image_size (64 px in the demo)."""
  return SiglipConfig(
      TextConfig(vocab_size=128, width=64, layers=2, heads=4, mlp_dim=128, context_length=64, projection_size=128),
      VisionConfig(image_size=32, patch_size=8, width=128, layers=2, heads=4, mlp_dim=256))
