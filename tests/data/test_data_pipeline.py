"""Sources, sample builders and the grain pipeline on generated fixture datasets (broken rows included)."""
import functools
import json

import numpy as np
import pytest

from tests import paths
from compclip_jax import methods
from compclip_jax.data import negatives as neg
from compclip_jax.data import pipeline as pl
from compclip_jax.data import samples
from compclip_jax.data.negatives import SpacyTagger
from compclip_jax.data.records import TooManySkipped
from compclip_jax.data.sources import CocoSource, CsvSource, PreparedSource, read_paraphrases
from compclip_jax.data.tokenizers import CLIPTokenizer
from compclip_jax.data.prepare import PrepareError
from compclip_jax.data.prepare import prepare as _prepare
from compclip_jax.methods.clic import samples as clic_samples
from compclip_jax.methods import negclip as negclip_method
from compclip_jax.methods.read import samples as read_samples
from tests import data_fixtures as df

# The fixtures are broken on purpose (~20 % of the rows): above the skip limit prepare keeps by default.
prepare = functools.partial(_prepare, max_skip_fraction=0.5)


@pytest.fixture(scope="module")
def clic(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("clic")
  csv, root, bad, rejected = df.write_clic_csv(tmp)
  return CsvSource(str(csv), str(root)), bad, rejected


@pytest.fixture(scope="module")
def prepared(clic, tmp_path_factory, tagger):
  out = tmp_path_factory.mktemp("prepared")
  meta = prepare(clic[0], str(out), image_size=64, shard_size=7, workers=1, progress=False)
  return PreparedSource(str(out)), meta, out


def _cfg(kind, **kw):
  options = {"read": read_samples.Options, "negclip": negclip_method.Options}.get(kind, clic_samples.Options)
  kw.setdefault("options", options(image_size=64))
  kw.setdefault("max_skip_fraction", 0.5)
  return pl.PipelineConfig(methods.step_kind(kind), **kw)


# ------------------------------------------------------------------------------------------------------ sources
def test_csv_source_rejects_bad_rows_by_file_and_row(clic):
  src, bad, rejected = clic
  assert len(src.rejected) == rejected
  reasons = sorted(r.reason for r in src.rejected)
  assert reasons == ["non_utf8", "too_few_sentences", "too_few_sentences"]
  assert all("rows.csv:" in str(r) for r in src.rejected)
  assert all(s == s.lower() for _, ss in src.rows for s in ss)  # METHODS §1.1: lower-cased on load
  assert all(len(ss) >= 2 for _, ss in src.rows)


def test_coco_source_and_paraphrases(tmp_path):
  path, root, para_path, _ = df.write_coco_json(tmp_path)
  paras = read_paraphrases(str(para_path))
  src = CocoSource(str(path), str(root), ("train", "restval"), paras)
  data = json.loads(path.read_text())
  want = [im for im in data["images"] if im["split"] in ("train", "restval") and im["cocoid"] != 9999]
  assert len(src) == len(want)
  assert [r.reason for r in src.rejected] == ["no_captions"]
  rec = src[1]
  assert len(rec["sentences"]) == 5 and rec["paraphrases"] == paras[rec["id"]]


def test_prepared_rejects_name_their_row_once(prepared):
  # prepare lists a read-time reject with its row in the detail: the run's log once said "rows.csv:5: rows.csv:5: …"
  rejected, _, _ = prepared[0].read_rejects()
  assert {r.reason for r in rejected} >= {"non_utf8", "too_few_sentences", "missing_image"}
  assert not [str(r) for r in rejected if str(r).startswith(f"{r.where}: {r.where}")]
  # on the file itself (PreparedSource strips a doubled prefix when reading it back): a read-time reject's detail
  # says what is wrong, its id says where
  skipped = [json.loads(line) for line in (prepared[2] / "skipped.jsonl").read_text().splitlines()]
  read_time = [s for s in skipped if s["reason"] in ("non_utf8", "too_few_sentences")]
  assert read_time and not [s for s in read_time if s["detail"].startswith(s["id"])], read_time


def test_prepared_format_round_trips(clic, prepared, tagger):
  src, bad, _ = clic
  ps, meta, out = prepared
  assert meta["records"] == len(src) - len(bad) == len(ps)
  assert meta["skipped"] == {
      "too_few_sentences": 2, "non_utf8": 1, "corrupt_image": 2, "too_small": 1, "too_large": 1, "missing_image": 1
  }
  skipped = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
  assert {s["id"] for s in skipped if s["reason"] != "non_utf8" and s["reason"] != "too_few_sentences"} == set(bad)
  good = [i for i in range(len(src)) if src[i]["id"] not in bad]
  for k, i in enumerate(good):
    raw = src.materialize(src[i])
    rec = ps.materialize(ps[k])
    assert rec["id"] == raw["id"] and rec["sentences"] == raw["sentences"]
    np.testing.assert_array_equal(samples.half_image(rec, 64), samples.half_image(raw, 64))  # PNG: lossless
    np.testing.assert_array_equal(samples.eval_image(rec, 64), samples.eval_image(raw, 64))
    cached = samples.analyses(rec, range(len(rec["sentences"])), None)
    assert cached == SpacyTagger()(raw["sentences"])
    w, h = raw["image"].size
    assert ps.wide[k] == (w >= h)


def test_prepare_resumes(clic, tmp_path):
  src = clic[0]
  prepare(src, str(tmp_path), image_size=32, shard_size=10, progress=False)
  first = (tmp_path / "shard-00001.array_record").stat().st_mtime_ns
  (tmp_path / "shard-00002.json").unlink()  # as if the run died while writing shard 2
  meta = prepare(src, str(tmp_path), image_size=32, shard_size=10, progress=False)
  assert (tmp_path / "shard-00001.array_record").stat().st_mtime_ns == first  # finished shards are not redone
  assert meta["records"] == len(PreparedSource(str(tmp_path)))
  (tmp_path / "prepared.json").unlink()  # died before the end: the same manifest resumes and finishes
  assert prepare(src, str(tmp_path), image_size=32, shard_size=10, progress=False) == meta
  assert (tmp_path / "shard-00001.array_record").stat().st_mtime_ns == first


def test_prepare_refuses_another_manifest_and_rebuilds_its_own_files_only(clic, tmp_path):
  src = clic[0]
  prepare(src, str(tmp_path), image_size=32, shard_size=10, progress=False)
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert manifest["image_size"] == 32 and manifest["shard_size"] == 10 and "parser" in manifest["pos_pipeline"]
  import os
  st = os.stat(src.path)
  assert manifest["files"] == [{"path": os.path.abspath(src.path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}]
  assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave no temp files
  before = (tmp_path / "prepared.json").read_text()
  (tmp_path / "notes.txt").write_text("mine")  # not prepare's: a rebuild must keep it
  with pytest.raises(PrepareError, match=r"image_size: 32 → 48.*new --out, or --rebuild"):
    prepare(src, str(tmp_path), image_size=48, shard_size=10, progress=False)
  assert (tmp_path / "prepared.json").read_text() == before  # nothing touched
  with pytest.raises(PrepareError, match=r"shard_size: 10 → 7"):
    prepare(src, str(tmp_path), image_size=32, shard_size=7, progress=False)
  meta = prepare(src, str(tmp_path), image_size=48, shard_size=10, progress=False, rebuild=True)
  assert meta["image_size"] == 48 and (tmp_path / "notes.txt").read_text() == "mine"
  ps = PreparedSource(str(tmp_path))
  assert samples.eval_image(ps.materialize(ps[0]), 48).shape == (48, 48, 3) and len(ps) == meta["records"]


def test_prepare_refuses_a_changed_source_file(tmp_path):
  csv, root, _, _ = df.write_clic_csv(tmp_path / "data")
  prepare(CsvSource(str(csv), str(root)), str(tmp_path / "p"), image_size=32, shard_size=50, progress=False)
  with open(csv, "a", encoding="utf-8") as f:
    f.write("img000.jpg,one more row,and its second sentence\n")
  with pytest.raises(PrepareError, match=r"files\.0\.size: \d+ → \d+.*rows: \d+ → \d+"):
    prepare(CsvSource(str(csv), str(root)), str(tmp_path / "p"), image_size=32, shard_size=50, progress=False)


def test_data_of_an_older_prepare_is_refused(clic, tmp_path):
  src = clic[0]
  prepare(src, str(tmp_path), image_size=32, shard_size=50, progress=False)
  meta = json.loads((tmp_path / "prepared.json").read_text())
  old = {k: v for k, v in meta.items() if k not in ("pos_pipeline", "format", "manifest")}  # what v1 wrote
  (tmp_path / "prepared.json").write_text(json.dumps(old))
  with pytest.raises(ValueError, match=r"older version.*not recorded.*re-prepare"):
    PreparedSource(str(tmp_path))
  parser_off = {**meta, "pos_pipeline": "spacy 3.8.18 / en_core_web_sm 3.8.0 / tok2vec+tagger+attribute_ruler"}
  (tmp_path / "prepared.json").write_text(json.dumps(parser_off))
  with pytest.raises(ValueError, match=r"older version.*tok2vec\+tagger\+attribute_ruler.*re-prepare"):
    PreparedSource(str(tmp_path))
  (tmp_path / "manifest.json").unlink()  # a folder written by the old prepare: shards, no manifest
  with pytest.raises(PrepareError, match=r"no manifest\.json \(made by an older version"):
    prepare(src, str(tmp_path), image_size=32, shard_size=50, progress=False)
  prepare(src, str(tmp_path), image_size=32, shard_size=50, progress=False, rebuild=True)
  assert PreparedSource(str(tmp_path)).meta["pos_pipeline"] == meta["pos_pipeline"]


# ------------------------------------------------------------------------------------------------- CLIC samples
def test_clic_sample_properties(clic, tagger):
  src = clic[0]
  tf = pl.SampleTransform(src, _cfg("clic", batch_size=1), CLIPTokenizer.default(), tagger=tagger)
  rng = np.random.default_rng(0)
  good = [i for i in range(len(src)) if src.wide[i] >= 0 and src[i]["id"] not in clic[1]]
  layouts = set()
  for i in good[:20]:
    rec = src.materialize(src[i])
    partner = tf._partner(i, rng)
    assert (partner["image"].size[0] >= partner["image"].size[1]) == (src.wide[i] == 1)  # same orientation
    s = clic_samples.sample(rec, partner, rng, tagger, clic_samples.Options(image_size=64))
    img = s["image"]
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    hi, hj = samples.half_image(rec, 64), samples.half_image(partner, 64)
    if src.wide[i] == 1:  # wide pair: stacked vertically, each 32 high × 64 wide
      halves = (img[:32], img[32:])
    else:  # tall pair: side by side, each 64 high × 32 wide
      halves = (img[:, :32], img[:, 32:])
    assert any(np.array_equal(halves[0], x) and np.array_equal(halves[1], y) for x, y in ((hi, hj), (hj, hi)))
    layouts.add((src.wide[i] == 1, np.array_equal(halves[0], hi)))
    p1, p2, p3, p4, n = s["texts"]
    a0, b0 = rec["sentences"][0], partner["sentences"][0]
    assert p1 == neg.join(a0, b0) and p2 == neg.join(b0, a0)  # i's caption always first in p1
    assert {p3.split(". ")[0].rstrip("."),
            p3.split(". ")[1].rstrip(".")} <= set(rec["sentences"][1:]) | set(partner["sentences"][1:])
    if s["neg_valid"]:
      assert n and n not in (p1, p2)
    else:
      assert n == ""
  assert len(layouts) == 4  # both orientations, both spatial orders


def test_single_image_ablation(clic, tagger):
  src = clic[0]
  rec = src.materialize(src[0])
  s = clic_samples.sample(rec, None, np.random.default_rng(0), tagger,
                          clic_samples.Options(image_size=64, concat=False))
  assert s["texts"][0] == s["texts"][1] == rec["sentences"][0]
  np.testing.assert_array_equal(s["image"], samples.eval_image(rec, 64))


def test_read_sample(tmp_path, tagger, t5tok):
  path, root, para_path, _ = df.write_coco_json(tmp_path, broken=False)
  src = CocoSource(str(path), str(root), paraphrases=read_paraphrases(str(para_path)))
  rng = np.random.default_rng(0)
  for i in range(len(src)):
    rec = src.materialize(src[i])
    s = read_samples.sample(rec, rng, tagger, read_samples.Options(image_size=64))
    assert s["texts"][0] in rec["sentences"] and s["target"] in rec["sentences"]
    assert s["neg_valid"].shape == (3,)
    for n, ok in zip(s["texts"][1:], s["neg_valid"]):
      assert (n != "") == ok and n != s["texts"][0]
    if rec["paraphrases"]:
      assert s["paraphrase"] in rec["paraphrases"]
    else:
      assert s["paraphrase"] in rec["sentences"] and s["paraphrase"] != s["texts"][0]
  opts = read_samples.Options(image_size=64, target_may_equal_positive=False)
  for _ in range(30):
    s = read_samples.sample(src.materialize(src[0]), rng, tagger, opts)
    assert s["target"] != s["texts"][0]
  b = next(pl.make_batches(src, _cfg("read", batch_size=4), CLIPTokenizer.default(), t5tok, tagger=tagger))
  assert b["ids"].shape == (4, 4, 77) and b["t5_target"].shape == (4, 77) and b["para_ids"].shape == (4, 77)
  # the decoder input is made on device (models/t5.shift_right, tests/methods/test_methods.py)
  assert "t5_input" not in b
  assert ((b["t5_target"] == 1).sum(1) == 1).all() and (b["t5_target"][:, 0] != 0).all()  # one EOS, no leading pad


# ----------------------------------------------------------------------------------------------------- pipeline
def _take(it, n):
  return [next(it) for _ in range(n)]


def _assert_same(xs, ys):
  assert len(xs) == len(ys)
  for x, y in zip(xs, ys):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])


