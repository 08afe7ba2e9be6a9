"""The synthetic world: real formats, and benchmarks made only of colour–shape bindings training never shows."""
import json
import re

from compclip_jax import synthetic
from compclip_jax.data.sources import CocoSource, CsvSource
from compclip_jax.evaluators import registry

OBJ = re.compile(r"\b(" + "|".join(synthetic.COLORS) + r") (" + "|".join(synthetic.SHAPES) + r")\b")


def _pairings(caption: str) -> set:
  """Pairing keys of every two colour–shape phrases a caption names (independent of the generator's objects)."""
  objs = [(None, c, s) for c, s in OBJ.findall(caption)]
  return {synthetic.pairing_key(a, b) for i, a in enumerate(objs) for b in objs[i + 1:]}


def test_world_and_benchmarks(tmp_path):
  world = synthetic.write_world(str(tmp_path / "w"), 120, seed=3)
  bench = synthetic.write_benchmarks(str(tmp_path / "b"), 40, seed=4)
  held = synthetic.held_out_pairings()
  n_colors, n_shapes = len(synthetic.COLORS), len(synthetic.SHAPES)
  pairings = n_colors * (n_colors - 1) // 2 * n_shapes * (n_shapes + 1) // 2  # colours choose 2 × shapes multichoose 2
  assert len(held) == round(synthetic.HELD_OUT_FRACTION * pairings) == 30
  src = CsvSource(world["csv"], world["images"])
  assert len(src) == 120 and not src.rejected
  counts = {len(OBJ.findall(src[i]["sentences"][0].split(",")[0])) for i in range(len(src))}
  assert counts == {1, 2}  # 1–3 objects (the third, after the comma, is named in a clause of its own)
  assert any("," in src[i]["sentences"][0] for i in range(len(src)))  # quoted in the CSV, read back whole
  coco = CocoSource(world["coco_json"], world["images"], ("train",))
  assert len(coco) == 120
  for i in range(len(coco)):  # no training caption names a held-out pairing
    assert all(not _pairings(s) & held for s in coco[i]["sentences"])
  sc = registry.load("sugarcrepe", bench["data_dir"], bench["image_dir"])
  rows = json.load(open(f"{bench['data_dir']}/sugarcrepe/swap_att.json"))
  for r in rows.values():  # benchmark captions are built on a held-out pairing; a swap keeps the words and the key
    assert _pairings(r["caption"]) & held
    assert sorted(r["caption"].split()) == sorted(r["negative_caption"].split())
    assert _pairings(r["negative_caption"]) & held
  pp = json.load(open(f"{bench['data_dir']}/sugarcrepe_pp/swap_att.json"))
  assert all(r["caption2"] != r["caption"] and _pairings(r["caption2"]) == _pairings(r["caption"]) for r in pp)
  assert len(sc.images) == 40
  assert registry.load("coco_retrieval", bench["data_dir"], bench["image_dir"]).task == "zeroshot_retrieval"


def test_summary_table_is_mean_and_sample_std_over_seeds():
  from compclip_jax import demo
  cols = {"pretrained": {"swap": [0.5, 0.6, 0.7]}, "clic": {"swap": [0.6, 0.6, 0.6], "replace": [0.9, 0.8, 1.0]}}
  lines = demo.summary_table(cols, [0, 1, 2]).splitlines()
  assert lines[0].startswith("| held-out benchmark (%), mean ± std over seeds 0, 1, 2 | pretrained | clic |")
  assert lines[2] == "| swap | 60.0 ± 10.0 | 60.0 ± 0.0 |"  # std with ddof=1: sqrt(((−10)² + 0 + 10²) / 2) = 10


def test_paired_table_is_the_change_per_seed():
  from compclip_jax import demo
  rows = demo.PAIRED_ROWS
  cols = {"pretrained": {r: [0.5, 0.6, 0.7] for r in rows}, "clic": {r: [0.6, 0.6, 0.9] for r in rows}}
  lines = demo.paired_table(cols).splitlines()
  assert len(lines) == 3 and lines[0].startswith("| change from the pretrained model")
  # per-seed changes +10, 0, +20 → mean +10, std sqrt((0² + 10² + 10²) / 2) = 10
  assert lines[2] == "| clic | " + " | ".join(["+10.0 ± 10.0"] * len(rows)) + " |"
  cols["clip"] = {r: [0.6, 0.5, 0.7] for r in rows}  # against a control: +0, +10, +20 points
  lines = demo.paired_table(cols, [("clic", "clip")], "change beyond its control").splitlines()
  assert lines[0].startswith("| change beyond its control (points)")
  assert lines[2] == "| clic − clip | " + " | ".join(["+10.0 ± 10.0"] * len(rows)) + " |"


def test_clic_negative_kinds_on_the_world(tmp_path):
  """The README's breakdown of what CLIC's negatives swap: a hand case for reading the moved word, then counts on a
  small world that add up and name only the world's kinds of words."""
  from compclip_jax import demo
  neg = "a white star below a red diamond. a green square above a blue circle."  # red ↔ green across the two
  assert demo._moved_word("a red square above a blue circle", neg) == "red"  # pylint: disable=protected-access
  assert demo._moved_word("a white star below a green diamond", neg) == "green"  # pylint: disable=protected-access
  kinds = [demo._word_kind(w) for w in ("blue", "star", "large", "left", "picture")]  # pylint: disable=protected-access
  assert kinds == ["colour", "shape", "size", "relation", "other"]
  world = synthetic.write_world(str(tmp_path / "w"), 60, seed=2)
  counts = demo.clic_negative_kinds(world["csv"], n=200, seed=1)
  assert sum(counts.values()) == 200
  assert set(counts) <= {"colour", "shape", "size", "relation", "other", "within one sentence", "none"}
  assert counts["colour"] + counts["shape"] > 50
