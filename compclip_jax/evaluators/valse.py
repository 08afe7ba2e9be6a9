"""VALSE (METHODS §3): `<data_dir>/valse/<piece>.json` dicts with `image_file, caption, foil, mturk`; rows whose
`mturk.caption` ≥ 2 are kept (the benchmark's validity filter)."""
from __future__ import annotations

import glob
import os

import numpy as np

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, cos, image_path, read_json

MIN_MTURK_VOTES = 2


def valid_rows(data: dict) -> list[dict]:
  return [r for r in data.values() if (r.get("mturk") or {}).get("caption", 0) >= MIN_MTURK_VOTES]


def load_valse(data_dir: str, image_dir: str) -> Task:
  files = sorted(glob.glob(os.path.join(data_dir, "valse", "*.json")))
  if not files:
    raise FileNotFoundError(f"no VALSE pieces (*.json) in {os.path.join(data_dir, 'valse')}")
  images, texts = Index(), Index()
  rows = {}
  for f in files:
    piece = os.path.splitext(os.path.basename(f))[0]
    rows[piece] = [(images.add(ImageRef(image_path(image_dir, "valse", r["image_file"]))), texts.add(r["caption"]),
                    texts.add(r["foil"])) for r in valid_rows(read_json(f))]

  def score(img, txt, tie):
    out = {}
    for piece, rs in rows.items():
      i, p, n = (np.array(x) for x in zip(*rs))
      out[piece] = float(np.mean(scorers.pair_correct(cos(img[i], txt[p]), cos(img[i], txt[n]), tie)))
      out[f"{piece}/count"] = len(rs)
    out["mean"] = scorers.mean(out[p] for p in rows)  # macro over pieces
    return out
  return Task("valse", images, texts, score)
