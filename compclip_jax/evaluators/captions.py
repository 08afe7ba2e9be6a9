"""Caption-file helpers shared by retrieval and ARO's order sets: both Karpathy layouts, and the caption clean-up of
the retrieval protocol (METHODS §3: lower-cased, punctuation stripped, ≤ 30 words)."""
from __future__ import annotations

import re

from compclip_jax.errors import InputError
from compclip_jax.evaluators.tasks import read_json

_PUNCT = re.compile(r"([.!\"()*#:;~,?'])")
MAX_WORDS = 30


def pre_caption(caption: str, max_words: int = MAX_WORDS) -> str:
  words = " ".join(_PUNCT.sub(" ", caption.lower()).split()).split(" ")
  return " ".join(words[:max_words])


def read_test_captions(path: str, split: str = "test") -> list[tuple[str, list[str]]]:
  """[(image path relative to the image folder, [captions])] from a Karpathy `dataset_*.json` (images with `split`,
  `filepath`, `filename`, `sentences[].raw`) or a BLIP-style test list (`[{"image", "caption": [...]}]`)."""
  data = read_json(path)
  if isinstance(data, dict) and "images" in data:
    out = []
    for im in data["images"]:
      if im.get("split") == split:
        rel = "/".join(p for p in (im.get("filepath", ""), im["filename"]) if p)
        out.append((rel, [s["raw"] for s in im["sentences"]]))
    return out
  if isinstance(data, list) and data and "image" in data[0]:
    return [(r["image"], list(r["caption"]) if isinstance(r["caption"], list) else [r["caption"]]) for r in data]
  raise InputError(f"{path}: expected a Karpathy dataset JSON or a list of {{'image', 'caption'}} records")
