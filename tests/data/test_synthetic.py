"""The synthetic world: real formats, and benchmarks made only of colour–shape bindings training never shows."""
import json
import os
import re
import subprocess
import sys

import ml_collections
import pytest
import sentencepiece as spm
from PIL import Image

from tests import paths
from compclip_jax import assets
from compclip_jax.data.synthetic import scenes as synthetic
from compclip_jax.data.synthetic import benchmarks as synthetic_benchmarks
from compclip_jax.data import source_config
from compclip_jax.data.synthetic import world as world_source
from compclip_jax.data.negatives import SpacyTagger
from compclip_jax.data.sources import CocoSource, CsvSource
from compclip_jax.data.tokenizers import T5Tokenizer
from compclip_jax.evaluators import registry
from compclip_jax.evaluators import run as evaluation

OBJ = re.compile(r"\b(" + "|".join(synthetic.COLORS) + r") (" + "|".join(synthetic.SHAPES) + r")\b")


def _pairings(caption: str) -> set:
  """Pairing keys of every two colour–shape phrases a caption names (independent of the generator's objects)."""
  objs = [(None, c, s) for c, s in OBJ.findall(caption)]
  return {synthetic.pairing_key(a, b) for i, a in enumerate(objs) for b in objs[i + 1:]}


def test_world_and_benchmarks(tmp_path):
  world = synthetic.write_world(str(tmp_path / "w"), 120, seed=3)
  bench = synthetic_benchmarks.write_benchmarks(str(tmp_path / "b"), 40, seed=4)
  held = synthetic.held_out_pairings()
  n_colors, n_shapes = len(synthetic.COLORS), len(synthetic.SHAPES)
  pairings = n_colors * (n_colors - 1) // 2 * n_shapes * (n_shapes + 1) // 2  # colours choose 2 × shapes multichoose 2
  assert len(held) == round(synthetic.HELD_OUT_FRACTION * pairings) == 495
  src = CsvSource(world["csv"], world["images"])
  assert len(src) == 120 and not src.rejected
  counts = {len(OBJ.findall(src[i]["sentences"][0])) for i in range(len(src))}
  assert counts == {2}  # every first sentence names two objects
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
  collages = json.load(open(f"{bench['data_dir']}/collage/swap_att.json"))
  assert len(collages) >= 10
  for r in collages.values():  # two first sentences; the negative trades two colours between them, nothing else
    first, second = r["caption"].rstrip(".").split(". ")
    n1, n2 = r["negative_caption"].rstrip(".").split(". ")
    moved = [(x, y) for a, b in ((first, n1), (second, n2)) for x, y in zip(a.split(), b.split()) if x != y]
    assert len(moved) == 2 and moved[0] == moved[1][::-1] and all(w in synthetic.COLORS for w in moved[0])
    assert _pairings(first) & held and _pairings(second) & held
    assert Image.open(os.path.join(bench["image_dir"], r["filename"])).size == (128, 128)


SLOT_WORDS = {
    w: kind for kind, words in (("C", synthetic.COLORS), ("S", synthetic.SHAPES), ("Z", synthetic.SIZES),
                                ("T", synthetic.TEXTURES), ("R", synthetic.RELATIONS), ("W", synthetic.SCENES))
    for w in words
}


def test_captions_are_in_the_papers_regime(tmp_path):
  """World rule 1, read off the written CLIC CSV: every first sentence has 8–34 words, names two objects with two
  attributes each (size and colour), a relation and a scene word; every row has ≥ 3 further sentences of 4–34 words,
  from ≥ 20 templates (sentences with their content words replaced by their kind); the reference's filter keeps
  every row."""
  world = synthetic.write_world(str(tmp_path / "w"), 400, seed=1)
  rows = CsvSource(world["csv"], world["images"]).rows
  assert len(rows) == 400
  templates = set()
  for _, (first, *extra) in rows:
    words = first.split()
    assert 8 <= len(words) <= 34
    assert [SLOT_WORDS.get(w, w) for w in words] == ["a", "Z", "C", "S", "R", "a", "Z", "C", "S", "W"], first
    assert {words[1], words[6]} == set(synthetic.SIZES)  # one small, one large: the sizes are in every first sentence
    assert len(extra) >= 3 and all(4 <= len(e.split()) <= 34 for e in extra)
    templates |= {" ".join(SLOT_WORDS.get(w, w) for w in e.split()) for e in extra}
  assert len(templates) >= 20, sorted(templates)


