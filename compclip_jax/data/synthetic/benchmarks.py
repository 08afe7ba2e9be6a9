"""The synthetic world's held-out benchmarks (data/synthetic/scenes.py has the world): SugarCrepe, SugarCrepe++
and Karpathy-test retrieval files of fresh scenes built on held-out pairings, in the real formats, and the
cross-collage swap test (CLIC's own task, a diagnostic); written once per (size, seed), recorded in
`benchmarks.json`."""
from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image

from compclip_jax.data.synthetic.scenes import (BENCHMARKS_MANIFEST, COLORS, OPPOSITE, SHAPES, WORLD_FORMAT,
                                                check_manifest, write_manifest, captions, first_sentence,
                                                held_out_pairings, render, scene)


def _other(options, exclude, rng) -> str:
  return str(rng.choice([o for o in options if o not in exclude]))


def benchmark_rows(sc: dict, rng: np.random.Generator) -> dict[str, dict]:
  """One SugarCrepe-style (caption, negative) per subset for a benchmark scene, captions in the first sentence's
  template, plus SugarCrepe++'s second positive (the same meaning in other words: the other object first, the
  relation inverted)."""
  (a, b), r = sc["objects"], sc["relation"]
  (z1, c1, s1, t1), (z2, c2, s2, _) = a, b
  say = lambda o1, rel, o2: first_sentence({**sc, "objects": [o1, o2], "relation": rel})
  cap = say(a, r, b)
  c3 = _other(COLORS, {c1, c2}, rng)
  texture = _other(("striped", "dotted"), {t1}, rng)  # a texture the first object does not have
  rows = {"replace_att": say((z1, c3, s1, t1), r, b)}
  rows["replace_obj"] = say((z1, c1, _other(SHAPES, {s1}, rng), t1), r, b)
  rows["replace_rel"] = say(a, OPPOSITE[r] if r != "beside" else _other(("above", "below"), (), rng), b)
  rows["swap_att"] = say((z1, c2, s1, t1), r, (z2, c1, s2, t1))
  rows["add_att"] = say((z1, f"{texture} {c1}", s1, t1), r, b)
  rows["add_obj"] = say((z1, c1, f"{s1} and a {c3} {_other(SHAPES, (), rng)}", t1), r, b)
  if s1 != s2:
    rows["swap_obj"] = say((z1, c1, s2, t1), r, (z2, c2, s1, t1))
  para = say(b, OPPOSITE[r], a)
  return {k: {"caption": cap, "caption2": para, "negative_caption": v} for k, v in rows.items()}


def collage_swap_row(sc1: dict, sc2: dict) -> dict:
  """CLIC's own task on two held-out scenes (a diagnostic, docs/demo.md): the caption of their collage (the two first
  sentences joined as CLIC joins them) against the same text with the first objects' colours traded between the
  two sentences — the cross swap CLIC's negative makes. The scenes' first objects have different colours."""
  (z1, c1, s1, t1), b1 = sc1["objects"]
  (z2, c2, s2, t2), b2 = sc2["objects"]
  swapped1 = {**sc1, "objects": [(z1, c2, s1, t1), b1]}
  swapped2 = {**sc2, "objects": [(z2, c1, s2, t2), b2]}
  return {"caption": joined(sc1, sc2), "negative_caption": joined(swapped1, swapped2)}


