"""The public model API: `load_clip` and `save_clip` over every format we read and write (docs/architecture.md).

Formats: an HF CLIP directory; an HF SigLIP / SigLIP 2 (fixed resolution) directory, which gives the SigLIP towers
(models/siglip/; docs/siglip.md); an open_clip state dict file (or a directory holding
`open_clip_model.safetensors`); our own `compclip` directory (`compclip.json` + `model.safetensors` in our parameter
names, dtypes kept).
Nothing is ever downloaded, and nothing is unpickled unsafely.

An export is the checkpoint it came from: a model `load_clip` reads from an HF directory carries that directory's
config.json (`source_config_of`), and `save_clip` writes it back as the export's config.json with every field kept,
only the values the model defines written over it where they differ (`hf.export_config`); a compclip directory
carries it on (`hf_config` in compclip.json). A model built without one (random, open_clip) writes the config its
architecture gives.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import types
from typing import Callable, Mapping

import numpy as np
from flax import nnx

from compclip_jax import compat
from compclip_jax.data.images import Preprocess
from compclip_jax.data.tokenizers import (CLIP_TOKENIZER_FILES, CLIPTokenizer, GemmaTokenizer, SiglipTokenizer,
                                          T5Tokenizer)
from compclip_jax.errors import InputError
from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP
from compclip_jax.models.layers import DTypes, ShapeOnlyRngs
from compclip_jax.models.siglip import config as siglip_config
from compclip_jax.models.siglip.model import SigLIP
from compclip_jax.models.t5 import T5Config, T5Decoder
from compclip_jax.weights import files, hf, hf_tokenizer, maps, open_clip, open_clip_siglip, params

FORMATS = files.FORMATS
COMPCLIP_META = "compclip.json"
COMPCLIP_VERSION = 2  # dense kernels [out, in] (older versions: compat.COMPCLIP_VERSIONS)
OPEN_CLIP_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
# The model attribute holding its source config.json as JSON text: a static attribute (a str, hashable, as NNX wants
# a graph's static values), so it stays with the model through nnx.split / merge / clone.
SOURCE_CONFIG_ATTR = "source_config_json"


def detect_format(path: str) -> str:
  """'hf' | 'open_clip' | 'compclip' for a local path, with an error that says what was expected."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} does not exist (load_clip never downloads: pass a local directory or file)")
  if os.path.isdir(path):
    if os.path.exists(os.path.join(path, COMPCLIP_META)):
      return "compclip"
    if any(os.path.exists(os.path.join(path, f)) for f in OPEN_CLIP_FILES):
      return "open_clip"
    if os.path.exists(os.path.join(path, "config.json")):
      return "hf"
    raise InputError(f"{path}: not a CLIP checkpoint directory (expected config.json + model.safetensors (HF), "
                     f"{COMPCLIP_META} (compclip) or {' / '.join(OPEN_CLIP_FILES)} (open_clip))")
  return "open_clip"


def is_siglip(path: str) -> bool:
  """Whether `path` is an HF SigLIP / SigLIP 2 directory (its config.json's model_type)."""
  return detect_format(path) == "hf" and hf.is_siglip_dir(path)


def _open_clip_file(path: str) -> str:
  if os.path.isdir(path):
    return next(os.path.join(path, f) for f in OPEN_CLIP_FILES if os.path.exists(os.path.join(path, f)))
  return path


def read_checkpoint(path: str, model_name: str | None = None, activation: str | None = None
                   ) -> tuple[str, clip_config.CLIPConfig | siglip_config.SiglipConfig, maps.RawCheckpoint]:
  """(format, config, tensors + name map) of any supported checkpoint; nothing is mapped or built yet (a SiglipConfig
  for an HF SigLIP directory)."""
  fmt = detect_format(path)
  if fmt == "hf" and hf.is_siglip_dir(path):
    return (fmt, *hf.read_siglip_dir(path))
  if fmt == "hf":
    return (fmt, *hf.read_clip_dir(path))
  if fmt == "open_clip":
    return (fmt, *open_clip.read(_open_clip_file(path), model_name, activation))
  meta = hf.read_json(os.path.join(path, COMPCLIP_META))
  version = meta.get("version")
  if version not in compat.COMPCLIP_VERSIONS:
    raise ValueError(f"{os.path.join(path, COMPCLIP_META)}: compclip format version {version!r}, this code reads "
                     f"{compat.COMPCLIP_VERSIONS} (written by a newer compclip_jax? upgrade it)")
  tensors = files.read_safetensors(os.path.join(path, "model.safetensors"))
  return fmt, _config_from_dict(meta["clip"]), maps.RawCheckpoint(path, tensors,
                                                                  functools.partial(_compclip_rules, version))


