"""COLA multi-object matching (METHODS §3): `<data_dir>/cola/COLA_multiobjects_matching_benchmark.json`, 210 rows
`[image_url_1, caption_1, image_url_2, caption_2]`; images are the URLs' base names in the image folder."""
from __future__ import annotations

import os

import numpy as np

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path, read_json

FILE = "COLA_multiobjects_matching_benchmark.json"


def load_cola(data_dir: str, image_dir: str) -> Task:
  images, texts = Index(), Index()
  ref = lambda url: images.add(ImageRef(image_path(image_dir, "cola", url.rsplit("/", 1)[-1])))
  rows = [(ref(u1), texts.add(c1), ref(u2), texts.add(c2))
          for u1, c1, u2, c2 in read_json(os.path.join(data_dir, "cola", FILE))]

  def score(img, txt, tie):
    i1, c1, i2, c2 = (np.array(x) for x in zip(*rows))
    s = lambda c, i: np.sum(txt[c] * img[i], axis=-1)
    ok = scorers.cola(s(c1, i1), s(c1, i2), s(c2, i1), s(c2, i2), tie)
    return {"accuracy": float(np.mean(ok)), "count": len(rows)}

  return Task("cola_multiobject", images, texts, score, examples=(rows,))