def test_bag_of_words_world_has_the_same_images_and_exchanged_colours_and_shapes(tmp_path):
  """data.synthetic_binding_noise: the same images and phrasings as the clean world of the same seed; each caption
  names the two objects with their colours exchanged with probability p and, independently, their shapes exchanged
  with probability p (checked against the clean caption: each of the four cases about a quarter of the time)."""
  clean = synthetic.write_world(str(tmp_path / "clean"), 300, seed=5)
  bag = synthetic.write_world(str(tmp_path / "bag"), 300, seed=5, binding_noise=0.5)
  for i in (0, 7, 299):
    name = f"{i:05d}.png"
    assert open(f"{clean['images']}/{name}", "rb").read() == open(f"{bag['images']}/{name}", "rb").read()
  a, b = (json.load(open(w["coco_json"]))["images"] for w in (clean, bag))
  cases = {"same": 0, "colours": 0, "shapes": 0, "both": 0}
  for x, y in zip(a, b):
    for sx, sy in zip(x["sentences"], y["sentences"]):
      cx, cy = OBJ.findall(sx["raw"]), OBJ.findall(sy["raw"])
      assert len(cx) == len(cy) == 2
      assert sorted(sx["raw"].split()) == sorted(sy["raw"].split())  # same phrasing, same words
      (c1, s1), (c2, s2) = cx
      if cx[0][1] == cx[1][1] or cx[0][0] == cx[1][0]:
        continue  # one shape twice: an exchange of shapes changes nothing
      told = {((c1, s1), (c2, s2)): "same", ((c2, s1), (c1, s2)): "colours", ((c1, s2), (c2, s1)): "shapes",
              ((c2, s2), (c1, s1)): "both"}
      cases[told[tuple(cy)]] += 1
  total = sum(cases.values())
  assert all(0.18 < k / total < 0.32 for k in cases.values()), cases
  assert json.load(open(tmp_path / "bag" / "world.json"))["binding_noise"] == 0.5
  assert "binding_noise" not in json.load(open(tmp_path / "clean" / "world.json"))  # older manifests still match
  with pytest.raises(ValueError, match="binding_noise 0.7"):
    synthetic.write_world(str(tmp_path / "bad"), 10, seed=5, binding_noise=0.7)
  with pytest.raises(ValueError, match="holds other synthetic data"):  # the bag world is not the clean one
    synthetic.read_world(str(tmp_path / "bag"), 300, 5)


def test_summary_table_is_mean_and_sample_std_over_seeds():
  from compclip_jax.demo import tables  # pylint: disable=import-outside-toplevel
  cols = {"pretrained": {"swap": [0.5, 0.6, 0.7]}, "clic": {"swap": [0.6, 0.6, 0.6], "replace": [0.9, 0.8, 1.0]}}
  lines = tables.summary_table(cols, [0, 1, 2]).splitlines()
  assert lines[0].startswith("| held-out benchmark (%), mean ± std over seeds 0, 1, 2 | pretrained | clic |")
  assert lines[2] == "| swap | 60.0 ± 10.0 | 60.0 ± 0.0 |"  # std with ddof=1: sqrt(((−10)² + 0 + 10²) / 2) = 10


def test_paired_table_is_the_change_per_seed():
  from compclip_jax.demo import tables  # pylint: disable=import-outside-toplevel
  rows = tables.PAIRED_ROWS
  cols = {"pretrained": {r: [0.5, 0.6, 0.7] for r in rows}, "clic": {r: [0.6, 0.6, 0.9] for r in rows}}
  lines = tables.paired_table(cols).splitlines()
  assert len(lines) == 3 and lines[0].startswith("| change from the pretrained model")
  # per-seed changes +10, 0, +20 → mean +10, std sqrt((0² + 10² + 10²) / 2) = 10
  assert lines[2] == "| clic | " + " | ".join(["+10.0 ± 10.0 (+10.0 / +0.0 / +20.0)"] * len(rows)) + " |"
  cols["clip"] = {r: [0.6, 0.5, 0.7] for r in rows}  # against a control: +0, +10, +20 points
  lines = tables.paired_table(cols, [("clic", "clip")], "change beyond its control").splitlines()
  assert lines[0].startswith("| change beyond its control (points)")
  assert lines[2] == "| clic − clip | " + " | ".join(["+10.0 ± 10.0 (+0.0 / +10.0 / +20.0)"] * len(rows)) + " |"


