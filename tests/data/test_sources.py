"""Reading CSV and COCO sources (METHODS §1.1, §2.2) and the run's report of every dropped record (`SkipReport`):
exact rows kept and exact rejects by file:line / entry, on hand-written files; a short training run on bad data."""
import csv
import json
import logging
import os

import pytest

from tests import paths
from compclip_jax.data.records import Rejected, SkipCounter, SkipReport, TooManySkipped
from compclip_jax.data.sources import CocoSource, CsvSource

# One file with every case, written byte by byte: BOM, CRLF, quoted commas/newlines/quotes, a blank line, bad
# extensions (case included), an exact duplicate, empty fields, a latin-1 byte, a path with a trailing space.
MESSY = (
    b'\xef\xbb\xbfimg0.jpg,"A Dog, running",it is brown\r\n'  # 1: BOM stripped, comma kept in the caption
    b'img1.png,"first line\r\nsecond line",other\r\n'  # 2-3: a quoted CRLF inside a caption
    b'img2.JPG,a cat,a hat\r\n'  # 4: upper-case extension (reference: dropped)
    b'img3.gif,a cat,a hat\r\n'  # 5: not png/jpg/jpeg
    b'\r\n'  # 6: blank: not a row
    b'img0.jpg,"a dog, running",It is brown\r\n'  # 7: same row as 1 after lower-casing: kept
    b',a cat,a hat\r\n'  # 8: no image path
    b'img4.jpeg,only one\r\n'  # 9: one sentence
    b'img5.jpg,,"  ",\r\n'  # 10: empty captions only
    b'img6.jpg,caf\xe9 au lait,x\r\n'  # 11: latin-1 byte
    b'img7.jpg ,a,b\r\n'  # 12: trailing space: the path ends in " "
    b'img8.jpeg,"He said ""hi""","multi\nline\ncaption"\n'  # 13-15: doubled quotes, LF newlines inside
    b'img10.bmp,"spans\r\ntwo lines",x\r\n'  # 16-17: rejected, named by its first line
    b'img9.png,x,y')  # 18: no final newline

MESSY_ROWS = [("img0.jpg", ["a dog, running", "it is brown"]), ("img1.png", ["first line second line", "other"]),
              ("img0.jpg", ["a dog, running", "it is brown"]), ("img8.jpeg", ['he said "hi"', "multi line caption"]),
              ("img9.png", ["x", "y"])]
MESSY_REJECTS = [("unsupported_extension", 4), ("unsupported_extension", 5), ("no_image_path", 8),
                 ("too_few_sentences", 9), ("too_few_sentences", 10), ("non_utf8", 11), ("unsupported_extension", 12),
                 ("unsupported_extension", 16)]


@pytest.fixture
def messy(tmp_path):
  path = tmp_path / "rows.csv"
  path.write_bytes(MESSY)
  return str(path)


def test_csv_rows_kept_and_rejected_by_starting_line(messy):
  src = CsvSource(messy, "/images")
  assert src.rows == MESSY_ROWS
  assert [(r.reason, r.where) for r in src.rejected] == [(k, f"{messy}:{n}") for k, n in MESSY_REJECTS]
  assert [(r.reason, r.where) for r in src.duplicates] == [("duplicate_row", f"{messy}:7")]
  assert "line 1" in src.duplicates[0].detail
  assert src.n_read == 13 == len(MESSY_ROWS) + len(MESSY_REJECTS)  # 18 lines: 4 continue quoted fields, 1 blank
  bad = {r.where.rsplit(":", 1)[1]: r.detail for r in src.rejected}
  assert "0xe9" in bad["11"] and "field 2" in bad["11"] and "re-encode" in bad["11"]
  assert "'img2.JPG'" in bad["4"] and "data.any_image_format=True" in bad["4"]
  assert src[0] == {"id": "img0.jpg", "image_path": "/images/img0.jpg", "sentences": ["a dog, running", "it is brown"]}
  assert src.read_rejects() == (src.rejected, 13, src.duplicates)