def read_source_config(path: str) -> dict | None:
  """The HF config.json of a checkpoint, which its exports write back (`save_clip(…, source_config=)`): an HF
  directory's own, the one a compclip directory carries (`hf_config` in compclip.json, when it was saved from a model
  that had one), None for an open_clip state dict (its config is not an HF one) and an older compclip directory."""
  fmt = detect_format(path)
  if fmt == "hf":
    return hf.read_json(os.path.join(path, "config.json"))
  if fmt == "compclip":
    return hf.read_json(os.path.join(path, COMPCLIP_META)).get("hf_config")
  return None


def source_config_of(model: CLIP | SigLIP) -> dict | None:
  """The config.json `model` was read from (`load_clip` of an HF or compclip directory), a fresh copy; None for a
  model built otherwise."""
  text = getattr(model, SOURCE_CONFIG_ATTR, None)
  return None if text is None else json.loads(text)


def _with_source_config(model, config: Mapping | None):
  """`model`, carrying `config` (left as it is for None: its graph stays a plain model's)."""
  if config is not None:
    setattr(model, SOURCE_CONFIG_ATTR, json.dumps(config))
  return model


def _compclip_rules(version: int, paths) -> list[maps.Rule]:
  """Our names as they are, older formats' tensors read as today's (compat.compclip_transposed)."""
  return [maps.Rule((k,), k, maps.TRANSPOSE if compat.compclip_transposed(version, k) else maps.KEEP) for k in paths]


def _config_from_dict(d: dict) -> clip_config.CLIPConfig:
  return clip_config.CLIPConfig(text=clip_config.TextConfig(**d["text"]),
                                vision=clip_config.VisionConfig(**d["vision"]), embed_dim=d["embed_dim"],
                                logit_scale_init=d["logit_scale_init"])


def _tokenizer_for(path: str, fmt: str, cfg) -> CLIPTokenizer | SiglipTokenizer | GemmaTokenizer | None:
  directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
  if isinstance(cfg, siglip_config.SiglipConfig):
    # SigLIP ships spiece.model; SigLIP 2 (fixed resolution) Gemma's tokenizer.model (+ tokenizer.json, read by
    # transformers only: the same pieces)
    for kind, model_file in ((SiglipTokenizer, "spiece.model"), (GemmaTokenizer, "tokenizer.model")):
      if kind.has_files(directory):
        tok = kind.from_dir(directory, cfg.text.context_length)
        if tok.vocab_size > cfg.text.vocab_size:
          raise InputError(f"{os.path.join(directory, model_file)}: {tok.vocab_size} pieces, more than the text "
                           f"tower's vocab_size {cfg.text.vocab_size} in config.json: the tokenizer is not this "
                           "model's (SigLIP ships spiece.model, SigLIP 2 Gemma's tokenizer.model)")
        return tok
    logging.warning(
        "%s: no spiece.model (SigLIP) or tokenizer.model (SigLIP 2's Gemma tokenizer) beside the SigLIP weights "
        "(a tokenizer.json alone is not read); returning no tokenizer", path)
    return None
  if CLIPTokenizer.has_files(directory):
    return CLIPTokenizer.from_dir(directory, cfg.text.context_length)
  if cfg.text.vocab_size != 49408:
    logging.warning(
        "%s: vocab size %d is not OpenAI's 49408 and no tokenizer files (tokenizer.json or vocab.json + "
        "merges.txt) are beside the weights; returning no tokenizer", path, cfg.text.vocab_size)
    return None
  # open_clip pads with 0; HF pads with its pad token. Either way pooling finds the first EOT (METHODS §4).
  return CLIPTokenizer.default(cfg.text.context_length, pad_id=0 if fmt == "open_clip" else clip_config.CLIP_EOT_ID)


def _preprocess_for(directory: str, cfg) -> Preprocess:
  """The directory's `preprocessor_config.json`, else the family's transform: CLIP's resize + centre crop with
  OpenAI's constants, SigLIP's square resize with mean = std = 0.5."""
  if isinstance(cfg,
                siglip_config.SiglipConfig) and not os.path.exists(os.path.join(directory, "preprocessor_config.json")):
    return Preprocess(size=cfg.vision.image_size, mean=siglip_config.MEAN, std=siglip_config.STD, squash=True)
  return Preprocess.from_hf_dir(directory, cfg.vision.image_size)