def test_clic_negative_kinds_on_the_world(tmp_path):
  """World rule 3: what CLIC's negatives trade on the world's first sentences, from the exact distribution of the
  reference's choices with spaCy's real tags: a hand case for reading the traded words, then ≥ 90 % of the negatives
  trade two content words of one kind (colour ↔ colour, shape ↔ shape, relation ↔ relation, scene ↔ scene)."""
  from compclip_jax.demo import diagnose as diagnostics  # pylint: disable=import-outside-toplevel
  a, b = "a small red heart above a large blue star outdoors", "a large green ring below a small pink drop aloft"
  neg = "a large red ring below a small pink drop aloft. a small green heart above a large blue star outdoors."
  assert diagnostics.traded_words((a, b), neg) == ("red", "green")  # the join order read off the fewest changes
  kinds = [diagnostics.word_kind(w) for w in ("blue", "star", "large", "beside", "aloft", "a")]
  assert kinds == ["colour", "shape", "size", "relation", "scene", "other"]
  world = synthetic.write_world(str(tmp_path / "w"), 80, seed=2)
  counts = diagnostics.clic_negative_kinds(world["csv"], n=60, seed=1)
  assert abs(sum(counts.values()) - 1) < 1e-9
  assert counts.get("colour ↔ colour", 0) > 0.1 and counts.get("shape ↔ shape", 0) > 0.1
  assert diagnostics.same_kind_share(counts) >= 0.9, counts
  assert abs(diagnostics.same_kind_share({"colour ↔ size": 0.3, "shape ↔ shape": 0.6, "none": 0.1}) - 2 / 3) < 1e-12


def test_swap_twins_by_hand():
  """A swap twin: the same two shapes with the colours exchanged (a same-shape scene is not its own twin)."""
  from compclip_jax.demo import diagnose as diagnostics  # pylint: disable=import-outside-toplevel
  obj = lambda c, s: ("small", c, s, "plain")
  scene = lambda *o: {"objects": list(o), "relation": "above", "scene": "aloft"}
  scenes = [
      scene(obj("red", "star"), obj("blue", "ring")),
      scene(obj("blue", "star"), obj("red", "ring")),
      scene(obj("red", "star"), obj("blue", "star")),
      scene(obj("pink", "drop"), obj("gray", "oval"))
  ]
  assert diagnostics.swap_twin_rate(scenes, batch=4) == 0.5  # the first two, each other's twin
  assert diagnostics.swap_twin_rate(scenes * 2, batch=8) == 1 - 2 / 8  # the same-shape one now has its twin too


def test_the_world_has_few_swap_twins_in_a_batch(tmp_path):
  """World rule 2: in batches of 32 of the demo's world (16,000 scenes), < 1 % of the images have their exact
  colour-swapped twin in the batch (5 colours × 5 shapes gave 8.5 %)."""
  from compclip_jax.demo import diagnose as diagnostics  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  held = synthetic.held_out_pairings()
  scenes = [synthetic.scene(rng, held) for _ in range(16000)]
  assert diagnostics.swap_twin_rate(scenes, 32) < 0.01


# ------------------------------------------------------------------------------------- the world as a data source
def _snapshot(root) -> dict:
  """{relative path: (bytes, mtime_ns)} of every file under root."""
  out = {}
  for d, _, files in os.walk(root):
    for f in files:
      path = os.path.join(d, f)
      with open(path, "rb") as fh:
        out[os.path.relpath(path, root)] = (fh.read(), os.stat(path).st_mtime_ns)
  return out


class _CountingTagger(SpacyTagger):
  calls = 0

  def __call__(self, sentences):
    type(self).calls += 1
    return super().__call__(sentences)


