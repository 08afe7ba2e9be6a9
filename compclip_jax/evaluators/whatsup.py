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

  def score(img, txt, tie):
    out = {}
    for name, rows in subsets.items():
      ok = np.array([scorers.argmax_correct((txt[o] @ img[i])[None], 0, tie)[0] for i, o, _, _ in rows])
      pairs, sets = [r[2] for r in rows if r[2] is not None], [r[3] for r in rows if r[3] is not None]
      out[f"{name}/individual"] = float(ok.mean())
      out[f"{name}/count"] = len(rows)
      if pairs:
        out[f"{name}/pair"] = scorers.group_all(ok, pairs)
        out[f"{name}/set"] = scorers.group_all(ok, sets)
    out["mean/individual"] = scorers.mean(out[f"{n}/individual"] for n in subsets)
    return out

  return Task("whatsup", images, texts, score, examples=tuple(subsets.values()))