def model_class(cfg) -> type:
  """The two-tower module of an architecture config: CLIP, or SigLIP for a SiglipConfig."""
  return SigLIP if isinstance(cfg, siglip_config.SiglipConfig) else CLIP


@functools.lru_cache(maxsize=8)
def _shape_only_template(cfg: clip_config.CLIPConfig, text_dtypes: DTypes, vision_dtypes: DTypes,
                         remat_text: bool) -> tuple[nnx.GraphDef, nnx.State, Mapping[str, tuple[int, ...]]]:
  """(graphdef, shape-only state, {param path: shape}) of `CLIP(cfg, …)`, built from the config (no tracing, no
  random init) once per architecture and dtypes in a process. Constructing the 24 NNX layers of a ViT-B/32 costs
  0.15–0.3 s of Python bookkeeping, about what copying its weights costs; merging a copy of the template ~25 ms. The
  cache holds only ShapeDtypeStructs and immutable graph definitions; every model merged from it has its own
  Variables."""
  model = model_class(cfg)(cfg, rngs=ShapeOnlyRngs(), text_dtypes=text_dtypes, vision_dtypes=vision_dtypes,
                           remat_text=remat_text)
  return (*nnx.split(model), types.MappingProxyType(params.shapes(model)))  # read-only: shared by every load


def load_clip_params(path: str, model_name: str | None = None, activation: str | None = None,
                     abstract_model: Callable[[clip_config.CLIPConfig], CLIP] | None = None):
  """(config, our flat params as numpy, tokenizer, preprocess) of a checkpoint, nothing on a device yet.

  `abstract_model(cfg)` builds the abstract model whose shapes the checkpoint must fit (default: fp32 CLIP).
  """
  fmt, cfg, raw = read_checkpoint(path, model_name, activation)
  make = abstract_model or (lambda c: model_class(c)(c, rngs=ShapeOnlyRngs()))
  abstract = make(cfg)
  flat = raw.to_ours(params.shapes(abstract))
  directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
  return cfg, flat, _tokenizer_for(path, fmt, cfg), _preprocess_for(directory, cfg), abstract


def load_clip_meta(path: str, model_name: str | None = None,
                   activation: str | None = None) -> tuple[clip_config.CLIPConfig, CLIPTokenizer | None, Preprocess]:
  """(config, tokenizer, preprocess) of a checkpoint without reading its weights: an HF or compclip directory's
  config file alone. An open_clip state dict records no config of its own, so its architecture is read as
  `read_checkpoint` reads it (the tensors' shapes; a .safetensors file's header, memory-mapped)."""
  fmt = detect_format(path)
  if fmt == "hf" and hf.is_siglip_dir(path):
    cfg = siglip_config.from_hf(hf.read_json(os.path.join(path, "config.json")), os.path.join(path, "config.json"))
  elif fmt == "hf":
    cfg = clip_config.from_hf_dict(hf.read_json(os.path.join(path, "config.json")))
  elif fmt == "compclip":
    cfg = _config_from_dict(hf.read_json(os.path.join(path, COMPCLIP_META))["clip"])
  else:
    cfg = read_checkpoint(path, model_name, activation)[1]
  directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
  return cfg, _tokenizer_for(path, fmt, cfg), _preprocess_for(directory, cfg)


def load_clip(path: str, *, model_name: str | None = None, activation: str | None = None,
              text_dtypes: DTypes = DTypes(), vision_dtypes: DTypes = DTypes(), remat_text: bool = False
             ) -> tuple[CLIP | SigLIP, CLIPTokenizer | SiglipTokenizer | GemmaTokenizer | None, Preprocess]:
  """(model, tokenizer, preprocess) from an HF directory, an open_clip file, or a compclip directory. An HF SigLIP
  directory gives a `SigLIP` with its `SiglipTokenizer` (SigLIP 2: its `GemmaTokenizer`) and square-resize transform.

  `model_name` / `activation` only matter for open_clip files, whose state dict does not record them. The tokenizer
  is None (with a warning) for a non-standard vocabulary that ships no tokenizer files.
  """
  fmt, cfg, raw = read_checkpoint(path, model_name, activation)
  graphdef, state, shapes = _shape_only_template(cfg, text_dtypes, vision_dtypes, remat_text)
  model = nnx.merge(graphdef, state, copy=True)
  flat = raw.to_ours(shapes)  # the file's arrays (views: q/k/v splits); every mismatch reported at once
  directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
  tokenizer, preprocess = _tokenizer_for(path, fmt, cfg), _preprocess_for(directory, cfg)
  # One device_put copies the file's bytes (mapped, in our [out, in] layout already) onto the device.
  model = _with_source_config(params.fill_in_place(model, flat), read_source_config(path))
  return model, tokenizer, preprocess