def test_synthetic_source_is_written_once_and_read_back_identically(tmp_path, monkeypatch):
  """Process 0 writes (world + analyses + manifest), then every process reads; a second start writes nothing."""
  root = str(tmp_path / "world")
  met = []
  with pytest.raises(FileNotFoundError, match="world.json missing"):  # a reader never writes
    world_source.synthetic_source(root, 24, 5, "csv", process_index=1, barrier=met.append)
  first = world_source.synthetic_source(root, 24, 5, "csv", process_index=0, barrier=met.append,
                                        tagger=_CountingTagger())
  assert _CountingTagger.calls == 1 and met == ["synthetic world written"] * 2
  files = _snapshot(root)
  assert {"world.json", "clic_rows.csv", "dataset_coco.json", "paraphrases.json", "analyses.json"} <= set(files)
  # a second start — process 0 again, then another process — renders, tags and writes nothing
  monkeypatch.setattr(synthetic, "render", lambda *a: pytest.fail("the world was rendered a second time"))
  again = world_source.synthetic_source(root, 24, 5, "csv", process_index=0, tagger=_CountingTagger())
  other = world_source.synthetic_source(root, 24, 5, "coco", process_index=1)
  assert _CountingTagger.calls == 1 and _snapshot(root) == files
  assert len(first) == len(again) == len(other) == 24
  for i in range(24):
    assert first[i] == again[i]  # the same rows, images and cached analyses
  plain_csv = CsvSource(os.path.join(root, "clic_rows.csv"), os.path.join(root, "images"))
  assert [first[i]["sentences"] for i in range(24)] == [plain_csv[i]["sentences"] for i in range(24)]
  assert [other[i]["paraphrases"] for i in range(24)] and all(other[i]["paraphrases"] for i in range(24))
  with pytest.raises(ValueError, match="size 24 .asked: 25."):  # another world in the same folder is refused
    world_source.synthetic_source(root, 25, 5, "csv")


def test_cached_analyses_are_what_the_tagger_computes(tmp_path):
  """The analysis the synthetic source hands the sample builders = spaCy's on that very sentence, tagged alone."""
  world = world_source.synthetic_source(str(tmp_path / "w"), 30, 1, "coco")
  fresh = SpacyTagger()
  for i in range(len(world)):
    rec = world.materialize(world[i])
    assert len(rec["analysis"]) == len(rec["sentences"])
    for sentence, cached in zip(rec["sentences"], rec["analysis"]):
      assert cached == fresh([sentence])[0], sentence


def test_make_source_reads_the_config(tmp_path):
  d = ml_collections.ConfigDict(
      dict(source="synthetic", path="", image_root="", paraphrases="", splits=("train",), synthetic_size=0,
           synthetic_format="tsv", synthetic_binding_noise=0.6, any_image_format=False))
  assert source_config.config_errors(d) == [
      "data.synthetic_size 0: the synthetic world needs ≥ 1 scene",
      "data.synthetic_format 'tsv': use one of ('csv', 'coco')",
      "data.synthetic_binding_noise 0.6: a probability in [0, 0.5]"
  ]
  d.synthetic_size, d.synthetic_format, d.synthetic_binding_noise = 16, "csv", 0.0
  assert source_config.config_errors(d) == []
  src = source_config.make_source(d, str(tmp_path), seed=2)  # default place: <workdir>/world
  assert len(src) == 16 and (tmp_path / "world" / "world.json").exists()
  assert json.load(open(tmp_path / "world" / "world.json")) == synthetic.world_record(16, 2)


def test_eval_source_writes_the_held_out_benchmarks_once(tmp_path, monkeypatch):
  e = ml_collections.ConfigDict(
      dict(source="synthetic", benchmarks=("sugarcrepe",), data_dir="", image_dir="", synthetic_size=12, tie="strict"))
  assert evaluation.config_errors(e) == []
  met = []
  data_dir, image_dir = evaluation.benchmark_dirs(e, str(tmp_path), seed=3, barrier=met.append)
  assert data_dir == str(tmp_path / "world" / "benchmarks") and image_dir == os.path.join(data_dir, "images")
  assert met == ["synthetic benchmarks written"]
  files = _snapshot(data_dir)
  monkeypatch.setattr(synthetic, "render", lambda *a: pytest.fail("the benchmarks were rendered a second time"))
  assert evaluation.benchmark_dirs(e, str(tmp_path), seed=3, process_index=1) == (data_dir, image_dir)
  assert evaluation.benchmark_dirs(e, str(tmp_path), seed=3) == (data_dir, image_dir) and _snapshot(data_dir) == files
  task = registry.load("sugarcrepe", data_dir, image_dir)
  assert len(task.images) == 12 and task.task
  assert json.load(open(os.path.join(data_dir, "benchmarks.json"))) == synthetic_benchmarks.benchmarks_record(
      12, 3 + evaluation.SYNTHETIC_SEED_OFFSET)
  e.synthetic_size = 13
  with pytest.raises(ValueError, match="size 12"):
    evaluation.benchmark_dirs(e, str(tmp_path), seed=3)
  files_cfg = ml_collections.ConfigDict(
      dict(source="files", benchmarks=("sugarcrepe",), data_dir=str(tmp_path / "no"), image_dir=image_dir,
           synthetic_size=0, tie="strict"))
  assert evaluation.config_errors(files_cfg) == [f"evals.data_dir {str(tmp_path / 'no')!r} is not a directory"]


