"""CREPE (METHODS §3): image→text recall@1 of the true caption among its own hard negatives on VG crops.

Our documented schema (the original files are not public here): `<data_dir>/crepe/<subset>.csv` with header
`image_path,x,y,width,height,caption,hard_negs`, `hard_negs` a JSON list of strings.
"""
from __future__ import annotations

import csv
import json
import os

import numpy as np

from compclip_jax.errors import InputError
from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path, subset_files


def load_crepe(data_dir: str, image_dir: str) -> Task:
  files = subset_files(data_dir, "crepe", ".csv")
  images, texts = Index(), Index()
  rows = {}
  for f in files:
    subset, rs = os.path.splitext(os.path.basename(f))[0], []
    with open(f, newline="", encoding="utf-8") as fh:
      for n, r in enumerate(csv.DictReader(fh), start=2):
        try:
          box = tuple(float(r[k]) for k in ("x", "y", "width", "height"))
          negs = json.loads(r["hard_negs"])
        except (KeyError, ValueError) as e:
          raise InputError(f"{f}:{n}: bad CREPE row ({e}); see the schema in compclip_jax/evaluators/crepe.py") \
              from None
        rs.append((images.add(ImageRef(image_path(image_dir, "crepe", r["image_path"]),
                                       box)), [texts.add(r["caption"])] + [texts.add(x) for x in negs]))
    rows[subset] = rs

  def score(img, txt, tie):
    out = {}
    for subset, rs in rows.items():
      ok = [scorers.argmax_correct((txt[opts] @ img[i])[None], 0, tie)[0] for i, opts in rs]
      out[subset] = float(np.mean(ok))
      out[f"{subset}/count"] = len(rs)
    out["mean"] = scorers.mean(out[s] for s in rows)
    return out

  return Task("crepe", images, texts, score, examples=tuple(rows.values()))
