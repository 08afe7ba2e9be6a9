"""Benchmark loaders on the real annotation files and on synthetic records in our documented schemas, the end-to-end
path with a stub encoder of known accuracy (a deliberate tie included), and a cross-check against transformers."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests import paths
from compclip_jax.evaluators.run import run_benchmarks
from compclip_jax.evaluators import registry
from compclip_jax.evaluators.tasks import ImageRef

ROOT = paths.ROOT


def _random_score(task, tie="strict", seed=0):
  rng = np.random.default_rng(seed)
  unit = lambda n: (lambda x: x / np.linalg.norm(x, axis=1, keepdims=True))(rng.standard_normal((n, 8)))
  return task.score(unit(len(task.images)), unit(len(task.texts)), tie)


# ------------------------------------------------------------------------------------------- real annotation files
def test_sugarcrepe_real_files(benchmarks_dir, tmp_path):
  task = registry.load("sugarcrepe", str(benchmarks_dir), str(tmp_path))
  m = _random_score(task)
  assert sum(m[f"{s}/count"] for s in ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att",
                                       "swap_obj")) == 7511
  assert m["swap_obj/count"] == 245
  assert 0.3 < m["mean"] < 0.7  # random embeddings: chance
  assert all(isinstance(r, ImageRef) for r in task.images.items)


def test_sugarcrepe_pp_real_files(benchmarks_dir, tmp_path):
  m = _random_score(registry.load("sugarcrepe_pp", str(benchmarks_dir), str(tmp_path)))
  assert sum(m[f"{s}/count"] for s in ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")) == 4757
  assert {"replace/itt", "swap/itt", "mean/tot"} <= set(m)


def test_cola_real_file(benchmarks_dir, tmp_path):
  task = registry.load("cola", str(benchmarks_dir), str(tmp_path))
  assert _random_score(task)["count"] == 210
  assert all("/" not in os.path.relpath(r.path, tmp_path) for r in task.images.items)  # URL base names


def test_valse_real_files_keep_only_valid_rows(benchmarks_dir, tmp_path):
  m = _random_score(registry.load("valse", str(benchmarks_dir), str(tmp_path)))
  total_valid = 0
  for f in sorted((benchmarks_dir / "valse").glob("*.json")):
    rows = json.loads(f.read_text()).values()
    valid = sum(1 for r in rows if r["mturk"]["caption"] >= 2)
    assert m[f"{f.stem}/count"] == valid, f.stem
    total_valid += valid
  assert 0 < total_valid < 8782


# ------------------------------------------------------------------------------------ synthetic records (schemas)
def _img(path, size=(40, 30)):
  path.parent.mkdir(parents=True, exist_ok=True)
  Image.new("RGB", size, (120, 30, 200)).save(path)


def test_synthetic_winoground_records(tmp_path):
  (tmp_path / "winoground").mkdir()
  rows = [{
      "id": i, "caption_0": f"a {i}", "caption_1": f"b {i}", "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1"
  } for i in range(3)]
  (tmp_path / "winoground" / "examples.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
  task = registry.load("winoground", str(tmp_path), str(tmp_path / "img"))
  assert len(task.images) == 6 and task.images.items[0].path.endswith("ex_0_img_0.png")
  assert _random_score(task)["count"] == 3


def test_synthetic_aro_records(tmp_path):
  (tmp_path / "aro").mkdir()
  rel = [{
      "image_id": str(i), "image_path": f"{i}.jpg", "bbox_x": 1, "bbox_y": 2, "bbox_w": 10, "bbox_h": 12,
      "true_caption": f"the cup is on the table {i}", "false_caption": f"the table is on the cup {i}",
      "relation_name": ["on", "near"][i % 2]
  } for i in range(6)]
  (tmp_path / "aro" / "visual_genome_relation.json").write_text(json.dumps(rel))
  att = [{**r, "attributes": ["white", "black"] if i < 30 else ["red", "blue"]} for i, r in enumerate(rel * 6)]
  (tmp_path / "aro" / "visual_genome_attribution.json").write_text(json.dumps(att))
  vgr = registry.load("vg_relation", str(tmp_path), str(tmp_path))
  assert vgr.images.items[0].box == (1, 2, 10, 12)
  m = _random_score(vgr)
  assert m["groups"] == 1  # 'near' is in ARO's excluded (symmetric) list; 'on' is kept
  assert _random_score(registry.load("vg_attribution", str(tmp_path), str(tmp_path)))["groups"] == 1  # ≥ 25 rows
  coco = [{
      "image": f"val2014/{i}.jpg",
      "caption": [f"A man riding a brown horse on the beach number {i}.", f"Two dogs play with a red ball {i}."]
  } for i in range(3)]
  (tmp_path / "aro" / "coco_karpathy_test.json").write_text(json.dumps(coco))
  task = registry.load("coco_order", str(tmp_path), str(tmp_path), cache_dir=str(tmp_path / "cache"), seed=0)
  negatives = tmp_path / "cache" / "coco_order.seed0.json"
  options = json.loads(negatives.read_text())
  assert len(options) == 6 and all(len(o) == 5 for o in options)
  assert options[0][0] == "a man riding a brown horse on the beach number 0"
  assert all(sorted(o[0].split()) == sorted(x.split()) for o in options for x in o[1:])  # permutations
  again = registry.load("coco_order", str(tmp_path), str(tmp_path), cache_dir=str(tmp_path / "cache"), seed=0)
  assert again.texts.items == task.texts.items  # read back from the file, not regenerated


def test_synthetic_whatsup_records(tmp_path):
  (tmp_path / "whatsup").mkdir()
  ctrl = [{
      "image_path": f"data/controlled_images/mug_{r}_table.jpeg",
      "caption_options": [f"a mug {r} a table", "x", "y", "z"]
  } for r in ("left", "right", "on", "under")]
  (tmp_path / "whatsup" / "controlled_images_dataset.json").write_text(json.dumps(ctrl))
  (tmp_path / "whatsup" / "coco_qa_one_obj.json").write_text(json.dumps([[139, "a cat on top", "a cat below"]]))
  task = registry.load("whatsup", str(tmp_path), str(tmp_path))
  assert any(r.path.endswith("000000000139.jpg") for r in task.images.items)
  m = _random_score(task)
  assert {"controlled_images_dataset/pair", "controlled_images_dataset/set", "coco_qa_one_obj/individual"} <= set(m)


def test_synthetic_crepe_records(tmp_path):
  (tmp_path / "crepe").mkdir()
  (tmp_path / "crepe" / "systematicity.csv").write_text(
      'image_path,x,y,width,height,caption,hard_negs\n1.jpg,0,0,5,5,a dog on grass,"[""a grass on dog"", ""a cat""]"\n')
  task = registry.load("crepe", str(tmp_path), str(tmp_path))
  assert len(task.texts) == 3 and task.images.items[0].box == (0.0, 0.0, 5.0, 5.0)
  (tmp_path / "crepe" / "bad.csv").write_text("image_path,x\n1.jpg,zero\n")
  with pytest.raises(ValueError, match=r"bad\.csv:2"):
    registry.load("crepe", str(tmp_path), str(tmp_path))


def test_synthetic_retrieval_records_both_layouts(tmp_path):
  (tmp_path / "retrieval").mkdir()
  karpathy = {
      "images": [{
          "filepath": "val2014", "filename": f"{i}.jpg", "split": s, "sentences": [{"raw": f"A Dog, number {i}!"},
                                                                                   {"raw": "Same caption."}]
      } for i, s in enumerate(["test", "test", "train"])]
  }
  (tmp_path / "retrieval" / "coco_test.json").write_text(json.dumps(karpathy))
  task = registry.load("coco_retrieval", str(tmp_path), str(tmp_path))
  assert len(task.images) == 2 and "a dog number 0" in task.texts.items and "same caption" in task.texts.items
  m = _random_score(task)
  assert m["texts"] == 4 and m["images"] == 2  # the shared caption is encoded once, queried twice
  (tmp_path / "retrieval" / "flickr30k_test.json").write_text(json.dumps([{"image": "a.jpg", "caption": ["x", "y"]}]))
  assert _random_score(registry.load("flickr30k_retrieval", str(tmp_path), str(tmp_path)))["texts"] == 2


def test_synthetic_zeroshot_folders(tmp_path):
  for c in ("golden_retriever", "tabby_cat"):
    for k in range(2):
      _img(tmp_path / "images" / "pets" / c / f"{k}.jpg")
  task = registry.load("zeroshot:pets", str(tmp_path), str(tmp_path / "images"))
  assert len(task.images) == 4 and len(task.texts) == 160  # 2 classes × 80 OpenAI templates
  assert "a bad photo of a golden retriever." in task.texts.items
  assert _random_score(task)["count"] == 4


# -------------------------------------------------------------------------------- end to end, stub encoder
class StubEncoder:
  """Every image embeds to e0; a text embeds to e0 when it contains 'good' or 'tie', else e1."""
  def images(self, refs, desc="", bad=None, strict=False):
    for k, r in enumerate(refs):  # a missing image: refused with `strict`, else recorded in `bad`, as Encoder does
      if not os.path.exists(r.path):
        if strict or bad is None:
          raise FileNotFoundError(r.path)
        bad[k] = "not found"
    return np.tile([[1.0, 0.0]], (len(refs), 1))

  def texts(self, texts, desc=""):
    return np.array([[1.0, 0.0] if ("good" in t or "tie" in t) else [0.0, 1.0] for t in texts])


def _stub_sugarcrepe(tmp_path):
  rows = {"0": ("good a", "bad a"), "1": ("bad b", "good b"), "2": ("good c", "tie c"), "3": ("good d", "bad d")}
  for s in ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"):
    data = {k: {"filename": f"{k}.jpg", "caption": p, "negative_caption": n} for k, (p, n) in rows.items()}
    (tmp_path / "data" / "sugarcrepe").mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "sugarcrepe" / f"{s}.json").write_text(json.dumps(data))
  for k in rows:
    _img(tmp_path / "images" / f"{k}.jpg")


def test_end_to_end_with_a_stub_encoder_and_a_tie(tmp_path):
  _stub_sugarcrepe(tmp_path)
  data, images = str(tmp_path / "data"), str(tmp_path / "images")
  strict = run_benchmarks(StubEncoder(), ["sugarcrepe"], data, images, "strict")["sugarcrepe"]["metrics"]
  lenient = run_benchmarks(StubEncoder(), ["sugarcrepe"], data, images, "lenient")["sugarcrepe"]["metrics"]
  assert strict["swap_obj"] == 0.5 and strict["mean"] == 0.5  # 2 right, 1 wrong, 1 tie (wrong)
  assert lenient["swap_obj"] == 0.75 and lenient["add"] == 0.75  # the tie counts
  os.remove(tmp_path / "images" / "2.jpg")  # skipped with its examples (the tie), counted; refused with strict
  skipped = run_benchmarks(StubEncoder(), ["sugarcrepe"], data, images)["sugarcrepe"]
  assert skipped["metrics"]["swap_obj"] == 2 / 3 and skipped["metrics"]["swap_obj/count"] == 3
  assert skipped["metrics"]["skipped_images"] == 1 and skipped["metrics"]["skipped_examples"] == 7
  assert skipped["skipped_images"] == [{"image": str(tmp_path / "images" / "2.jpg"), "reason": "not found"}]
  with pytest.raises(FileNotFoundError, match="2.jpg"):
    run_benchmarks(StubEncoder(), ["sugarcrepe"], data, images, strict=True)


def test_all_says_what_it_skipped(tmp_path):
  _stub_sugarcrepe(tmp_path)
  names, skipped = registry.resolve(["all"], str(tmp_path / "data"), str(tmp_path / "images"))
  assert names == ["sugarcrepe"]
  assert "winoground" in skipped and "examples.jsonl not found" in skipped["winoground"]
  with pytest.raises(ValueError, match="unknown benchmark"):
    registry.resolve(["sugarcrep"], "", "")


# ------------------------------------------------------------------------------- cross-check with transformers
@pytest.mark.slow
def test_cli_matches_a_transformers_scoring_loop(benchmarks_dir, tmp_path):
  """A random HF CLIPModel scored by `python -m compclip_jax evaluate` and by a PyTorch loop written here."""
  import torch
  import transformers
  from compclip_jax.data.tokenizers import CLIPTokenizer
  from tests import hf_fixtures as fx
  hf = fx.random_hf_clip(fx.hf_clip_config(), seed=7)
  hf.save_pretrained(tmp_path / "model")
  rows = {
      s: json.loads((benchmarks_dir / "sugarcrepe" / f"{s}.json").read_text())
      for s in ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
  }
  files = sorted({r["filename"] for d in rows.values() for r in d.values()})
  (tmp_path / "images").mkdir()
  for k, f in enumerate(files):  # placeholder images, different per file
    rng = np.random.default_rng(k)
    Image.fromarray(rng.integers(0, 256, (24 + k % 17, 30 + k % 11, 3), dtype=np.uint8)).save(tmp_path / "images" / f)
  out = tmp_path / "res"
  proc = subprocess.run([
      sys.executable, "-m", "compclip_jax", "evaluate", f"--model={tmp_path / 'model'}", "--benchmark=sugarcrepe",
      f"--data_dir={benchmarks_dir}", f"--image_dir={tmp_path / 'images'}", f"--output={out}", "--batch_size=512"
  ], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
  assert proc.returncode == 0, proc.stderr[-3000:]
  records = {r["dataset"]: r for r in _clip_benchmark_build(out)}
  assert sorted(records) == [f"sugar_crepe/{s}" for s in sorted(rows)]
  assert all(r["language"] == "en" and r["task"] == "image_caption_selection" for r in records.values())
  assert (out / "results.md").exists() and "| sugarcrepe | swap_att |" in (out / "results.md").read_text()
  # the PyTorch loop
  proc_ = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
  tok = CLIPTokenizer.default(pad_id=49407)
  with torch.no_grad():
    img = {}
    for k in range(0, len(files), 256):
      px = proc_(images=[Image.open(tmp_path / "images" / f) for f in files[k:k + 256]], return_tensors="pt")
      e = fx.hf_image(hf, px["pixel_values"].numpy().transpose(0, 2, 3, 1))
      img.update(zip(files[k:k + 256], e / np.linalg.norm(e, axis=1, keepdims=True)))
    for subset, data in rows.items():
      caps = [r["caption"] for r in data.values()] + [r["negative_caption"] for r in data.values()]
      t = fx.hf_text(hf, tok(caps))
      t = t / np.linalg.norm(t, axis=1, keepdims=True)
      n = len(data)
      ims = np.stack([img[r["filename"]] for r in data.values()])
      acc = float(np.mean(np.sum(ims * t[:n], 1) > np.sum(ims * t[n:], 1)))
      assert records[f"sugar_crepe/{subset}"]["acc"] == pytest.approx(acc, abs=1e-12), subset


# ------------------------------------------------------------------------------------ clip_benchmark's output format
def _clip_benchmark_build(folder) -> list[dict]:
  """clip_benchmark 1.6.2's `build` reader (`clip_benchmark/cli.py:main_build`), restated: it cannot be imported here
  (its cli imports torchvision, whose PyPI wheel needs CUDA torch). For a folder it reads every name ending in
  `.json`, `json.load`s it, takes `data["metrics"]` (a KeyError if absent), merges the rest of the record over it,
  drops `metrics` and adds `model_fullname = model + ' ' + pretrained`."""
  rows = []
  for f in os.listdir(folder):
    if f.endswith(".json"):
      data = json.load(open(os.path.join(folder, f)))
      row = dict(data["metrics"])
      row.update(data)
      del row["metrics"]
      row["model_fullname"] = row["model"] + " " + row["pretrained"]
      rows.append(row)
  return rows


def test_output_folder_is_what_clip_benchmark_build_reads(tmp_path):
  from compclip_jax.evaluators import output
  subsets = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
  sugarcrepe = {**{s: 0.5 + i / 100 for i, s in enumerate(subsets)}, **{f"{s}/count": 10 for s in subsets}}
  results = {
      "sugarcrepe": {
          "task": "compositionality", "dataset": "sugarcrepe", "metrics": {**sugarcrepe, "mean": 0.53, "seconds": 1.0}
      },
      "winoground": {
          "task": "compositionality", "dataset": "winoground",
          "metrics": {"text": 0.3, "image": 0.2, "group": 0.1, "count": 400, "seconds": 2.0}
      },
      "coco_retrieval": {
          "task": "zeroshot_retrieval", "dataset": "coco_retrieval",
          "metrics": {"image_retrieval_recall@1": 0.3, "text_retrieval_recall@1": 0.5, "images": 5, "texts": 25}
      },
      "vg_relation": {"task": "compositionality", "dataset": "vg_relation", "metrics": {"macro": 0.6}},
  }
  written = output.write(str(tmp_path / "out"), results, "ViT-B-32", "/ckpts/my run/step_100", "strict",
                         {"valse": "valse not found"})
  names = sorted(os.path.basename(p) for p in written)
  # clip_benchmark's naming: {dataset with / → _}_{pretrained}_{model}_{language}_{task}.json
  assert "sugar_crepe_swap_att_step_100_ViT-B-32_en_image_caption_selection.json" in names
  assert "mscoco_captions_step_100_ViT-B-32_en_zeroshot_retrieval.json" in names
  assert "winoground_step_100_ViT-B-32_en_image_caption_selection.json" in names
  assert {"results.md", "skipped.jsonl"} <= set(names) and len(names) == 7 + 3 + 2
  rows = {r["dataset"]: r for r in _clip_benchmark_build(tmp_path / "out")}
  assert len(rows) == 10
  assert rows["sugar_crepe/swap_att"]["acc"] == 0.55 and rows["sugar_crepe/swap_att"]["tie_rule"] == "strict"
  assert (rows["winoground"]["acc"], rows["winoground"]["text_acc"], rows["winoground"]["image_acc"]) == (0.1, 0.3, 0.2)
  assert rows["mscoco_captions"]["image_retrieval_recall@1"] == 0.3
  assert rows["vg_relation"]["macro"] == 0.6 and rows["vg_relation"]["task"] == "compositionality"
  assert rows["sugar_crepe/add_att"]["model_fullname"] == "ViT-B-32 /ckpts/my run/step_100"
  assert json.loads(
      (tmp_path / "out" / "skipped.jsonl").read_text()) == {"benchmark": "valse", "reason": "valse not found"}


def test_whatsup_pairs_and_sets_that_lost_an_image_are_left_out(tmp_path):
  """Hand-computed: mug left ✓, mug right (skipped), mug on ✓, mug under ✗, cup left ✓, cup right ✓. Scored on the
  rows left, the mug's left/right pair would count as all correct on its one row (pair 2/3, set 1/2); left out, the
  pairs are mug on/under ✗ and cup left/right ✓ (1/2) and the one set is the cup's (1/1)."""
  (tmp_path / "whatsup").mkdir()
  stems = ["mug_left_table", "mug_right_table", "mug_on_table", "mug_under_table", "cup_left_box", "cup_right_box"]
  right = {
      "mug_left_table": True, "mug_right_table": False, "mug_on_table": True, "mug_under_table": False,
      "cup_left_box": True, "cup_right_box": True
  }
  ctrl = [{"image_path": f"data/{s}.jpeg", "caption_options": [f"{s} {k}" for k in range(4)]} for s in stems]
  (tmp_path / "whatsup" / "controlled_images_dataset.json").write_text(json.dumps(ctrl))
  task = registry.load("whatsup", str(tmp_path), str(tmp_path))
  row = {os.path.splitext(os.path.basename(r.path))[0]: i for i, r in enumerate(task.images.items)}
  img = np.eye(len(task.images))  # image row i is e_i
  txt = np.zeros((len(task.texts), len(stems)))
  for t, caption in enumerate(task.texts.items):
    stem, k = caption.rsplit(" ", 1)
    # the true caption (option 0) scores 1; the others 0.5 where the row is to be right, 2 where wrong
    txt[t, row[stem]] = 1.0 if k == "0" else (0.5 if right[stem] else 2.0)
  assert task.skip_images({row["mug_right_table"]: "cannot be read"}) == 1
  m = task.score(img, txt, "strict")
  assert m["controlled_images_dataset/individual"] == pytest.approx(0.8) and m["controlled_images_dataset/count"] == 5
  c = "controlled_images_dataset"
  assert (m[f"{c}/pair"], m[f"{c}/set"]) == (0.5, 1.0), m  # not (2/3, 1/2)
  assert (m[f"{c}/pair_count"], m[f"{c}/pair_skipped"], m[f"{c}/set_count"], m[f"{c}/set_skipped"]) == (2, 1, 1, 1)