def save_clip(model: CLIP, out_path: str, format: str = "hf", *, tokenizer: CLIPTokenizer | None = None,
              preprocess: Preprocess | None = None, source_config: Mapping | None = None) -> list[str]:
  """Writes `model` as 'hf' (a directory), 'open_clip' (a .safetensors file, or a directory) or 'compclip'.

  'hf' writes the config.json the model came from (`source_config`, by default the one `load_clip` read,
  `source_config_of(model)`) with every field kept and the model's own values written over it where they differ
  (`hf.export_config`); a compclip directory stores it for its own exports; without one, the config the architecture
  gives. InputError, before anything is written, for a source config of the other family.

  With `tokenizer`, 'hf' and 'compclip' directories get its files: copied when it came from files, else written from
  the built-in BPE (vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json), so `CLIPProcessor.
  from_pretrained(out_path)` works. `preprocessor_config.json` is written for 'hf' and 'compclip' (the one that was
  read, when `preprocess` came from one). Returns the paths written. torch is not needed.
  """
  if format not in FORMATS:
    raise ValueError(f"format {format!r}: use one of {FORMATS}")
  source = source_config_of(model) if source_config is None else source_config
  if source is not None and format != "open_clip":
    hf.export_config(model.cfg, source)  # the other family's config is refused before anything is written
  if isinstance(model, SigLIP):
    return _save_siglip(model, out_path, format, tokenizer, preprocess, source)
  cfg, flat = model.cfg, params.flat_params(model)
  preprocess = preprocess or Preprocess(size=cfg.vision.image_size)
  if format == "open_clip":
    open_clip.exportable(cfg)  # before anything is written
    target = os.path.join(out_path, OPEN_CLIP_FILES[0]) if not out_path.endswith(".safetensors") else out_path
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    files.write_safetensors(open_clip.export(cfg, flat), target)
    side = os.path.join(directory, "open_clip_config.json")
    with open(side, "w") as f:
      json.dump(
          {
              **open_clip.open_clip_config(cfg), "preprocess_cfg":
                  {"mean": list(preprocess.mean), "std": list(preprocess.std)}
          }, f, indent=2)
    written = [target, side]
  else:
    directory = out_path
    os.makedirs(directory, exist_ok=True)
    if format == "hf":
      written = [os.path.join(directory, f) for f in hf.save_clip_dir(cfg, flat, directory, source)]
    else:
      meta = {"format": "compclip", "version": COMPCLIP_VERSION, "clip": dataclasses.asdict(cfg)}
      if source is not None:  # the config.json this directory's HF exports write (read_source_config)
        meta["hf_config"] = hf.export_config(cfg, source)
      files.write_safetensors(flat, os.path.join(directory, "model.safetensors"), {"format": "compclip"})
      with open(os.path.join(directory, COMPCLIP_META), "w") as f:
        json.dump(meta, f, indent=2)
      written = [os.path.join(directory, f) for f in ("model.safetensors", COMPCLIP_META)]
    with open(os.path.join(directory, "preprocessor_config.json"), "w") as f:
      json.dump(preprocess.to_hf_dict(), f, indent=2)
    written.append(os.path.join(directory, "preprocessor_config.json"))
  if tokenizer is not None and tokenizer.source_dir:
    for name in CLIP_TOKENIZER_FILES:
      src = os.path.join(tokenizer.source_dir, name)
      if os.path.exists(src) and os.path.abspath(src) != os.path.abspath(os.path.join(directory, name)):
        shutil.copyfile(src, os.path.join(directory, name))
        written.append(os.path.join(directory, name))
  elif tokenizer is not None and format != "open_clip":  # open_clip brings its own tokenizer
    merges = _builtin_merges(tokenizer)
    if merges is not None:
      written += [
          os.path.join(directory, f)
          for f in hf_tokenizer.write_files(directory, merges, tokenizer.context_length, tokenizer.pad_id)
      ]
  return written


