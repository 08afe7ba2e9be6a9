"""VALSE (METHODS §3): `<data_dir>/valse/<piece>.json` dicts with `image_file, caption, foil, mturk`; rows whose
`mturk.caption` ≥ 2 are kept (the benchmark's validity filter)."""
from __future__ import annotations

import os

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path, pair_accuracy, read_json, subset_files

MIN_MTURK_VOTES = 2


def valid_rows(data: dict) -> list[dict]:
  return [r for r in data.values() if (r.get("mturk") or {}).get("caption", 0) >= MIN_MTURK_VOTES]


def load_valse(data_dir: str, image_dir: str) -> Task:
  files = subset_files(data_dir, "valse", ".json")
  images, texts = Index(), Index()
  rows = {}
  for f in files:
    piece = os.path.splitext(os.path.basename(f))[0]
    rows[piece] = [(images.add(ImageRef(image_path(image_dir, "valse",
                                                   r["image_file"]))), texts.add(r["caption"]), texts.add(r["foil"]))
                   for r in valid_rows(read_json(f))]

  def score(img, txt, tie):
    out = {}
    for piece, rs in rows.items():
      out[piece] = pair_accuracy(rs, img, txt, tie)
      out[f"{piece}/count"] = len(rs)
    out["mean"] = scorers.mean(out[p] for p in rows)  # macro over pieces
    return out

  return Task("valse", images, texts, score, examples=tuple(rows.values()))