@pytest.mark.parametrize("kind", ["clic", "clic_clip", "negclip"])
def test_same_seed_same_batches_and_exact_restore(prepared, tok, tagger, kind):
  ps = prepared[0]
  cfg = _cfg(kind, batch_size=4, seed=3)
  a = pl.make_batches(ps, cfg, tok, tagger=tagger)
  first = _take(a, 3)
  state = json.loads(json.dumps(a.state()))  # must survive a checkpoint as JSON
  rest = _take(a, 8)  # crosses an epoch boundary (31 records)
  b = pl.make_batches(ps, cfg, tok, tagger=tagger)
  _assert_same(_take(b, 3), first)
  c = pl.make_batches(ps, cfg, tok, tagger=tagger)
  c.restore(state)
  _assert_same(_take(c, 8), rest)
  other = pl.make_batches(ps, _cfg(kind, batch_size=4, seed=4), tok, tagger=tagger)
  assert not np.array_equal(next(other)["ids"], first[0]["ids"])


def test_restore_mid_epoch_with_skips_counts_too(clic, tok, tagger):
  src = clic[0]
  cfg = _cfg("clic", batch_size=4, seed=0)
  a = pl.make_batches(src, cfg, tok, tagger=tagger)
  _take(a, 4)
  state = a.state()
  rest = _take(a, 4)
  after = a.stats()
  b = pl.make_batches(src, cfg, tok, tagger=tagger)
  b.restore(state)
  _assert_same(_take(b, 4), rest)
  assert b.stats() == after and after["skipped"] > 0


