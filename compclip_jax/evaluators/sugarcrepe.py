"""SugarCrepe and SugarCrepe++ (METHODS §3). Files: `<data_dir>/sugarcrepe/*.json`, `<data_dir>/sugarcrepe_pp/*.json`;
images are COCO val2017 (`filename`)."""
from __future__ import annotations

import os

import numpy as np

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, cos, image_path, pair_accuracy, read_json

SC_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
SCPP_SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def load_sugarcrepe(data_dir: str, image_dir: str) -> Task:
  images, texts = Index(), Index()
  rows = {}  # subset → [(image, pos, neg)]
  for subset in SC_SUBSETS:
    data = read_json(os.path.join(data_dir, "sugarcrepe", f"{subset}.json"))
    rows[subset] = [(images.add(ImageRef(image_path(image_dir, "sugarcrepe", r["filename"]))), texts.add(r["caption"]),
                     texts.add(r["negative_caption"])) for r in data.values()]

  def score(img, txt, tie):
    out = {}
    for subset, rs in rows.items():
      out[subset] = pair_accuracy(rs, img, txt, tie)
      out[f"{subset}/count"] = len(rs)
    for group in ("add", "replace", "swap"):  # macro over the group's subsets
      out[group] = scorers.mean(out[s] for s in SC_SUBSETS if s.startswith(group))
    out["mean"] = scorers.mean(out[s] for s in SC_SUBSETS)
    return out

  return Task("sugarcrepe", images, texts, score, examples=tuple(rows.values()))


def load_sugarcrepe_pp(data_dir: str, image_dir: str) -> Task:
  images, texts = Index(), Index()
  rows = {}
  for subset in SCPP_SUBSETS:
    data = read_json(os.path.join(data_dir, "sugarcrepe_pp", f"{subset}.json"))
    rows[subset] = [(images.add(ImageRef(image_path(image_dir, "sugarcrepe_pp",
                                                    r["filename"]))), texts.add(r["caption"]), texts.add(r["caption2"]),
                     texts.add(r["negative_caption"])) for r in data]

  def score(img, txt, tie):
    out = {}
    for subset, rs in rows.items():
      i, p1, p2, n = (np.array(x) for x in zip(*rs))
      itt = scorers.scpp_itt(cos(img[i], txt[p1]), cos(img[i], txt[p2]), cos(img[i], txt[n]), tie)
      tot = scorers.scpp_tot(cos(txt[p1], txt[p2]), cos(txt[p1], txt[n]), cos(txt[p2], txt[n]), tie)
      out[f"{subset}/itt"], out[f"{subset}/tot"] = float(np.mean(itt)), float(np.mean(tot))
      out[f"{subset}/count"] = len(rs)
    for kind in ("itt", "tot"):
      for group in ("replace", "swap"):
        out[f"{group}/{kind}"] = scorers.mean(out[f"{s}/{kind}"] for s in SCPP_SUBSETS if s.startswith(group))
      out[f"mean/{kind}"] = scorers.mean(out[f"{s}/{kind}"] for s in SCPP_SUBSETS)
    return out

  return Task("sugarcrepe_pp", images, texts, score, examples=tuple(rows.values()))
