"""transformers checkpoints: CLIP directories in and out, T5 v1.1 decoders in (METHODS §4)."""
from __future__ import annotations

import json
import os

import numpy as np
from flax import nnx

from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP
from compclip_jax.models.t5 import T5Config, T5Decoder
from compclip_jax.weights import files, maps, params

# Buffers some HF CLIP checkpoints carry; they are derived, not learned.
HF_CLIP_IGNORED = (r"(text|vision)_model\.embeddings\.position_ids",)
# READ runs only the decoder: the encoder and the tied copies of the shared embedding are dropped (METHODS §2.1).
HF_T5_IGNORED = (r"encoder\..*", r"decoder\.embed_tokens\.weight")


def read_json(path: str) -> dict:
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    raise FileNotFoundError(f"{path} not found: an HF model directory needs its config.json") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON ({e})") from None


def clip_shapes(cfg: clip_config.CLIPConfig) -> dict[str, tuple[int, ...]]:
  return params.param_shapes(lambda: CLIP(cfg, rngs=nnx.Rngs(0)))


def load_clip_dir(directory: str) -> tuple[clip_config.CLIPConfig, dict[str, np.ndarray]]:
  """An HF CLIP directory → (config, our flat params)."""
  cfg = clip_config.from_hf_dict(read_json(os.path.join(directory, "config.json")))
  shapes = clip_shapes(cfg)
  sd = files.read_hf_weights(directory)
  return cfg, maps.import_params(sd, maps.hf_rules(shapes), shapes, directory, HF_CLIP_IGNORED,
                                 hint="is config.json the one that belongs to these weights?")


def save_clip_dir(cfg: clip_config.CLIPConfig, flat: dict[str, np.ndarray], directory: str) -> list[str]:
  """Writes config.json + model.safetensors (fp32) that `transformers.CLIPModel.from_pretrained` loads."""
  os.makedirs(directory, exist_ok=True)
  sd = maps.export_params({k: v.astype(np.float32) for k, v in flat.items()}, maps.hf_rules(flat))
  files.write_safetensors(sd, os.path.join(directory, "model.safetensors"))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(clip_config.to_hf_dict(cfg), f, indent=2)
  return ["config.json", "model.safetensors"]


def t5_shapes(cfg: T5Config) -> dict[str, tuple[int, ...]]:
  return params.param_shapes(lambda: T5Decoder(cfg, rngs=nnx.Rngs(0)))


def load_t5_dir(directory: str) -> tuple[T5Config, dict[str, np.ndarray]]:
  """An HF T5 v1.1 directory → (config, our flat decoder params). Encoder weights are read past, not kept."""
  cfg = T5Config.from_hf_dict(read_json(os.path.join(directory, "config.json")))
  shapes = t5_shapes(cfg)
  sd = files.read_hf_weights(directory)
  if "shared.weight" not in sd and "decoder.embed_tokens.weight" in sd:  # some exports keep only the tied copy
    sd = {**sd, "shared.weight": sd["decoder.embed_tokens.weight"]}
  if "lm_head.weight" not in sd and "shared.weight" in sd:  # transformers 5 drops lm_head when it is tied
    sd = {**sd, "lm_head.weight": sd["shared.weight"]}
  return cfg, maps.import_params(sd, maps.hf_rules(shapes), shapes, directory, HF_T5_IGNORED)