def _save_siglip(model: SigLIP, directory: str, format: str, tokenizer: SiglipTokenizer | GemmaTokenizer | None,
                 preprocess: Preprocess | None, source: Mapping | None) -> list[str]:
  """An HF SigLIP directory `transformers.SiglipModel` and `AutoProcessor` load: config.json (`source` with every
  field kept, `hf.export_config`), model.safetensors (fp32), preprocessor_config.json, and with `tokenizer` its files
  (SigLIP: spiece.model; SigLIP 2: Gemma's tokenizer.model, tokenizer.json when it came with one) and tokenizer
  config. format='open_clip': an open_clip / timm SigLIP state dict (`directory`: a .safetensors path or a folder)
  with its open_clip_config.json and the tokenizer's files beside it (weights/open_clip_siglip.py)."""
  if format not in ("hf", "open_clip"):
    raise InputError(f"format {format!r}: a SigLIP model is written as format='hf' (an HF SiglipModel directory) or "
                     "'open_clip' (an open_clip/timm state dict)")
  cfg = model.cfg
  if format == "open_clip":
    target = directory if directory.endswith(".safetensors") else os.path.join(directory, OPEN_CLIP_FILES[0])
    written = open_clip_siglip.write(cfg, params.flat_params(model), target)
    return written + (tokenizer.write_files(os.path.dirname(os.path.abspath(target))) if tokenizer else [])
  written = [os.path.join(directory, f) for f in hf.save_siglip_dir(cfg, params.flat_params(model), directory, source)]
  preprocess = preprocess or Preprocess(size=cfg.vision.image_size, mean=siglip_config.MEAN, std=siglip_config.STD,
                                        squash=True)
  with open(os.path.join(directory, "preprocessor_config.json"), "w") as f:
    json.dump({**preprocess.to_hf_dict(), "processor_class": "SiglipProcessor"}, f, indent=2)
  written.append(os.path.join(directory, "preprocessor_config.json"))
  if tokenizer is not None:
    written += tokenizer.write_files(directory)
  return written


def _builtin_merges(tokenizer: CLIPTokenizer) -> list[str] | None:
  """The BPE merges of a built-in (instant-clip-tokenizer) tokenizer, to write as transformers' files."""
  name, *args = getattr(tokenizer, "_recipe", ()) or (None,)
  if name == "default":
    return hf_tokenizer.read_merges(hf_tokenizer.STANDARD_MERGES, 49408)
  if name == "from_openai_vocab":
    return hf_tokenizer.read_merges(args[0], args[1])
  logging.warning("tokenizer backend %r: no tokenizer files written", tokenizer.backend)
  return None


def load_t5_decoder_params(directory: str, dtypes: DTypes = DTypes(),
                           tokenizer: str | None = None) -> tuple[T5Config, dict[str, np.ndarray], T5Tokenizer | None]:
  """(config, our flat params as numpy, tokenizer) of the frozen READ decoder in an HF T5 v1.1 directory (decoder,
  shared embedding, lm_head; the encoder is read past), nothing on a device yet (METHODS §2.1).

  `tokenizer`: a `spiece.model` path, which must exist; by default the directory's own `spiece.model`, and None
  where it has none. `dtypes` are those of the decoder the params will fill (they do not change its shapes).
  """
  cfg, raw = hf.read_t5_dir(directory)
  flat = raw.to_ours(params.shapes(params.abstract(lambda rngs: T5Decoder(cfg, dtypes, rngs=rngs))))
  spiece = tokenizer or os.path.join(directory, "spiece.model")
  return cfg, flat, (T5Tokenizer(spiece) if tokenizer or os.path.exists(spiece) else None)


def load_t5_decoder_meta(directory: str, tokenizer: str | None = None) -> tuple[T5Config, T5Tokenizer | None]:
  """(config, tokenizer) of an HF T5 v1.1 directory without reading its weights (`load_t5_decoder_params`)."""
  cfg = T5Config.from_hf_dict(hf.read_json(os.path.join(directory, "config.json")))
  spiece = tokenizer or os.path.join(directory, "spiece.model")
  return cfg, (T5Tokenizer(spiece) if tokenizer or os.path.exists(spiece) else None)


def load_t5_decoder(directory: str, dtypes: DTypes = DTypes(),
                    tokenizer: str | None = None) -> tuple[T5Decoder, T5Tokenizer | None]:
  """The frozen READ decoder (on the device) and its tokenizer, from `load_t5_decoder_params`."""
  cfg, flat, tok = load_t5_decoder_params(directory, dtypes, tokenizer)
  return params.fill(params.abstract(lambda rngs: T5Decoder(cfg, dtypes, rngs=rngs)), flat), tok