def test_two_hosts_get_disjoint_shards_that_cover_the_data(prepared, tok, tagger):
  ps = prepared[0]
  seen = []
  for host in range(2):
    ds = pl.make_dataset(ps, _cfg("clic_clip", batch_size=2, num_epochs=1), tok, None, host, 2, tagger)
    seen.append([x["ids"][0].tobytes() + x["image"].tobytes() for x in ds])
  assert len(seen[0]) + len(seen[1]) == len(ps)
  assert not set(seen[0]) & set(seen[1])
  assert len(set(seen[0]) | set(seen[1])) == len(ps)


def test_worker_processes_give_the_same_batches(prepared, tok, tagger, absl_flags_parsed):
  ps = prepared[0]
  inproc = _take(pl.make_batches(ps, _cfg("clic", batch_size=4, seed=1), tok, tagger=tagger), 3)
  workers = pl.make_batches(ps, _cfg("clic", batch_size=4, seed=1, num_workers=2), tok)
  _assert_same(_take(workers, 3), inproc)


def test_worker_processes_without_parsed_absl_flags_say_what_to_do(prepared, tok, tagger):
  from absl import flags
  if flags.FLAGS.is_parsed():
    pytest.skip("absl flags were parsed by an earlier test in this process")
  workers = pl.make_batches(prepared[0], _cfg("clic", batch_size=4, seed=1, num_workers=2), tok, tagger=tagger)
  with pytest.raises(RuntimeError, match="mark_as_parsed"):
    next(workers)
  assert not flags.FLAGS.is_parsed()  # the library did not mark them parsed behind the caller's back


