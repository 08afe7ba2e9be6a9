"""Winoground (METHODS §3): `<data_dir>/winoground/examples.jsonl` rows `caption_0/1, image_0/1` (image names without
extension are PNGs in the image folder, as the dataset ships them)."""
from __future__ import annotations

import os

import numpy as np

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path, read_jsonl


def _file(image_dir: str, name: str) -> str:
  name = name if os.path.splitext(name)[1] else f"{name}.png"
  nested = os.path.join(image_dir, "winoground", "images", name)
  return nested if os.path.exists(nested) else image_path(image_dir, "winoground", name)


def load_winoground(data_dir: str, image_dir: str) -> Task:
  images, texts = Index(), Index()
  rows = [(images.add(ImageRef(_file(image_dir, r["image_0"]))), images.add(ImageRef(_file(image_dir, r["image_1"]))),
           texts.add(r["caption_0"]), texts.add(r["caption_1"]))
          for r in read_jsonl(os.path.join(data_dir, "winoground", "examples.jsonl"))]

  def score(img, txt, tie):
    i0, i1, c0, c1 = (np.array(x) for x in zip(*rows))
    s = lambda c, i: np.sum(txt[c] * img[i], axis=-1)
    r = scorers.winoground(s(c0, i0), s(c1, i0), s(c1, i1), s(c0, i1), tie)
    return {k: float(np.mean(v)) for k, v in r.items()} | {"count": len(rows)}

  return Task("winoground", images, texts, score, examples=(rows,))
