"""TFDS as a source and an output, without TensorFlow (data/tfds_source.py): a `coco_captions/2014:1.1.0` built
offline from the COCO JSON fixture reads as the JSON does; bad records are counted; every naming mistake is one line;
the pipeline resumes exactly and runs in grain workers; `prepare --format=tfds` writes a dataset TFDS itself reads;
COCO retrieval from TFDS scores as from the JSON and its image folder."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import tfds_fixtures as tf_fix
from compclip_jax import methods
from compclip_jax.data import pipeline as pl
from compclip_jax.data import samples
from compclip_jax.data import source_config
from compclip_jax.data.prepare import prepare
from compclip_jax.data.records import BadRecord
from compclip_jax.data.sources import CocoSource, PreparedSource
from compclip_jax.data.tfds_source import TfdsSource, lookup, split_sentences
from compclip_jax.methods.read import samples as read_samples
from compclip_jax.train import config as config_lib


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
  """(data_dir, Karpathy JSON, image root, paraphrases): 24 images + 4 broken ones, 5 captions each."""
  return tf_fix.write_coco_captions(tmp_path_factory.mktemp("coco"))


def _no_tensorflow():
  assert not any(m == "tensorflow" or m.startswith("tensorflow.") for m in sys.modules), "TensorFlow was imported"


def _outcome(materialize, raw):
  try:
    return materialize(raw)
  except BadRecord as e:
    return e.reason


def test_coco_captions_reads_as_the_karpathy_json_does(coco):
  """Every record of each split: the same captions and pixels as the JSON source's, or the same skip reason."""
  data_dir, karpathy, root, _ = coco
  for split in ("train", "test", "restval"):
    src = TfdsSource(tf_fix.COCO_NAME, str(data_dir), split)
    ref = CocoSource(str(karpathy), str(root), (split,))
    want = {r["id"]: r for r in (ref[i] for i in range(len(ref))) if os.path.exists(r["image_path"])}
    want |= {r.where.split("cocoid ")[1].split(",")[0]: "no_captions" for r in ref.rejected}  # read-time there
    got = {}
    for i in range(len(src)):
      rec = _outcome(src.materialize, src[i])
      rid = str(src[i]["example"]["image/id"])
      got[rid] = rec
      w = want[rid]
      if isinstance(w, dict):
        w = _outcome(CocoSource.materialize, w)
      if isinstance(w, str) or isinstance(rec, str):
        assert rec == w, rid
        continue
      assert rec["sentences"] == w["sentences"]
      np.testing.assert_array_equal(np.asarray(rec["image"]), np.asarray(w["image"]))
    assert set(got) == set(want) and len(got) == len(src)
  _no_tensorflow()


def test_bad_records_are_skips_with_their_reason(coco):
  data_dir, karpathy, _, _ = coco
  entries = json.loads(karpathy.read_text())["images"]
  reasons = {
      "truncated.jpg": "corrupt_image", "corrupt.jpg": "corrupt_image", "tiny.png": "too_small", "bomb.png": "too_large"
  }
  seen = {}
  for split in ("train", "val", "test", "restval"):
    src = TfdsSource(tf_fix.COCO_NAME, str(data_dir), split)
    for i in range(len(src)):
      name = src[i]["example"]["image/filename"].decode()
      try:
        src.materialize(src[i])
      except BadRecord as e:
        seen[(name, int(src[i]["example"]["image/id"]))] = e.reason
        assert f"{tf_fix.COCO_NAME} {split} record {i}" in e.detail
  no_caption = [(e["filename"], e["cocoid"]) for e in entries if e["cocoid"] == 9999]
  assert seen == {
      **{(e["filename"], e["cocoid"]): reasons[e["filename"]] for e in entries if e["filename"] in reasons},
      **{k: "no_captions" for k in no_caption}
  }


def test_a_tfrecord_dataset_says_it_needs_array_record(coco, tmp_path):
  """TFDS's default format, TFRecord, needs TensorFlow to read: one line saying how to store it instead."""
  import shutil
  shutil.copytree(coco[0] / "coco_captions", tmp_path / "coco_captions")
  info = tmp_path / "coco_captions" / "2014" / "1.1.0" / "dataset_info.json"
  info.write_text(info.read_text().replace('"array_record"', '"tfrecord"'))
  (err,) = source_config.config_errors(_data_section(tfds_data_dir=str(tmp_path)))
  assert "is stored as tfrecord, which only TensorFlow reads" in err and "--file_format=array_record" in err, err


