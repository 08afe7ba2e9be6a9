"""open_clip state dicts in and out (METHODS §4): fused q/k/v, `text_projection` as [width, embed].

A state dict does not record the activation; it comes from an `open_clip_config.json` beside the file, a model name
(`ViT-B-32-quickgelu`), or an explicit argument, and is otherwise assumed to be OpenAI's QuickGELU with a warning.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re

import numpy as np

from compclip_jax.models import clip_config
from compclip_jax.weights import files, maps

# Non-learned entries of OpenAI / open_clip state dicts.
IGNORED = (r"input_resolution", r"context_length", r"vocab_size", r"attn_mask", r"visual\.attn_mask")
HEAD_WIDTH = 64  # open_clip's default head width for both towers


def _count_layers(sd, prefix: str) -> int:
  pat = re.compile(re.escape(prefix) + r"(\d+)\.")
  return len({m.group(1) for k in sd if (m := pat.match(k))})


def infer_config(sd, act: str) -> clip_config.CLIPConfig:
  """The architecture from the tensor shapes (as open_clip does for OpenAI state dicts)."""
  try:
    tw = sd["ln_final.weight"].shape[0]
    conv = sd["visual.conv1.weight"]
    vw, patch = conv.shape[0], conv.shape[-1]
    grid = math.isqrt(sd["visual.positional_embedding"].shape[0] - 1)
    text = clip_config.TextConfig(
        vocab_size=sd["token_embedding.weight"].shape[0], width=tw,
        layers=_count_layers(sd, "transformer.resblocks."), heads=tw // HEAD_WIDTH,
        mlp_dim=sd["transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        context_length=sd["positional_embedding"].shape[0], act=act, eos_token_id=clip_config.LEGACY_EOS_ID)
    vision = clip_config.VisionConfig(
        image_size=grid * patch, patch_size=patch, width=vw, layers=_count_layers(sd, "visual.transformer.resblocks."),
        heads=vw // HEAD_WIDTH, mlp_dim=sd["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0], act=act)
    return clip_config.CLIPConfig(text=text, vision=vision, embed_dim=sd["text_projection"].shape[1])
  except KeyError as e:
    raise maps.CheckpointMismatchError("(open_clip state dict)", [str(e.args[0])], [], [],
                                       "not an open_clip CLIP ViT state dict") from None


def resolve_config(path: str, sd, model_name: str | None, activation: str | None) -> clip_config.CLIPConfig:
  """Config for an open_clip file: explicit name > open_clip_config.json beside it > inferred shapes."""
  if model_name:
    cfg = clip_config.named(model_name)
  else:
    side = os.path.join(os.path.dirname(os.path.abspath(path)), "open_clip_config.json")
    if os.path.exists(side):
      with open(side) as f:
        cfg = clip_config.from_open_clip_dict(json.load(f))
    else:
      if activation is None:
        logging.warning("%s: the activation is not recorded; assuming QuickGELU (OpenAI-derived weights). Pass "
                        "activation='gelu' (or --activation=gelu) for LAION/CLIPA/CLIPS-style models.", path)
      cfg = infer_config(sd, activation or "quick_gelu")
  if activation:
    cfg = cfg.replace(text=_with_act(cfg.text, activation), vision=_with_act(cfg.vision, activation))
  return cfg


def _with_act(tower, act):
  return dataclasses.replace(tower, act=act)


def read(path: str, model_name: str | None = None,
         activation: str | None = None) -> tuple[clip_config.CLIPConfig, maps.RawCheckpoint]:
  """An open_clip `.safetensors/.bin/.pt` (optionally wrapped: `state_dict`, `module.`) → (config, tensors + map)."""
  sd = files.strip_wrapper_prefix(files.read_state_dict(path))
  if any(k.startswith(("text_model.", "vision_model.")) for k in sd):
    raise ValueError(f"{path} holds transformers (HF) CLIP weights: pass the directory that contains it and its "
                     "config.json instead")
  cfg = resolve_config(path, sd, model_name, activation)
  rules = lambda _: maps.open_clip_rules(cfg.text.layers, cfg.vision.layers)
  return cfg, maps.RawCheckpoint(path, sd, rules, IGNORED,
                                 hint="does the model name / open_clip_config.json match these weights?")


def export(cfg: clip_config.CLIPConfig, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  rules = maps.open_clip_rules(cfg.text.layers, cfg.vision.layers)
  return maps.export_params({k: v.astype(np.float32) for k, v in flat.items()}, rules)


def open_clip_config(cfg: clip_config.CLIPConfig) -> dict:
  """The `open_clip_config.json` that records what the state dict cannot (activation, shapes)."""
  t, v = cfg.text, cfg.vision
  return {"model_cfg": {
      "embed_dim": cfg.embed_dim, "quick_gelu": t.act == "quick_gelu",
      "vision_cfg": {"image_size": v.image_size, "layers": v.layers, "width": v.width, "patch_size": v.patch_size,
                     "head_width": v.width // v.heads, "mlp_ratio": v.mlp_dim / v.width},
      "text_cfg": {"context_length": t.context_length, "vocab_size": t.vocab_size, "width": t.width, "heads": t.heads,
                   "layers": t.layers, "mlp_ratio": t.mlp_dim / t.width}}}