def test_bad_records_are_counted_and_too_many_fail(clic, tok, tagger):
  src, bad, _ = clic
  b = pl.make_batches(src, _cfg("clic_clip", batch_size=4, num_epochs=1), tok, tagger=tagger)
  with pytest.raises(StopIteration):
    while True:
      next(b)
  assert b.skips.seen == len(src)
  assert dict(b.skips.skipped) == {"corrupt_image": 2, "too_small": 1, "too_large": 1, "missing_image": 1}
  assert "truncated.jpg" in b.skips.summary() and "missing.jpg" in b.skips.summary()
  strict = pl.make_batches(src, _cfg("clic_clip", batch_size=4, max_skip_fraction=0.01), tok, tagger=tagger)
  strict.skips.min_seen = 10
  with pytest.raises(TooManySkipped, match=r"(?s)records skipped.*e\.g\."):
    _take(strict, 20)


def test_global_arrays_on_the_mesh(prepared, tok, tagger):
  import jax
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "fsdp"))
  b = next(pl.make_batches(prepared[0], _cfg("clic", batch_size=8), tok, tagger=tagger))
  g = pl.to_global(b, NamedSharding(mesh, P(("data", "fsdp"))))
  assert g["ids"].shape == (8, 5, 77) and len(g["ids"].sharding.device_set) == 8
  np.testing.assert_array_equal(np.asarray(g["image"]), b["image"])