def test_csv_any_image_format_admits_every_extension(messy):
  src = CsvSource(messy, "/images", any_image_format=True)
  assert [r[0] for r in src.rows] == [
      "img0.jpg", "img1.png", "img2.JPG", "img3.gif", "img0.jpg", "img7.jpg", "img8.jpeg", "img10.bmp", "img9.png"
  ]
  assert sorted(
      r.reason for r in src.rejected) == ["no_image_path", "non_utf8", "too_few_sentences", "too_few_sentences"]


def test_csv_reads_what_csv_writer_writes(tmp_path):
  """Independent of our parser: Python's csv.writer quotes what needs quoting; every row must come back."""
  rows = [["a.jpg", "One, two", "three"], ["b.png", "line one\nline two", 'a "quoted" word'],
          ["c.jpeg", "crlf\r\ninside", "x,y\nz"], ["d.jpg", "plain", "plain too"]]
  for terminator in ("\n", "\r\n"):
    path = tmp_path / f"w{len(terminator)}.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
      csv.writer(f, lineterminator=terminator).writerows(rows)
    src = CsvSource(str(path), "")
    assert not src.rejected
    assert src.rows == [(r[0], [" ".join(s.lower().split()) for s in r[1:]]) for r in rows]


def test_csv_unclosed_quote_is_a_clear_error(tmp_path):
  path = tmp_path / "rows.csv"
  path.write_text('a.jpg,x,y\nb.jpg,"never closed,y\n' + "c.jpg,z,w\n" * 20000)  # swallows > 128 KiB
  with pytest.raises(ValueError, match=r"rows\.csv:2: cannot parse the CSV.*unclosed quote"):
    CsvSource(str(path), "")


def test_coco_entries_without_split_filename_or_captions_are_named(tmp_path):
  ok = {"filepath": "train2014", "filename": "a.jpg", "split": "train", "cocoid": 1, "sentences": [{"raw": "A cat."}]}
  images = [
      ok,
      {**ok, "cocoid": 2, "split": "val"},  # another split: not dropped, not counted
      {**ok, "cocoid": 3, "sentences": [{"raw": "  "}, {}]},  # no usable caption
      {k: v for k, v in ok.items() if k != "split"} | {"cocoid": 4},  # no split at all
      {k: v for k, v in ok.items() if k != "filename"} | {"cocoid": 5},
      "not an entry",
      {**ok, "cocoid": 7, "split": "restval", "sentences": [{"raw": None}, {"raw": " Two  dogs "}]}
  ]
  path = tmp_path / "dataset_coco.json"
  path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"images": images}).encode())  # a BOM too
  src = CocoSource(str(path), "/coco", ("train", "restval"))
  assert [r[0] for r in src.rows] == ["1", "7"] and src.rows[1][2] == ["Two dogs"]
  got = [(r.reason, r.where) for r in src.rejected]
  assert got == [("no_captions", f"{path}: images[2] (cocoid 3, filename 'a.jpg')"),
                 ("no_split", f"{path}: images[3] (cocoid 4, filename 'a.jpg')"),
                 ("no_filename", f"{path}: images[4] (cocoid 5, filename None)"), ("bad_entry", f"{path}: images[5]")]
  assert src.read_rejects() == (src.rejected, 6, [])  # the val entry is not this run's data


def test_coco_not_json_names_the_place(tmp_path):
  path = tmp_path / "d.json"
  path.write_text('{"images": [\n  {"split": "train",}\n]}')
  with pytest.raises(ValueError, match=r"d\.json:2:\d+: not valid JSON"):
    CocoSource(str(path), "")


# ------------------------------------------------------------------------------------------------- SkipReport
class _Source:
  path = "rows.csv"

  def __init__(self, n_read, rejected, kept=()):
    self.n, self.rej, self.kept = n_read, rejected, list(kept)

  def read_rejects(self):
    return self.rej, self.n, self.kept