def test_without_tfds_installed_a_tfds_source_is_one_line_with_the_install_command(coco, monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails as if it were not installed
  assert source_config.config_errors(_data_section(tfds_data_dir=str(coco[0]))) == [
      "a TFDS source needs tensorflow-datasets (without TensorFlow): pip install tensorflow-datasets "
      "importlib_resources (import of tensorflow_datasets halted; None in sys.modules)"
  ]


def test_this_environment_has_no_tensorflow():
  """What CI installs (requirements.txt) reads TFDS without TensorFlow: it must not come in as a dependency."""
  import importlib.util
  assert importlib.util.find_spec("tensorflow") is None


def test_feature_paths_and_sentences():
  assert split_sentences(["A dog runs. It is brown! Is it? yes",
                          "one"]) == ["A dog runs.", "It is brown!", "Is it?", "yes", "one"]
  ex = {"image/id": 3, "captions": {"text": [b"a"], "id": [1]}}
  assert lookup(ex, "image/id") == 3 and lookup(ex, "captions/text") == [b"a"]
  with pytest.raises(KeyError):
    lookup(ex, "captions/nope")


def _data_section(**kw):
  d = config_lib.base("read").data
  d.source = "tfds"
  for k, v in kw.items():
    d[k] = v
  return d


@pytest.mark.parametrize("change,expect", [
    ({"tfds_name": "coco_captions/2014"}, r"give its version too, e\.g\. 'coco_captions/2014:1\.1\.0'"),
    ({"tfds_name": "coco_captions/2014:9.9.9"}, r"no .*9\.9\.9/dataset_info\.json; .* holds \['1\.1\.0'\]"),
    ({"tfds_data_dir": "/nonexistent/tfds"}, r"data_dir /nonexistent/tfds is not a folder"),
    ({"tfds_data_dir": ""}, r"no data_dir given"),
    ({"tfds_split": "validation"}, r"split 'validation' cannot be read .*its splits are .*train.*test"),
    ({"tfds_captions_key": "captions/txt"}, r"no feature 'captions/txt' \(data\.tfds_captions_key\); its features "
     r"are .*captions/text.*image/filename"),
    ({"tfds_image_key": "img"}, r"no feature 'img' \(data\.tfds_image_key\)"),
])
def test_naming_mistakes_are_one_line(coco, change, expect):
  d = _data_section(**{"tfds_data_dir": str(coco[0]), **change})
  errors = source_config.config_errors(d)
  assert len(errors) == 1 and "\n" not in errors[0], errors
  import re
  assert re.search(expect, errors[0]), errors[0]
  assert source_config.config_errors(_data_section(tfds_data_dir=str(coco[0]))) == []


def test_pipeline_resumes_exactly_and_runs_in_workers(coco, tok, tagger, t5tok, absl_flags_parsed):
  """READ's pipeline on TFDS coco_captions: a restored state continues with the batches an uninterrupted run sees;
  grain worker processes (which unpickle the source and reopen the split) give the same batches."""
  data_dir, _, _, paras = coco
  d = _data_section(tfds_data_dir=str(data_dir), tfds_split="train+restval")
  src = source_config.make_source(d, "", 0)
  cfg = dict(kind=methods.step_kind("read"), batch_size=4, seed=3, max_skip_fraction=0.5,
             options=read_samples.Options(image_size=32))
  take = lambda b, n: [next(b) for _ in range(n)]
  a = pl.make_batches(src, pl.PipelineConfig(**cfg), tok, t5tok, tagger=tagger)
  take(a, 2)
  state = json.loads(json.dumps(a.state()))
  rest = take(a, 4)  # crosses the epoch (train + restval: 17 records, 3 unusable)
  b = pl.make_batches(src, pl.PipelineConfig(**cfg), tok, t5tok, tagger=tagger)
  b.restore(state)
  for x, y in zip(take(b, 4), rest):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
  w = pl.make_batches(src, pl.PipelineConfig(**cfg, num_workers=2), tok, t5tok)
  for x, y in zip(take(w, 2), take(pl.make_batches(src, pl.PipelineConfig(**cfg), tok, t5tok, tagger=tagger), 2)):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
  assert a.skips.skipped and set(a.skips.skipped) <= {"corrupt_image", "too_small", "too_large", "no_captions"}
  _no_tensorflow()


class _OneCaption:
  """A source whose records keep only their first caption."""
  def __init__(self, src):
    self.src, self.wide = src, src.wide

  def __len__(self):
    return len(self.src)

  def __getitem__(self, i):
    return self.src[i]

  def materialize(self, raw):
    rec = self.src.materialize(raw)
    return {**rec, "sentences": rec["sentences"][:1]}


def test_a_clic_step_skips_records_with_one_sentence(coco, tok, tagger):
  """CLIC's sample needs a main caption and extra sentences: a one-caption record is a counted skip, not a crash;
  the CLIP step of CLIC takes it."""
  from compclip_jax.methods.clic import samples as clic_samples
  src = TfdsSource(tf_fix.COCO_NAME, str(coco[0]), "test")
  one = _OneCaption(src)
  good = next(i for i in range(len(src)) if "skip" not in pl.SampleTransform(
      src, pl.PipelineConfig(methods.step_kind("clic_clip"), 1), tok, tagger=tagger)(i, np.random.default_rng(0)))
  opts = clic_samples.Options(image_size=32)
  clic = pl.SampleTransform(one, pl.PipelineConfig(methods.step_kind("clic"), 1, options=opts), tok, tagger=tagger)
  assert clic(good, np.random.default_rng(0))["skip"] == "too_few_sentences"
  assert "skip" not in pl.SampleTransform(src, pl.PipelineConfig(methods.step_kind("clic"), 1, options=opts), tok,
                                          tagger=tagger)(good, np.random.default_rng(0))
  clip = pl.SampleTransform(one, pl.PipelineConfig(methods.step_kind("clic_clip"), 1), tok, tagger=tagger)
  assert "skip" not in clip(good, np.random.default_rng(0))


def test_prepare_format_tfds_is_a_tfds_dataset(coco, tmp_path, tagger):
  """The same records as the prepared format, readable by TFDS alone (a process that never imports compclip_jax)
  and by data.source=tfds."""
  _, karpathy, root, paras = coco
  from compclip_jax.data.sources import read_paraphrases
  src = CocoSource(str(karpathy), str(root), ("train", "restval", "test"), read_paraphrases(str(paras)))
  kw = dict(image_size=32, shard_size=4, workers=1, progress=False, max_skip_fraction=0.5)
  meta_p = prepare(src, str(tmp_path / "prepared"), **kw)
  meta_t = prepare(src, str(tmp_path / "tfds"), tfds_name="my_coco", **kw)
  assert meta_t["records"] == meta_p["records"] and meta_t["tfds_name"] == "my_coco:1.0.0"
  code = ("import json, sys, tensorflow_datasets as tfds\n"
          f"b = tfds.builder_from_directory({str(tmp_path / 'tfds' / 'my_coco' / '1.0.0')!r})\n"
          "ds = b.as_data_source('train')\n"
          "x = ds[0]\n"
          "print(json.dumps([len(ds), sorted(x), x['half'].shape[2], x['full'].shape, b.info.splits['train'].\n"
          "      num_examples, b.info.name, [m for m in sys.modules if m.split('.')[0] in ('compclip_jax',\n"
          "      'tensorflow')]]))\n")
  out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
  n = meta_p["records"]
  assert out == [n, ["analysis", "full", "half", "id", "paraphrases", "sentences"], 3, [32, 32, 3], n, "my_coco", []]
  ps = PreparedSource(str(tmp_path / "prepared"))
  ts = TfdsSource("my_coco:1.0.0", str(tmp_path / "tfds"), "train")
  assert ts.prepared and len(ts) == len(ps)
  by_id = {ps.materialize(ps[i])["id"]: ps.materialize(ps[i]) for i in range(len(ps))}
  for i in range(len(ts)):
    rec = ts.materialize(ts[i])
    want = by_id[rec["id"]]
    assert rec["sentences"] == want["sentences"] and rec["paraphrases"] == want["paraphrases"]
    every = range(len(rec["sentences"]))
    assert samples.analyses(rec, every, None) == samples.analyses(want, every, None)
    np.testing.assert_array_equal(samples.half_image(rec, 32), samples.half_image(want, 32))
    np.testing.assert_array_equal(samples.eval_image(rec, 32), samples.eval_image(want, 32))
  wide_p = {ps.materialize(ps[i])["id"]: ps.wide[i] for i in range(len(ps))}
  assert {ts.materialize(ts[i])["id"]: ts.wide[i] for i in range(len(ts))} == wide_p  # record by record
  # a rerun resumes (nothing to do); --rebuild with other options replaces the TFDS dataset, not a stale copy
  assert prepare(src, str(tmp_path / "tfds"), tfds_name="my_coco", **kw)["records"] == meta_p["records"]
  prepare(src, str(tmp_path / "tfds"), tfds_name="other", rebuild=True, **{**kw, "image_size": 48})
  assert not (tmp_path / "tfds" / "my_coco").exists()
  other = TfdsSource("other:1.0.0", str(tmp_path / "tfds"), "train")
  assert samples.eval_image(other.materialize(other[0]), 48).shape == (48, 48, 3)
  with pytest.raises(ValueError, match="holds a TFDS dataset.*data.source=tfds"):
    PreparedSource(str(tmp_path / "tfds"))
  _no_tensorflow()