def test_normalization_switch():
  from compclip_jax.data.images import IMAGENET_MEAN
  from compclip_jax.models.clip_config import OPENAI_MEAN, OPENAI_STD
  norm = lambda kind, opts: methods.step_kind(kind).normalization(opts, OPENAI_MEAN, OPENAI_STD)
  ref = clic_samples.Options()
  assert norm("clic", ref)[0] == IMAGENET_MEAN  # reference behaviour
  assert norm("clic_read", ref)[0] == IMAGENET_MEAN  # CLIC's samples, CLIC's normalisation
  assert norm("clic_clip", ref)[0] == norm("read", ref)[0] == norm("negclip", ref)[0] == OPENAI_MEAN
  own = clic_samples.Options(imagenet_normalization=False)
  assert norm("clic", own) == (OPENAI_MEAN, OPENAI_STD)
  assert norm("clic", clic_samples.Options(concat=False)) == (OPENAI_MEAN, OPENAI_STD)  # single-image ablation


@pytest.mark.slow
def test_prepare_cli_with_parallel_workers(tmp_path):
  import os
  import subprocess
  import sys
  path, root, para_path, bad = df.write_coco_json(tmp_path)
  root_dir = paths.ROOT
  cmd = [
      sys.executable, "-m", "compclip_jax", "prepare", f"--coco_json={path}", f"--image_root={root}",
      f"--paraphrases={para_path}", f"--out={tmp_path / 'p'}", "--shard_size=5", "--workers=2",
      "--max_skip_fraction=0.5"
  ]
  run = lambda *extra: subprocess.run(cmd + list(extra), capture_output=True, text=True, cwd=root_dir, env=
                                      {**os.environ, "PYTHONPATH": root_dir})
  out = run("--image_size=32")
  assert out.returncode == 0, out.stderr
  assert "prepare" not in out.stderr  # no progress bar in a log (stderr not a terminal)
  assert "skipped: " in out.stdout and "no_captions 1" in out.stdout
  ps = PreparedSource(str(tmp_path / "p"))
  # prepare's default --splits is Karpathy train only (READ's reference, METHODS §2.2)
  src = CocoSource(str(path), str(root), ("train",), paraphrases=read_paraphrases(str(para_path)))
  assert ps.meta.get("options", {}).get("splits", ["train"]) == ["train"]
  bad_in_split = sum(src[i]["image_path"].endswith(tuple(bad)) for i in range(len(src)))
  assert len(ps) == len(src) - bad_in_split and ps.meta["parsed"]
  rec = ps.materialize(ps[0])
  assert any(a["c"] for a in rec["analysis"])  # noun chunks cached for READ
  again = run("--image_size=32")  # same inputs and options: resumes (nothing left to do)
  assert again.returncode == 0 and "resuming: " in again.stderr and "same manifest" in again.stderr
  other = run("--image_size=48")  # a user error: one line, exit 2, no traceback
  assert other.returncode == 2 and "Traceback" not in other.stderr, other.stderr
  (line,) = [x for x in other.stderr.splitlines() if x.strip()]
  assert line.startswith("prepare: error: ") and "image_size: 32 → 48" in line and "--rebuild" in line
  assert PreparedSource(str(tmp_path / "p")).image_size == 32


