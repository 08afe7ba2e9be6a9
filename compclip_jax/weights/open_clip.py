"""open_clip state dicts in and out (METHODS §4): fused q/k/v, `text_projection` as [width, embed].

A state dict records shapes but neither the number of attention heads nor the activation. Both come from an
`open_clip_config.json` beside the file, a model name (`ViT-B-32-quickgelu`), or explicit arguments; without them
loading stops with `ArchitectureUnknownError` instead of guessing. The one guess kept is provably right: heads taken
from the built-in model whose every shape matches the file, said in a warning. Text pools at argmax(ids), open_clip's
rule for its CLIP text tower.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re

import numpy as np

from compclip_jax.errors import UserError
from compclip_jax.models import clip_config
from compclip_jax.weights import files, maps, open_clip_siglip

# Non-learned entries of OpenAI / open_clip state dicts.
IGNORED = (r"input_resolution", r"context_length", r"vocab_size", r"attn_mask", r"visual\.attn_mask")


class ArchitectureUnknownError(UserError, ValueError):
  """An open_clip state dict whose heads or activation are not recorded and cannot be known from its shapes."""


def _count_layers(sd, prefix: str) -> int:
  pat = re.compile(re.escape(prefix) + r"(\d+)\.")
  return len({m.group(1) for k in sd if (m := pat.match(k))})


def shape_facts(sd) -> dict[str, int]:
  """Everything about the architecture that the tensor shapes do record (as open_clip reads OpenAI state dicts)."""
  try:
    conv = sd["visual.conv1.weight"]
    patch = conv.shape[-1]
    return {
        "text.vocab_size": sd["token_embedding.weight"].shape[0], "text.width": sd["ln_final.weight"].shape[0],
        "text.layers": _count_layers(sd, "transformer.resblocks."),
        "text.mlp_dim": sd["transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        "text.context_length": sd["positional_embedding"].shape[0], "vision.width": conv.shape[0],
        "vision.patch_size": patch,
        "vision.image_size": math.isqrt(sd["visual.positional_embedding"].shape[0] - 1) * patch,
        "vision.layers": _count_layers(sd, "visual.transformer.resblocks."),
        "vision.mlp_dim": sd["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        "embed_dim": sd["text_projection"].shape[1]
    }
  except KeyError as e:
    raise maps.CheckpointMismatchError("(open_clip state dict)", [str(e.args[0])], [], [],
                                       "not an open_clip CLIP ViT state dict") from None


def _facts_of(cfg: clip_config.CLIPConfig) -> dict[str, int]:
  return {
      "text.vocab_size": cfg.text.vocab_size, "text.width": cfg.text.width, "text.layers": cfg.text.layers,
      "text.mlp_dim": cfg.text.mlp_dim, "text.context_length": cfg.text.context_length,
      "vision.width": cfg.vision.width, "vision.patch_size": cfg.vision.patch_size,
      "vision.image_size": cfg.vision.image_size, "vision.layers": cfg.vision.layers,
      "vision.mlp_dim": cfg.vision.mlp_dim, "embed_dim": cfg.embed_dim
  }


def _what_to_pass(path: str) -> str:
  return (f"pass model_name= (--model_name; one of {sorted(clip_config.OPEN_CLIP_MODELS)}, '-quickgelu' for "
          f"OpenAI-derived weights) or put the model's open_clip_config.json beside {os.path.basename(path)}")


def infer_config(path: str, sd, act: str) -> clip_config.CLIPConfig:
  """The architecture of a config-less state dict: its shapes, plus the heads of the one built-in model whose shapes
  all match (heads are not recorded in a state dict; a guess such as width ÷ 64 loads ViT-H-14's vision tower wrong).
  """
  facts = shape_facts(sd)
  matches = [n for n in clip_config.OPEN_CLIP_MODELS if _facts_of(clip_config.named(n)) == facts]
  if not matches:
    shown = ", ".join(f"{k} {v}" for k, v in facts.items())
    raise ArchitectureUnknownError(
        f"{path}: the number of attention heads is not recorded in an open_clip state dict and no built-in model has "
        f"these shapes ({shown}); {_what_to_pass(path)}")
  base = clip_config.named(matches[0])
  logging.warning(
      "%s: no open_clip_config.json or model_name; every shape matches the built-in %s, so its heads "
      "(text %d, vision %d) are used", path, matches[0], base.text.heads, base.vision.heads)
  return base.replace(text=_with_act(base.text, act), vision=_with_act(base.vision, act))


def resolve_config(path: str, sd, model_name: str | None, activation: str | None) -> clip_config.CLIPConfig:
  """Config for an open_clip file: explicit name > open_clip_config.json beside it > a shape-matched built-in.

  `activation` overrides the name's or the config's; a config-less file needs it (or a name) since nothing in a
  state dict tells QuickGELU (OpenAI-derived) from GELU (LAION, CLIPA, …) weights.
  """
  if model_name:
    cfg = clip_config.named(model_name)
  else:
    side = os.path.join(os.path.dirname(os.path.abspath(path)), "open_clip_config.json")
    if os.path.exists(side):
      with open(side) as f:
        try:
          cfg = clip_config.from_open_clip_dict(json.load(f))
        except (KeyError, ValueError) as e:
          raise ArchitectureUnknownError(f"{side}: {e}") from None
    else:
      if activation is None:
        raise ArchitectureUnknownError(
            f"{path}: the activation is not recorded in an open_clip state dict; pass activation='quick_gelu' "
            f"(OpenAI-derived weights) or 'gelu' (LAION/CLIPA/CLIPS-style), or {_what_to_pass(path)}")
      cfg = infer_config(path, sd, activation)
  if activation:
    cfg = cfg.replace(text=_with_act(cfg.text, activation), vision=_with_act(cfg.vision, activation))
  return cfg


def _with_act(tower, act):
  return dataclasses.replace(tower, act=act)


def read(path: str, model_name: str | None = None,
         activation: str | None = None) -> tuple[clip_config.CLIPConfig, maps.RawCheckpoint]:
  """An open_clip `.safetensors/.bin/.pt` (optionally wrapped: `state_dict`, `module.`) → (config, tensors + map); a
  SigLIP one (open_clip_siglip.py) → (SiglipConfig, …)."""
  sd = files.strip_wrapper_prefix(files.read_state_dict(path))
  if any(k.startswith(("text_model.", "vision_model.")) for k in sd):
    raise ValueError(f"{path} holds transformers (HF) CLIP weights: pass the directory that contains it and its "
                     "config.json instead")
  if open_clip_siglip.is_siglip_state_dict(sd):  # a timm SigLIP trunk: heads and activations from its config / name
    if activation:
      raise UserError(f"{path}: an open_clip SigLIP's activations are read from its open_clip_config.json or model "
                      "name, not given (drop activation= / --activation)")
    return open_clip_siglip.read(path, sd, model_name)
  cfg = resolve_config(path, sd, model_name, activation)
  rules = lambda _: maps.open_clip_rules(cfg.text.layers, cfg.vision.layers)
  return cfg, maps.RawCheckpoint(path, sd, rules, IGNORED,
                                 hint="does the model name / open_clip_config.json match these weights?")


def exportable(cfg: clip_config.CLIPConfig) -> None:
  """Raises ValueError for a model open_clip would load as a different one: its text tower pools at argmax(ids)
  (METHODS §4), which is 'first eos' only when eos is the largest id; one `quick_gelu` flag covers both towers."""
  t = cfg.text
  if not t.pools_at_argmax and t.eos_token_id != t.vocab_size - 1:
    raise ValueError(f"cannot export to open_clip: this model pools text at the first eos_token_id {t.eos_token_id}, "
                     f"open_clip at argmax(ids), which differ because {t.eos_token_id} is not the largest id "
                     f"({t.vocab_size - 1}); export format='hf' (it keeps the pooling rule) instead")
  if t.act != cfg.vision.act:
    raise ValueError(f"cannot export to open_clip: text uses {t.act} and vision {cfg.vision.act}, open_clip has one "
                     "activation (quick_gelu) for both towers; export format='hf' instead")


def export(cfg: clip_config.CLIPConfig, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  exportable(cfg)
  rules = maps.open_clip_rules(cfg.text.layers, cfg.vision.layers)
  return maps.export_params({k: v.astype(np.float32) for k, v in flat.items()}, rules)


def _mlp_ratio(mlp_dim: int, width: int) -> float:
  """The ratio open_clip turns back into exactly `mlp_dim` (it computes int(width * mlp_ratio))."""
  r = mlp_dim / width
  return r if int(width * r) == mlp_dim else (mlp_dim + 0.5) / width


def open_clip_config(cfg: clip_config.CLIPConfig) -> dict:
  """The `open_clip_config.json` that records what the state dict cannot (activation, heads, shapes)."""
  exportable(cfg)
  t, v = cfg.text, cfg.vision
  return {
      "model_cfg": {
          "embed_dim": cfg.embed_dim, "quick_gelu": t.act == "quick_gelu", "vision_cfg": {
              "image_size": v.image_size, "layers": v.layers, "width": v.width, "patch_size": v.patch_size,
              "head_width": v.width // v.heads, "mlp_ratio": _mlp_ratio(v.mlp_dim, v.width)
          }, "text_cfg": {
              "context_length": t.context_length, "vocab_size": t.vocab_size, "width": t.width, "heads": t.heads,
              "layers": t.layers, "mlp_ratio": _mlp_ratio(t.mlp_dim, t.width)
          }
      }
  }
