"""Checkpoints the tests create: random-init transformers models saved to temp dirs (no hub access)."""
from __future__ import annotations

import numpy as np
import torch
import transformers


def hf_clip_config(act="quick_gelu", eos_token_id=2, vocab_size=49408, *, real_b32=False) -> transformers.CLIPConfig:
  if real_b32:  # openai/clip-vit-base-patch32's shapes
    text = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
                max_position_embeddings=77)
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, image_size=224,
                  patch_size=32)
    proj = 512
  else:
    text = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=77)
    vision = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3, image_size=32,
                  patch_size=8)
    proj = 32
  text.update(hidden_act=act, eos_token_id=eos_token_id, bos_token_id=vocab_size - 2, pad_token_id=1)
  vision.update(hidden_act=act)
  return transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=proj)


def random_hf_clip(cfg: transformers.CLIPConfig, seed=0) -> transformers.CLIPModel:
  torch.manual_seed(seed)
  model = transformers.CLIPModel(cfg).eval()
  with torch.no_grad():  # non-trivial LayerNorm affine params and logit scale, so those mappings are exercised
    for name, p in model.named_parameters():
      if "norm" in name or "layrnorm" in name:
        p.add_(0.1 * torch.randn_like(p))
    model.logit_scale.fill_(3.1)
  return model


def varied_ids(n: int, length: int, vocab: int, eos: int, pad: int, seed=0) -> np.ndarray:
  """Token rows of different lengths: SOT-like start, random body, EOS, then padding."""
  rng = np.random.default_rng(seed)
  ids = np.full((n, length), pad, np.int32)
  for i in range(n):
    k = int(rng.integers(1, length - 1)) if i else length - 2  # first row is full-length
    ids[i, 0] = vocab - 2
    ids[i, 1:k + 1] = rng.integers(3, vocab - 2, k)
    ids[i, k + 1] = eos
  return ids


def hf_text(model, ids) -> np.ndarray:
  with torch.no_grad():
    out = model.get_text_features(input_ids=torch.as_tensor(ids, dtype=torch.long))
  return (out.pooler_output if hasattr(out, "pooler_output") else out).numpy()


def hf_image(model, pixels_nhwc) -> np.ndarray:
  with torch.no_grad():
    out = model.get_image_features(pixel_values=torch.as_tensor(pixels_nhwc.transpose(0, 3, 1, 2)))
  return (out.pooler_output if hasattr(out, "pooler_output") else out).numpy()


def hf_logits(model, ids, pixels_nhwc) -> np.ndarray:
  with torch.no_grad():
    out = model(input_ids=torch.as_tensor(ids, dtype=torch.long),
                pixel_values=torch.as_tensor(pixels_nhwc.transpose(0, 3, 1, 2)))
  return out.logits_per_image.numpy()
