"""A config's `data` section → its training source (`make_source`), and that section's problems (`config_errors`)."""
from __future__ import annotations

import os
from typing import Callable

from compclip_jax.data.sources import CocoSource, CsvSource, PreparedSource, read_paraphrases
from compclip_jax.data.tfds_source import TfdsError, TfdsSource
from compclip_jax.data.synthetic.world import SYNTHETIC_FORMATS, synthetic_source

# ------------------------------------------------------------------------------------ the synthetic world as data
SOURCES = ("csv", "coco", "prepared", "tfds", "synthetic")


def config_errors(d) -> list[str]:
  """Problems of a config's `data` section (`train.validate` reports them with the rest, at once)."""
  errors = []
  if d.source not in SOURCES:
    return [f"data.source {d.source!r}: use one of {SOURCES}"]
  if d.source == "synthetic":
    if d.synthetic_size <= 0:
      errors.append(f"data.synthetic_size {d.synthetic_size}: the synthetic world needs ≥ 1 scene")
    if d.synthetic_format not in SYNTHETIC_FORMATS:
      errors.append(f"data.synthetic_format {d.synthetic_format!r}: use one of {SYNTHETIC_FORMATS}")
    if not 0.0 <= d.synthetic_binding_noise <= 0.5:
      errors.append(f"data.synthetic_binding_noise {d.synthetic_binding_noise}: a probability in [0, 0.5]")
    return errors
  if d.source == "tfds":
    return _tfds_errors(d)
  if not d.path or not os.path.exists(d.path):
    errors.append(f"data.path {d.path!r} does not exist")
  if d.source != "prepared" and not os.path.isdir(d.image_root or ""):
    errors.append(f"data.image_root {d.image_root!r} is not a directory")
  if d.paraphrases and not os.path.exists(d.paraphrases):
    errors.append(f"data.paraphrases {d.paraphrases} does not exist")
  return errors


def _tfds_errors(d) -> list[str]:
  """The TFDS dataset, split and feature keys of `d` checked by opening the split (its metadata only)."""
  errors = []
  if d.paraphrases and not os.path.exists(d.paraphrases):
    errors.append(f"data.paraphrases {d.paraphrases} does not exist")
  try:
    _tfds(d, None)
  except TfdsError as e:
    errors.append(str(e))
  return errors


def _tfds(d, paraphrases) -> TfdsSource:
  return TfdsSource(d.tfds_name, d.tfds_data_dir, d.tfds_split, d.tfds_image_key, d.tfds_captions_key, d.tfds_id_key,
                    paraphrases, lowercase=d.tfds_lowercase, sentences=d.tfds_split_sentences)


def make_source(d, workdir: str, seed: int, process_index: int = 0, barrier: Callable[[str], None] | None = None):
  """The training source of a config's `data` section `d`.

  csv / coco / prepared read `d.path`; tfds reads split `d.tfds_split` of `d.tfds_name` in `d.tfds_data_dir`
  (data/tfds_source.py); synthetic is the generated world (`synthetic_source`) of `d.synthetic_size`
  scenes and `seed`, in `d.path` (default `<workdir>/world`), read as CLIC rows or COCO JSON (`d.synthetic_format`).
  `barrier(name)` waits for every process (`multihost_utils.sync_global_devices`; None: one process).
  """
  if d.source == "synthetic":
    return synthetic_source(d.path or os.path.join(workdir, "world"), d.synthetic_size, seed, d.synthetic_format,
                            process_index, barrier, any_image_format=d.any_image_format,
                            binding_noise=d.synthetic_binding_noise)
  if d.source == "csv":
    return CsvSource(d.path, d.image_root, any_image_format=d.any_image_format)
  if d.source == "coco":
    return CocoSource(d.path, d.image_root, tuple(d.splits), read_paraphrases(d.paraphrases) if d.paraphrases else None)
  if d.source == "tfds":
    return _tfds(d, read_paraphrases(d.paraphrases) if d.paraphrases else None)
  return PreparedSource(d.path)
