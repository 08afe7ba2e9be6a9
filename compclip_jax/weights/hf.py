"""transformers checkpoints: CLIP directories in and out, T5 v1.1 decoders in (METHODS §4)."""
from __future__ import annotations

import json
import os

import numpy as np
from compclip_jax.errors import InputError
from compclip_jax.models import clip_config
from compclip_jax.models.siglip import config as siglip_config
from compclip_jax.models.t5 import T5Config
from compclip_jax.weights import files, maps

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
    raise InputError(f"{path} is not valid JSON ({e})") from None


def read_clip_dir(directory: str) -> tuple[clip_config.CLIPConfig, maps.RawCheckpoint]:
  """An HF CLIP directory → (config, its tensors with the HF map)."""
  cfg = clip_config.from_hf_dict(read_json(os.path.join(directory, "config.json")))
  return cfg, maps.RawCheckpoint(directory, files.read_hf_weights(directory), maps.hf_rules, HF_CLIP_IGNORED,
                                 hint="is config.json the one that belongs to these weights?")


SIGLIP_MODEL_TYPES = ("siglip", "siglip2")  # siglip2: NaFlex, refused by siglip_config.from_hf with its reason


def is_siglip_dir(directory: str) -> bool:
  """Whether an HF directory's config.json is a SigLIP family's (`model_type` siglip / siglip2)."""
  path = os.path.join(directory, "config.json")
  return os.path.exists(path) and read_json(path).get("model_type") in SIGLIP_MODEL_TYPES


def read_siglip_dir(directory: str) -> tuple[siglip_config.SiglipConfig, maps.RawCheckpoint]:
  """An HF `SiglipModel` directory (SigLIP, SigLIP 2 fixed resolution) → (config, its tensors with the HF map: our
  parameter names mirror transformers', as CLIP's do)."""
  path = os.path.join(directory, "config.json")
  cfg = siglip_config.from_hf(read_json(path), path)
  return cfg, maps.RawCheckpoint(directory, files.read_hf_weights(directory), maps.hf_rules, HF_CLIP_IGNORED,
                                 hint="is config.json the one that belongs to these weights?")


def save_siglip_dir(cfg: siglip_config.SiglipConfig, flat: dict[str, np.ndarray], directory: str) -> list[str]:
  """Writes config.json + model.safetensors (fp32) that `transformers.SiglipModel.from_pretrained` loads."""
  return _save_dir(siglip_config.to_hf(cfg), flat, directory)


def _save_dir(hf_config: dict, flat: dict[str, np.ndarray], directory: str) -> list[str]:
  """config.json + model.safetensors (fp32, HF names through `maps.hf_rules`) of our flat params."""
  os.makedirs(directory, exist_ok=True)
  sd = maps.export_params({k: v.astype(np.float32) for k, v in flat.items()}, maps.hf_rules(list(flat)))
  files.write_safetensors(sd, os.path.join(directory, "model.safetensors"))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(hf_config, f, indent=2)
  return ["config.json", "model.safetensors"]


def save_clip_dir(cfg: clip_config.CLIPConfig, flat: dict[str, np.ndarray], directory: str) -> list[str]:
  """Writes config.json + model.safetensors (fp32) that `transformers.CLIPModel.from_pretrained` loads."""
  return _save_dir(clip_config.to_hf_dict(cfg), flat, directory)


def save_t5_decoder_dir(cfg: T5Config, flat: dict[str, np.ndarray], directory: str) -> list[str]:
  """Writes config.json + model.safetensors (fp32) of a T5 v1.1 decoder that `read_t5_dir` loads back. It holds no
  encoder: transformers would load it as a T5ForConditionalGeneration with a freshly initialised encoder."""
  return _save_dir(cfg.to_hf_dict(), flat, directory)


def read_t5_dir(directory: str) -> tuple[T5Config, maps.RawCheckpoint]:
  """An HF T5 v1.1 directory → (config, its tensors with the HF map). Encoder weights are read past, not kept."""
  cfg = T5Config.from_hf_dict(read_json(os.path.join(directory, "config.json")))
  sd = files.read_hf_weights(directory)
  if "shared.weight" not in sd and "decoder.embed_tokens.weight" in sd:  # some exports keep only the tied copy
    sd = {**sd, "shared.weight": sd["decoder.embed_tokens.weight"]}
  if "lm_head.weight" not in sd and "shared.weight" in sd:  # transformers 5 drops lm_head when it is tied
    sd = {**sd, "lm_head.weight": sd["shared.weight"]}
  return cfg, maps.RawCheckpoint(directory, sd, maps.hf_rules, HF_T5_IGNORED)
