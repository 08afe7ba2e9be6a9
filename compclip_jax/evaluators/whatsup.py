"""What'sUp (METHODS §3): argmax over the caption options, the correct one first.

Files in `<data_dir>/whatsup/`: Controlled A/B (`controlled_images_dataset.json`, `controlled_clevr_dataset.json`:
`[{image_path, caption_options: [4]}]`) and COCO-/VG-QA (`coco_qa_one_obj.json`, `coco_qa_two_obj.json`,
`vg_qa_one_obj.json`, `vg_qa_two_obj.json`: `[[image_id, correct, wrong]]`; COCO images `<id:012d>.jpg`,
VG images `<id>.jpg`). Individual accuracy everywhere; for the controlled subsets also
- pair accuracy: both images of an opposite pair (left/right, on/under, front/behind) of the same objects correct;
- set accuracy: all images of the same objects correct.
Objects and relation are read from the controlled file names `<object>_<relation>_<object>.<ext>`.
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path, read_json

CONTROLLED = ("controlled_images_dataset", "controlled_clevr_dataset")
QA = ("coco_qa_one_obj", "coco_qa_two_obj", "vg_qa_one_obj", "vg_qa_two_obj")
OPPOSITES = {"left": "lr", "right": "lr", "on": "ou", "under": "ou", "in-front": "fb", "front": "fb", "behind": "fb"}


def controlled_groups(path: str) -> tuple[str, str]:
  """(pair key, set key) of a controlled image from its name `<a>_<relation>_<b>.<ext>`."""
  stem = os.path.splitext(os.path.basename(path))[0]
  parts = stem.split("_")
  rel = next((p for p in parts[1:-1] if p in OPPOSITES), parts[1] if len(parts) > 2 else "")
  objects = "+".join(sorted(p for p in parts if p != rel))
  return f"{objects}|{OPPOSITES.get(rel, rel)}", objects


def complete_groups(ok, keys: list, full: Counter, kind: str) -> dict:
  """{kind: fraction of the groups all correct, kind_count: groups scored, kind_skipped: groups left out} over the
  groups (`keys[row]`) that kept every row of the `full` sizes they had when loaded: a pair that lost its partner to
  a skipped image is no pair any more (scored on its one row it would count as all correct when that one is)."""
  present = Counter(keys)
  kept = [i for i, k in enumerate(keys) if present[k] == full[k]]
  scored = len({keys[i] for i in kept})
  return {
      kind: scorers.group_all(np.asarray(ok)[kept], [keys[i] for i in kept]), f"{kind}_count": scored,
      f"{kind}_skipped": len(full) - scored
  }


def load_whatsup(data_dir: str, image_dir: str) -> Task:
  images, texts = Index(), Index()
  subsets = {}
  for name in CONTROLLED + QA:
    path = os.path.join(data_dir, "whatsup", f"{name}.json")
    if not os.path.exists(path):
      continue
    rows = []  # (image, options, pair, set): one list, so skipping an image keeps them aligned
    for r in read_json(path):
      if name in CONTROLLED:
        rel = r["image_path"]
        opts = r["caption_options"]
        p, s = controlled_groups(rel)
      else:
        image_id, correct, wrong = r
        rel = f"{int(image_id):012d}.jpg" if name.startswith("coco") else f"{image_id}.jpg"
        opts, p, s = [correct, wrong], None, None
      rows.append((images.add(ImageRef(image_path(image_dir, "whatsup", rel))), [texts.add(o) for o in opts], p, s))
    subsets[name] = rows
  if not subsets:
    raise FileNotFoundError(f"no What'sUp subset files in {os.path.join(data_dir, 'whatsup')}")

  # each pair's and set's size as loaded: a group that lost a row to a skipped image is left out of its score
  sizes = {
      name: (Counter(r[2] for r in rows if r[2] is not None), Counter(r[3] for r in rows if r[3] is not None))
      for name, rows in subsets.items()
  }

  def score(img, txt, tie):
    out = {}
    for name, rows in subsets.items():
      ok = np.array([scorers.argmax_correct((txt[o] @ img[i])[None], 0, tie)[0] for i, o, _, _ in rows])
      out[f"{name}/individual"] = float(ok.mean())
      out[f"{name}/count"] = len(rows)
      for kind, col, full in (("pair", 2, sizes[name][0]), ("set", 3, sizes[name][1])):
        if full:
          out |= {f"{name}/{k}": v for k, v in complete_groups(ok, [r[col] for r in rows], full, kind).items()}
    out["mean/individual"] = scorers.mean(out[f"{n}/individual"] for n in subsets)
    return out

  return Task("whatsup", images, texts, score, examples=tuple(subsets.values()))