def collage(img1: Image.Image, img2: Image.Image, size: int = 128) -> Image.Image:
  """Two images as CLIC concatenates them (METHODS §1.2 steps 1–3): each squashed into half of a size × size
  square by its orientation (a tall one to the left or right half, a wide one to the top or bottom half; both of one
  orientation here) and placed first / second."""
  from compclip_jax.data.images import orientation  # pylint: disable=import-outside-toplevel
  out = Image.new("RGB", (size, size))
  tall = orientation(*img1.size) == "tall"
  half = (size // 2, size) if tall else (size, size // 2)
  out.paste(img1.resize(half, Image.Resampling.BICUBIC), (0, 0))
  out.paste(img2.resize(half, Image.Resampling.BICUBIC), (size // 2, 0) if tall else (0, size // 2))
  return out


def joined(sc1: dict, sc2: dict) -> str:
  """The caption of a collage of two scenes: their first sentences joined as CLIC joins them."""
  return f"{first_sentence(sc1)}. {first_sentence(sc2)}."


def benchmarks_record(n: int, seed: int) -> dict:
  """What `<data_dir>/benchmarks.json` records of a world's benchmarks: a function of these alone."""
  return {"format": WORLD_FORMAT, "size": int(n), "seed": int(seed)}


def read_benchmarks(data_dir: str, n: int, seed: int, image_dir: str = "") -> dict:
  """The folders of the complete benchmarks of (n, seed) under `data_dir`; raises if missing or another set."""
  images = image_dir or os.path.join(data_dir, "images")
  if not check_manifest(os.path.join(data_dir, BENCHMARKS_MANIFEST), benchmarks_record(n, seed), "benchmarks"):
    raise FileNotFoundError(f"{data_dir}: no synthetic benchmarks ({BENCHMARKS_MANIFEST} missing): process 0 writes "
                            "them (compclip_jax.data.synthetic.benchmarks.write_benchmarks)")
  return {"data_dir": data_dir, "image_dir": images}


def write_benchmarks(data_dir: str, n: int, seed: int = 1, image_dir: str = "") -> dict:
  """SugarCrepe, SugarCrepe++ and Karpathy-test retrieval files of n fresh scenes, each built on a held-out pairing,
  in the real formats: annotations as `python -m compclip_jax evaluate --data_dir` reads them (`sugarcrepe/`,
  `sugarcrepe_pp/`, `retrieval/`) under `data_dir`, images under `image_dir` (default `<data_dir>/images`); the
  cross-collage swap test (`collage_swap_row`: collages of two of these scenes of one orientation, in SugarCrepe's
  row format, `collage/swap_att.json`); then `benchmarks.json`. Complete files of the same (n, seed) are reused;
  another (n, seed) raises (ValueError).
  → {"data_dir", "image_dir"}"""
  data, images = data_dir, image_dir or os.path.join(data_dir, "images")
  if check_manifest(os.path.join(data, BENCHMARKS_MANIFEST), benchmarks_record(n, seed), "benchmarks"):
    return {"data_dir": data, "image_dir": images}
  for d in ("sugarcrepe", "sugarcrepe_pp", "retrieval", "collage"):
    os.makedirs(os.path.join(data, d), exist_ok=True)
  os.makedirs(images, exist_ok=True)
  rng = np.random.default_rng(seed)
  held = held_out_pairings()
  sc: dict[str, dict] = {}
  scpp: dict[str, list] = {}
  karpathy = []
  waiting: dict[bool, tuple] = {}  # orientation → (scene, image) waiting for a partner of its orientation
  collages: dict[str, dict] = {}
  for i in range(n):
    scene_ = scene(rng, held, benchmark=True)
    name = f"bench_{i:05d}.png"
    img = render(scene_, rng)
    img.save(os.path.join(images, name))
    tall = img.size[0] < img.size[1]
    other = waiting.get(tall)
    if other is not None and other[0]["objects"][0][1] != scene_["objects"][0][1]:
      name2 = f"collage_{len(collages):05d}.png"
      collage(other[1], img).save(os.path.join(images, name2))
      collages[str(len(collages))] = {"filename": name2, **collage_swap_row(other[0], scene_)}
      waiting.pop(tall)
    else:
      waiting[tall] = (scene_, img)
    for subset, row in benchmark_rows(scene_, rng).items():
      sc.setdefault(
          subset,
          {})[str(i)] = {"filename": name, "caption": row["caption"], "negative_caption": row["negative_caption"]}
      if not subset.startswith("add"):
        scpp.setdefault(subset, []).append({"id": i, "filename": name, **row})
    karpathy.append({
        "filepath": "", "filename": name, "split": "test", "cocoid": i,
        "sentences": [{"raw": c} for c in captions(scene_, rng)["coco"]]
    })
  for subset, rows in sc.items():
    with open(os.path.join(data, "sugarcrepe", f"{subset}.json"), "w") as f:
      json.dump(rows, f)
  for subset, rows in scpp.items():
    with open(os.path.join(data, "sugarcrepe_pp", f"{subset}.json"), "w") as f:
      json.dump(rows, f)
  with open(os.path.join(data, "retrieval", "coco_test.json"), "w") as f:
    json.dump({"images": karpathy}, f)
  with open(os.path.join(data, "collage", "swap_att.json"), "w") as f:
    json.dump(collages, f)
  write_manifest(os.path.join(data, BENCHMARKS_MANIFEST), benchmarks_record(n, seed))
  return {"data_dir": data, "image_dir": images}