# ------------------------------------------------------------------------------------------ the bundled tokenizer
def test_bundled_t5_tokenizer_covers_every_sentence_of_a_world(tmp_path):
  """Every sentence a world and its benchmarks write (another seed than the tokenizer's corpus) tokenises without an
  unknown piece and decodes back to itself."""
  tok = T5Tokenizer(assets.SYNTHETIC_SPIECE)
  sp = tok.sp
  assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)  # T5's special ids
  world = synthetic.write_world(str(tmp_path / "w"), 150, seed=11)
  bench = synthetic_benchmarks.write_benchmarks(str(tmp_path / "b"), 80, seed=12)
  sentences = [s for im in json.load(open(world["coco_json"]))["images"] for s in (x["raw"] for x in im["sentences"])]
  sentences += [s for r in CsvSource(world["csv"], world["images"]).rows for s in r[1]]
  sentences += [p for ps in json.load(open(world["paraphrases"])).values() for p in ps]
  for name in os.listdir(os.path.join(bench["data_dir"], "sugarcrepe_pp")):
    for r in json.load(open(os.path.join(bench["data_dir"], "sugarcrepe_pp", name))):
      sentences += [r["caption"], r["caption2"], r["negative_caption"]]
  for name in os.listdir(os.path.join(bench["data_dir"], "sugarcrepe")):
    sentences += [
        r["negative_caption"] for r in json.load(open(os.path.join(bench["data_dir"], "sugarcrepe", name))).values()
    ]
  sentences = sorted(set(sentences))
  assert len(sentences) > 1000
  for s in sentences:
    ids = sp.encode(s)
    assert sp.unk_id() not in ids, (s, sp.encode(s, out_type=str))
    assert sp.decode(ids) == s


def test_bundled_t5_tokenizer_is_what_its_command_trains(tmp_path):
  """The shipped file is reproducible: `python -m compclip_jax synthetic --t5_tokenizer=…` trains the same pieces."""
  fresh = str(tmp_path / "sp.model")
  subprocess.run([sys.executable, "-m", "compclip_jax", "synthetic", f"--t5_tokenizer={fresh}"], check=True,
                 capture_output=True, cwd=paths.ROOT)
  pieces = lambda path: [(p.id_to_piece(i), p.get_score(i)) for p in [spm.SentencePieceProcessor(model_file=path)]
                         for i in range(p.get_piece_size())]
  assert pieces(fresh) == pieces(assets.SYNTHETIC_SPIECE)


def test_hypothesis_is_ahead_on_every_seed_and_at_most_one_point_of_r5_lost():
  from compclip_jax.demo import tables  # pylint: disable=import-outside-toplevel
  rows = tables.HYPOTHESIS_SWAP + tables.HYPOTHESIS_R5
  cols = {"clip": {r: [0.5, 0.5, 0.5] for r in rows}, "clic": {r: [0.6, 0.51, 0.7] for r in rows}}
  cols["clic"]["retrieval text R@5"] = [0.49, 0.49, 0.49]  # −1 point on every seed: allowed
  assert tables.hypothesis_met(cols, "clic", "clip")
  line = tables.hypothesis_table(cols, [("clic", "clip")]).splitlines()[2]
  assert line == "| clic − clip | +10.0 / +1.0 / +20.0 | +10.0 / +1.0 / +20.0 | +10.3 / -1.0 | yes |"
  cols["clic"]["retrieval text R@5"] = [0.48, 0.49, 0.49]  # −1.3 points on average
  assert not tables.hypothesis_met(cols, "clic", "clip")
  cols["clic"]["retrieval text R@5"] = [0.5, 0.5, 0.5]
  cols["clic"]["SugarCrepe++ swap ITT"] = [0.6, 0.5, 0.9]  # a tie on one seed is not ahead
  assert not tables.hypothesis_met(cols, "clic", "clip")
  assert tables.hypothesis_table(cols, [("clic", "clip")]).endswith("| **no** |")