def test_global_batch_does_not_depend_on_host_count(prepared, tok, tagger):
  ps = prepared[0]
  cfg = _cfg("clic", batch_size=4, seed=2)
  one = _take(pl.make_batches(ps, cfg, tok, tagger=tagger), 2)
  hosts = [_take(pl.make_batches(ps, cfg, tok, None, p, 2, tagger), 2) for p in range(2)]
  for step in range(2):
    for k in one[step]:
      np.testing.assert_array_equal(np.concatenate([hosts[0][step][k], hosts[1][step][k]]), one[step][k])


@pytest.mark.parametrize("kind", ["clic", "clic_clip", "negclip", "read", "clic_read", "clip"])
def test_a_kinds_declared_batch_is_what_its_pipeline_emits(tmp_path, tok, tagger, t5tok, kind):
  """`StepKind.batch_shapes` (what a compile check builds abstractly) against a real batch of the kind's pipeline."""
  path, root, para_path, _ = df.write_coco_json(tmp_path, broken=False)
  src = CocoSource(str(path), str(root), paraphrases=read_paraphrases(str(para_path)))
  b = next(pl.make_batches(src, _cfg(kind, batch_size=4), tok, t5tok, tagger=tagger))
  got = {k: (v.shape, v.dtype.name) for k, v in b.items()}
  assert got == methods.step_kind(kind).batch_shapes(4, 64)