def _lines(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_report_writes_read_and_load_records_and_summarises(tmp_path, caplog):
  path = str(tmp_path / "skipped.jsonl")
  printed = []
  report = SkipReport(path, max_fraction=0.25, echo=printed.append)
  rej = [
      Rejected("too_few_sentences", "rows.csv:3", "1 non-empty sentence(s), need 2"),
      Rejected("non_utf8", "rows.csv:9", "byte 0xe9")
  ]
  with caplog.at_level(logging.WARNING):
    report.add_source(_Source(10, rej, [Rejected("duplicate_row", "rows.csv:5", "same as line 1")]))
  assert "rows.csv: 2 of 10 records rejected when read (too_few_sentences 1, non_utf8 1)" in caplog.text
  assert "rows.csv:3: 1 non-empty sentence(s), need 2" in caplog.text and "duplicate row(s) kept" in caplog.text
  assert _lines(path) == [{
      "stage": "read", "source": "rows.csv", "where": "rows.csv:3", "reason": "too_few_sentences",
      "detail": "1 non-empty sentence(s), need 2"
  }, {"stage": "read", "source": "rows.csv", "where": "rows.csv:9", "reason": "non_utf8", "detail": "byte 0xe9"}, {
      "stage": "read", "source": "rows.csv", "where": "rows.csv:5", "reason": "duplicate_row",
      "detail": "same as line 1", "kept": True
  }]
  counter = SkipCounter(max_fraction=0.25, min_seen=1000)
  report.attach(counter, "clic")
  counter.ok()
  counter.skip("missing_image", "x.jpg: file not found")
  assert len(_lines(path)) == 3  # load-time skips are written at checkpoints
  line = report.checkpoint(4)
  assert printed == [line]
  assert line == ("data at step 4: 2 of 10 records rejected when read (too_few_sentences 1, non_utf8 1); 1 of 2 "
                  f"samples skipped when loaded (missing_image 1); 1 duplicate rows kept — details: {path}")
  assert _lines(path)[3] == {
      "stage": "load", "source": "rows.csv", "where": "x.jpg", "reason": "missing_image",
      "detail": "x.jpg: file not found", "kind": "clic", "step": 4
  }
  counter.skip("corrupt_image", "y.jpg: broken")
  assert "at the end of the run" in report.finish() and _lines(path)[4]["step"] is None

  # a rerun of the same workdir resuming from checkpoint 4 keeps what led to it and drops what comes again
  again = SkipReport(path, max_fraction=0.25, echo=printed.append)
  again.add_source(_Source(10, rej))
  assert [d["reason"] for d in _lines(path)] == ["too_few_sentences", "non_utf8", "missing_image", "corrupt_image"]
  again.resumed(4)
  assert [(d["reason"], d.get("step")) for d in _lines(path)] == [("too_few_sentences", None), ("non_utf8", None),
                                                                  ("missing_image", 4)]
  again.resumed(0)  # from scratch: no load-time line survives
  assert [d["stage"] for d in _lines(path)] == ["read", "read"]


def test_clean_report_prints_once_at_the_end(tmp_path):
  printed = []
  report = SkipReport(str(tmp_path / "skipped.jsonl"), echo=printed.append)
  report.add_source(_Source(10, []))
  counter = SkipCounter()
  report.attach(counter, "clip")
  counter.ok()
  report.checkpoint(3)
  assert printed == [] and _lines(tmp_path / "skipped.jsonl") == []
  report.finish()
  assert printed == [
      "data at the end of the run: none of 10 records rejected when read; none of 1 samples skipped "
      "when loaded"
  ]


def test_report_fails_a_mostly_bad_source_with_a_clear_message(tmp_path):
  path = str(tmp_path / "skipped.jsonl")
  rej = [
      Rejected("unsupported_extension", f"rows.csv:{i}", "'x.gif' does not end in .png/.jpg/.jpeg")
      for i in range(1, 6)
  ]
  with pytest.raises(
      TooManySkipped, match=r"(?s)rows\.csv: 5 of 10 records \(50\.0%\) cannot be used \(> data\."
      r"max_skip_fraction 5\.0%\): unsupported_extension 5.*rows\.csv:1: .*raise data\."
      r"max_skip_fraction; every rejected record is listed in .*skipped\.jsonl"):
    SkipReport(path, 0.05, echo=lambda *_: None).add_source(_Source(10, rej))
  assert len(_lines(path)) == 5  # written before failing, so that every row can be looked up
  SkipReport(path, 0.5, echo=lambda *_: None).add_source(_Source(10, rej))  # at the limit: fine


def test_read_rejects_count_against_the_load_time_limit(tmp_path):
  """4 % rejected when read + 2 % skipped when loaded = 5.9 % of the rows unusable > 5 %."""
  report = SkipReport(None, 0.05, echo=lambda *_: None)
  report.add_source(_Source(100, [Rejected("too_few_sentences", f"r:{i}", "") for i in range(4)]))
  alone = SkipCounter(0.05, min_seen=100)
  counter = SkipCounter(0.05, min_seen=100)
  report.attach(counter, "clip")
  for c in (alone, counter):
    for _ in range(98):
      c.ok()
    c.skip("missing_image", "a.jpg: file not found")
  alone.skip("missing_image", "b.jpg: file not found")  # 2 of 100: fine on its own
  with pytest.raises(
      TooManySkipped, match=r"2 of 100 records skipped and 4\.0% of the rows were rejected when read: "
      r"5\.9% of the data unusable"):
    counter.skip("missing_image", "b.jpg: file not found")


def test_for_workdir_writes_one_file_per_host(tmp_path):
  first = SkipReport.for_workdir(str(tmp_path), 0.5, 0)
  other = SkipReport.for_workdir(str(tmp_path), 0.5, 1)
  for r in (first, other):
    r.add_source(_Source(10, [Rejected("non_utf8", "rows.csv:2", "")]))
  assert len(_lines(tmp_path / "skipped.jsonl")) == 1
  assert _lines(tmp_path / "skipped.process-1.jsonl") == []  # the read-time lines are the first host's
  assert os.path.basename(other.path) == "skipped.process-1.jsonl"


# --------------------------------------------------------------------------------------------- in a training run
def _training_data(tmp_path, extra_rows: list[str]):
  from compclip_jax.data.synthetic import scenes as synthetic
  world = synthetic.write_world(str(tmp_path / "world"), 40, seed=0)
  rows = tmp_path / "rows.csv"
  with open(world["csv"], encoding="utf-8") as f:
    rows.write_text(f.read() + "".join(r + "\n" for r in extra_rows), encoding="utf-8")
  return str(rows), world["images"]


def _run_cfg(rows, images, **overrides):
  from configs import clip
  c = clip.get_config("runlocal")
  c.data.update(dict(source="csv", path=rows, image_root=images))
  c.evals.benchmarks = ()
  c.update(overrides)
  return c


@pytest.mark.slow
def test_training_reports_every_dropped_record(tmp_path, capsys, caplog):
  """40 good rows, 2 rejected when read (4.7 %), 1 whose image is missing (skipped when loaded, each epoch)."""
  from compclip_jax.train import loop as train
  rows, images = _training_data(tmp_path, [
      "a.gif,a red cube,a blue ball", "00001.png,only one sentence", "missing.png,a red cube,a blue ball"
  ])
  workdir = tmp_path / "run"
  with caplog.at_level(logging.WARNING):
    train.run(_run_cfg(rows, images, total_steps=6), str(workdir))  # 48 samples: every row at least once
  start = f"{rows}: 2 of 43 records rejected when read (unsupported_extension 1, too_few_sentences 1)"
  assert start in caplog.text and f"{rows}:41: 'a.gif' does not end in" in caplog.text
  assert f"too_few_sentences: {rows}:42: 1 non-empty sentence(s), need 2" in caplog.text
  lines = _lines(workdir / "skipped.jsonl")
  assert [(d["stage"], d["where"], d["reason"]) for d in lines[:2]] == [("read", f"{rows}:41", "unsupported_extension"),
                                                                        ("read", f"{rows}:42", "too_few_sentences")]
  load = lines[2:]
  with open(workdir / "metrics.jsonl") as f:
    skipped = [int(m["data/clip/skipped"]) for m in map(json.loads, f) if "data/clip/skipped" in m][-1]
  assert skipped >= 1 and len(load) == skipped
  assert all(
      d["where"] == "missing.png" and d["reason"] == "missing_image" and d["kind"] == "clip" and d["step"] in (3, 6)
      for d in load)
  out = capsys.readouterr().out
  read_part = "data at step {}: 2 of 43 records rejected when read (unsupported_extension 1, too_few_sentences 1); "
  assert read_part.format(3) in out and read_part.format(6) in out
  assert (f"data at the end of the run: 2 of 43 records rejected when read (unsupported_extension 1, "
          f"too_few_sentences 1); {skipped} of ") in out
  assert f"samples skipped when loaded (missing_image {skipped}) — details: {workdir / 'skipped.jsonl'}" in out


def test_training_refuses_a_mostly_bad_csv(tmp_path):
  from compclip_jax.train import loop as train
  rows, images = _training_data(tmp_path, [f"{i:05d}.png,only one sentence" for i in range(40)])
  with pytest.raises(
      TooManySkipped, match=r"(?s)rows\.csv: 40 of 80 records \(50\.0%\) cannot be used.*"
      r"too_few_sentences 40.*rows\.csv:41: 1 non-empty.*every rejected record is listed in"):
    train.run(_run_cfg(rows, images), str(tmp_path / "run"))
  assert len(_lines(tmp_path / "run" / "skipped.jsonl")) == 40


def test_csv_reading_matches_the_reference_fixture():
  """The reference's own rows for tricky.csv (tests/fixtures/reference, made by running its CsvDataset._load_data),
  up to our documented differences: BOM stripped, whitespace collapsed, empty sentences dropped and rows with fewer
  than 2 sentences rejected (METHODS §1.1). Its extension filter is the same, row for row."""
  ref_dir = os.path.join(paths.FIXTURES, "reference")
  if not os.path.exists(os.path.join(ref_dir, "csv_rows.json")):
    pytest.skip("reference fixtures not built")
  with open(os.path.join(ref_dir, "csv_rows.json"), encoding="utf-8") as f:
    ref = json.load(f)
  src = CsvSource(os.path.join(ref_dir, ref["csv"]), "")
  want, too_few = [], []
  for path, sentences in ref["rows"]:
    sentences = [" ".join(s.split()) for s in sentences if s.strip()]
    (want if len(sentences) >= 2 else too_few).append((path.removeprefix("\ufeff"), sentences))
  assert src.rows == want
  assert [r.reason for r in src.rejected].count("too_few_sentences") == len(too_few)
  # every other reject is a row the reference's filter drops too
  assert len(src.rows) + len(src.rejected) == len(ref["rows"]) + [r.reason for r in src.rejected
                                                                 ].count("unsupported_extension")


def test_prepare_lists_read_time_rejects_and_training_counts_them(messy, tmp_path):
  """`prepare` writes every read-time reject to its skipped.jsonl; a run on the prepared data reads them back."""
  from PIL import Image
  from compclip_jax.data.sources import PreparedSource
  from compclip_jax.data.prepare import prepare
  for name in ("img0.jpg", "img1.png", "img8.jpeg"):  # img9.png stays missing: skipped by prepare
    Image.new("RGB", (40, 30), "red").save(tmp_path / name)
  src = CsvSource(messy, str(tmp_path))
  out = tmp_path / "prepared"
  prepare(src, str(out), image_size=32, shard_size=4, workers=1, progress=False, max_skip_fraction=1)  # messy
  lines = _lines(out / "skipped.jsonl")
  assert [(d["id"], d["reason"]) for d in lines[:len(MESSY_REJECTS)]] == [(f"{messy}:{n}", k) for k, n in MESSY_REJECTS]
  assert [d["reason"] for d in lines[len(MESSY_REJECTS):]] == ["missing_image"]
  rejected, n_read, _ = PreparedSource(str(out)).read_rejects()
  assert [(r.where, r.reason) for r in rejected] == [(d["id"], d["reason"]) for d in lines]
  assert n_read == 4 + len(lines) == src.n_read  # 4 prepared records (a duplicate among them)
