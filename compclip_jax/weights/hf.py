"""transformers checkpoints: CLIP and SigLIP directories in and out, T5 v1.1 decoders in (METHODS §4). An export's
config.json is the one its model was read from, every field kept (`export_config`)."""
from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable, Mapping

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
DTYPE_KEYS = ("dtype", "torch_dtype")  # a config.json's name for its tensors' dtype (transformers 5 / 4)
_TOWERS = ("text_config", "vision_config")


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


def save_siglip_dir(cfg: siglip_config.SiglipConfig, flat: dict[str, np.ndarray], directory: str,
                    source: Mapping[str, Any] | None = None) -> list[str]:
  """Writes config.json + model.safetensors (fp32) that `transformers.SiglipModel.from_pretrained` loads; with
  `source` (the config.json the model was read from) that config with every field kept (`export_config`)."""
  return _save_dir(export_config(cfg, source), flat, directory)


def export_config(cfg: clip_config.CLIPConfig | siglip_config.SiglipConfig,
                  source: Mapping[str, Any] | None = None) -> dict:
  """The config.json of an HF export of a model of `cfg` (a CLIPModel's, or a SiglipModel's for a SiglipConfig):
  the one its architecture gives without `source`; with `source`, the config.json the model was read from, every
  field of it kept (top level and nested, the ones this project never reads too) and only the values the model
  defines written over it where they differ from what `source` itself describes (`_carry`). InputError when `source`
  is the other family's config."""
  if isinstance(cfg, siglip_config.SiglipConfig):
    return _carry(cfg, siglip_config.to_hf, lambda d: siglip_config.from_hf(d, "the source config.json"), source)
  return _carry(cfg, clip_config.to_hf_dict, clip_config.from_hf_dict, source)


def _carry(cfg, to_hf: Callable[[Any], dict], from_hf: Callable[[Mapping[str, Any]], Any],
           source: Mapping[str, Any] | None) -> dict:
  """`source` updated with `to_hf(cfg)` where the model differs from it (`to_hf(cfg)` itself without a source).

  "Differs" compares `to_hf(cfg)` with `to_hf(from_hf(source))` key by key, so a model read from `source` and not
  reshaped writes `source` back as it was, down to the keys it lacks (transformers fills those with its defaults on
  both sides); a model whose config changed (another input size, vocabulary, token id) writes those values. Older
  CLIP configs also carry `text_config_dict` / `vision_config_dict`, which transformers lets win over
  `text_config` / `vision_config`: a value written over a tower is written there too where that dict has the key.
  A `dtype` / `torch_dtype` names float32, the dtype of the tensors an export writes.
  """
  now = to_hf(cfg)
  if source is None:
    return now
  try:  # each family's reader refuses the other's config
    base = to_hf(from_hf(source))
  except (ValueError, TypeError) as e:
    raise InputError(f"the source config cannot be written back with a {type(cfg).__name__} model ({e})") from None
  out = copy.deepcopy(dict(source))
  _overlay(out, base, now)
  for tower in _TOWERS:
    legacy = out.get(f"{tower}_dict")
    if isinstance(legacy, dict):
      legacy.update({k: copy.deepcopy(v) for k, v in _changed(base.get(tower, {}), now.get(tower, {})) if k in legacy})
  for d in (out, *(out[t] for t in _TOWERS if isinstance(out.get(t), dict))):
    d.update({k: "float32" for k in DTYPE_KEYS if isinstance(d.get(k), str)})
  return out


def _changed(base: Mapping[str, Any], now: Mapping[str, Any]) -> list[tuple[str, Any]]:
  """[(key, value)] of `now` whose value `base` does not have (an absent key included)."""
  missing = object()
  return [(k, v) for k, v in now.items() if base.get(k, missing) != v]


def _overlay(out: dict, base: Mapping[str, Any], now: Mapping[str, Any]) -> None:
  """Writes over `out` (in place) every value of `now` that differs from `base`'s, into nested dicts key by key."""
  for k, v in _changed(base, now):
    if isinstance(v, Mapping) and isinstance(out.get(k), dict) and isinstance(base.get(k), Mapping):
      _overlay(out[k], base[k], v)
    else:
      out[k] = copy.deepcopy(v)


def _save_dir(hf_config: dict, flat: dict[str, np.ndarray], directory: str) -> list[str]:
  """config.json + model.safetensors (fp32, HF names through `maps.hf_rules`) of our flat params."""
  os.makedirs(directory, exist_ok=True)
  sd = maps.export_params({k: v.astype(np.float32) for k, v in flat.items()}, maps.hf_rules(list(flat)))
  files.write_safetensors(sd, os.path.join(directory, "model.safetensors"))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(hf_config, f, indent=2)
  return ["config.json", "model.safetensors"]


def save_clip_dir(cfg: clip_config.CLIPConfig, flat: dict[str, np.ndarray], directory: str,
                  source: Mapping[str, Any] | None = None) -> list[str]:
  """Writes config.json + model.safetensors (fp32) that `transformers.CLIPModel.from_pretrained` loads; with
  `source` (the config.json the model was read from) that config with every field kept (`export_config`)."""
  return _save_dir(export_config(cfg, source), flat, directory)


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
