"""Data sources with random access: CLIC CSV rows, COCO-style caption JSON, the prepared ArrayRecord format (the
synthetic world is data/synthetic/world.py; data/source_config.py builds the one a config's `data` section names).

Every source is a sequence of raw records (`len`, `[i]`, picklable for grain workers) plus
`materialize(raw) -> record` which reads the image and raises `BadRecord` (counted, never silent) when it cannot.
`wide[i]` gives each record's orientation (METHODS §1.2 step 1) for CLIC's partner buckets, or -1 when unknown.

Rows that are bad on their face (fewer than 2 sentences for CLIC, empty or non-UTF-8 captions, an unsupported image
extension, COCO entries without split, filename or captions) are dropped when the source is read and listed, by file
and row or entry, in `source.rejected` (`records.Rejected`); `source.read_rejects()` hands them, with the number of
records examined, to the run's `records.SkipReport`, which also counts the skips when images are loaded.
"""
from __future__ import annotations

import csv
import io
import json
import os
from typing import Sequence

import msgpack
import numpy as np
from PIL import Image

from compclip_jax import compat
from compclip_jax.data.images import load_image, orientation
from compclip_jax.data.negatives import Analysis, pos_pipeline_has_parser
from compclip_jax.data.records import Rejected

PREPARED_META = "prepared.json"
# 2: coarse POS from spaCy's full pipeline (parser on), verb phrases = Matcher spans, `pos_pipeline` recorded
PREPARED_FORMAT = 2


def _clean(s: str) -> str:
  return " ".join(s.split())


def _image_orientation(path: str) -> int:
  """1 wide, 0 tall, -1 unreadable (read from the header only)."""
  try:
    with Image.open(path) as im:
      return int(orientation(*im.size) == "wide")
  except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
    return -1


IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")  # the reference's row filter: str.endswith, case-sensitive (§1.1)


def _first_surrogate(fields: Sequence[str]) -> tuple[int, int, int] | None:
  """(field index, character index, original byte) of the first undecodable byte (a surrogate escape), or None."""
  for k, field in enumerate(fields):
    for j, ch in enumerate(field):
      if "\udc80" <= ch <= "\udcff":
        return k, j, ord(ch) - 0xDC00
  return None


class CsvSource:
  """CLIC rows: header-less CSV `image_path, sentence_1, …` (METHODS §1.1), lower-cased, images under `image_root`.

  Parsed with Python's csv module over the whole file, as the reference does, so quoted fields may hold commas and
  newlines (what `csv.writer` writes); a UTF-8 byte-order mark (Excel) and CRLF line ends are handled. Rows are
  named by the line they start on. Dropped when read, each with its reason in `rejected` (file:line, what to do):
  `non_utf8` (re-encode the file), `no_image_path`, `unsupported_extension` (the reference keeps only paths ending in
  .png/.jpg/.jpeg, case-sensitive; `any_image_format=True` admits every format PIL reads), `too_few_sentences` (fewer
  than `min_sentences` non-empty ones; empty captions do not count). Exact duplicates (the same image and sentences
  as an earlier row) are kept, as the reference trains on them, and listed in `duplicates`.
  """
  def __init__(self, csv_path: str, image_root: str, min_sentences: int = 2, lowercase: bool = True,
               any_image_format: bool = False):
    self.path, self.image_root = csv_path, image_root
    self.rows: list[tuple[str, list[str]]] = []
    self.rejected: list[Rejected] = []
    self.duplicates: list[Rejected] = []  # kept, reported
    self.n_read = 0  # non-blank rows examined
    first: dict[tuple, int] = {}
    # surrogateescape: a stray non-UTF-8 byte costs its row only (reported below), not the whole file
    with open(csv_path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
      reader, start = csv.reader(f), 1
      while True:
        try:
          fields = next(reader)
        except StopIteration:
          break
        except csv.Error as e:  # e.g. a field over csv's 128 KiB limit: an unclosed quote swallowed the rest
          raise ValueError(f"{csv_path}:{start}: cannot parse the CSV ({e}); check that row for an unclosed quote "
                           "(a quote inside a field must be doubled, as csv.writer writes it)") from None
        line, start = start, reader.line_num + 1
        if not any(s.strip() for s in fields):
          continue  # blank line
        self.n_read += 1
        where = f"{csv_path}:{line}"
        bad = _first_surrogate(fields)
        raw_image = fields[0]
        image = raw_image.strip()
        sentences = [_clean(s) for s in fields[1:]]
        sentences = [s.lower() if lowercase else s for s in sentences if s]
        if bad is not None:
          k, j, byte = bad
          self.rejected.append(
              Rejected(
                  "non_utf8", where, f"byte 0x{byte:02x} in field {k + 1} (character {j + 1}) "
                  "is not UTF-8; re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"))
        elif not image:
          self.rejected.append(Rejected("no_image_path", where, "empty image path (first field)"))
        elif not any_image_format and not raw_image.endswith(IMAGE_EXTENSIONS):
          hint = " (a header row?)" if line == 1 else ""
          self.rejected.append(
              Rejected(
                  "unsupported_extension", where, f"{raw_image!r} does not end in "
                  f"{'/'.join(IMAGE_EXTENSIONS)}{hint}; the reference skips such rows, "
                  "data.any_image_format=True admits every format PIL reads"))
        elif len(sentences) < min_sentences:
          self.rejected.append(
              Rejected("too_few_sentences", where, f"{len(sentences)} non-empty sentence(s), "
                       f"need {min_sentences}"))
        else:
          key = (image, tuple(sentences))
          if key in first:
            self.duplicates.append(
                Rejected(
                    "duplicate_row", where, f"same image and sentences as line "
                    f"{first[key]}; kept (the reference trains on duplicates too)"))
          else:
            first[key] = line
          self.rows.append((image, sentences))
    self._wide = None

  def read_rejects(self) -> tuple[list[Rejected], int, list[Rejected]]:
    """(rows dropped when read, rows examined, rows kept but reported) for the run's `SkipReport`."""
    return self.rejected, self.n_read, self.duplicates

  def __len__(self) -> int:
    return len(self.rows)

  def __getitem__(self, i: int) -> dict:
    image, sentences = self.rows[i]
    return {"id": image, "image_path": os.path.join(self.image_root, image), "sentences": sentences}

  @property
  def wide(self) -> np.ndarray:
    """Orientation per row from image headers (read once, on first use)."""
    if self._wide is None:
      self._wide = np.array([_image_orientation(os.path.join(self.image_root, r[0])) for r in self.rows], np.int8)
    return self._wide

  @staticmethod
  def materialize(raw: dict) -> dict:
    return {**raw, "image": load_image(raw["image_path"], raw["id"])}


class CocoSource:
  """Karpathy-style COCO caption JSON (`images[]` with filepath, filename, split, sentences[].raw, cocoid).

  Entries of other splits are simply not this run's data. Dropped when read, each named in `rejected` by its index,
  cocoid and filename: `no_split` (no `split` field: it belongs to no split), `no_filename`, `no_captions` (no
  non-empty `sentences[].raw`), `bad_entry` (not a JSON object).
  """
  def __init__(self, json_path: str, image_root: str, splits: Sequence[str] = ("train", "restval"),
               paraphrases: dict[str, list[str]] | None = None):
    self.path, self.image_root = json_path, image_root
    try:
      with open(json_path, encoding="utf-8-sig") as f:
        data = json.load(f)
    except UnicodeDecodeError as e:
      raise ValueError(f"{json_path}: byte {e.start} is not UTF-8 ({e.reason}); re-encode the file as UTF-8") from None
    except json.JSONDecodeError as e:
      raise ValueError(f"{json_path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
      raise ValueError(f"{json_path}: expected a Karpathy-style caption file with an 'images' list")
    self.rows, self.rejected, self.n_read = [], [], 0
    for n, img in enumerate(data["images"]):
      where = f"{json_path}: images[{n}]"
      if not isinstance(img, dict):
        self.n_read += 1
        self.rejected.append(Rejected("bad_entry", where, f"expected an object, found {type(img).__name__}"))
        continue
      where += f" (cocoid {img.get('cocoid')}, filename {img.get('filename')!r})"
      if "split" not in img:
        self.n_read += 1
        self.rejected.append(
            Rejected("no_split", where, "no 'split' field, so in no split; add one "
                     "(train/restval/val/test)"))
        continue
      if img["split"] not in splits:
        continue
      self.n_read += 1
      caps = [
          _clean(s["raw"]) for s in img.get("sentences") or () if isinstance(s, dict) and isinstance(s.get("raw"), str)
      ]
      caps = [c for c in caps if c]
      if not img.get("filename") or not isinstance(img["filename"], str):
        self.rejected.append(Rejected("no_filename", where, "no 'filename' field: the image cannot be found"))
      elif not caps:
        self.rejected.append(Rejected("no_captions", where, "no non-empty caption (sentences[].raw)"))
      else:
        rel = os.path.join(img.get("filepath") or "", img["filename"])
        self.rows.append((str(img.get("cocoid", img.get("imgid", n))), rel, caps))
    self.paraphrases = paraphrases or {}
    self._wide = None

  def read_rejects(self) -> tuple[list[Rejected], int, list[Rejected]]:
    """(entries dropped when read, entries of the requested splits (or none) examined, []) for `SkipReport`."""
    return self.rejected, self.n_read, []

  def __len__(self) -> int:
    return len(self.rows)

  def __getitem__(self, i: int) -> dict:
    cid, rel, caps = self.rows[i]
    return {
        "id": cid, "image_path": os.path.join(self.image_root, rel), "sentences": caps,
        "paraphrases": self.paraphrases.get(cid, [])
    }

  @property
  def wide(self) -> np.ndarray:
    if self._wide is None:
      self._wide = np.array([_image_orientation(os.path.join(self.image_root, r[1])) for r in self.rows], np.int8)
    return self._wide

  materialize = staticmethod(CsvSource.materialize)


def read_paraphrases(path: str) -> dict[str, list[str]]:
  """METHODS §2.2 paraphrase file: JSON {cocoid: [paraphrase, …]} (keys as strings)."""
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  if not isinstance(data, dict):
    raise ValueError(f"{path}: expected a JSON object mapping cocoid → list of paraphrases")
  return {str(k): [_clean(p) for p in (v if isinstance(v, list) else [v]) if _clean(p)] for k, v in data.items()}


# ---------------------------------------------------------------------------------------------- prepared format
def encode_image(a: np.ndarray, image_format: str = "PNG") -> bytes:
  """uint8 [H, W, 3] → PNG (lossless) or JPEG (quality 95) bytes, as the prepared formats store images."""
  buf = io.BytesIO()
  Image.fromarray(a).save(buf, format=image_format, **({"quality": 95} if image_format == "JPEG" else {}))
  return buf.getvalue()


def encode_record(rec_id: str, sentences: Sequence[str], half: np.ndarray, full: np.ndarray,
                  analysis: Sequence[Analysis], paraphrases: Sequence[str] = (), image_format: str = "PNG") -> bytes:
  """One prepared record: pre-resized images (CLIC half + eval crop, encoded), sentences, cached POS analysis."""
  return msgpack.packb({
      "id": rec_id, "s": list(sentences), "h": encode_image(half, image_format), "f": encode_image(full, image_format),
      "a": [a.to_json() for a in analysis], "p": list(paraphrases)
  })


class PreparedSource:
  """ArrayRecord shards written by `python -m compclip_jax prepare`, read with grain (no TensorFlow)."""
  def __init__(self, directory: str):
    meta_path = os.path.join(directory, PREPARED_META)
    if not os.path.exists(meta_path):
      raise FileNotFoundError(f"{directory}: no {PREPARED_META}; build it with python -m compclip_jax prepare")
    with open(meta_path) as f:
      self.meta = json.load(f)
    if self.meta.get("output") == "tfds":
      raise ValueError(f"{directory} holds a TFDS dataset (prepare --format=tfds): read it with data.source=tfds "
                       f"data.tfds_data_dir={directory} data.tfds_name={self.meta['tfds_name']}")
    if not self.meta.get("complete"):
      raise ValueError(f"{directory}: preparation did not finish; rerun python -m compclip_jax prepare to resume")
    pos = self.meta.get("pos_pipeline")
    if self.meta.get("format", 1) < PREPARED_FORMAT or not pos or not pos_pipeline_has_parser(pos):
      # older versions tagged with spaCy's parser off: other coarse POS tags than the references (METHODS §1.2)
      raise ValueError(f"{directory} was prepared by an older version of compclip_jax (format "
                       f"{self.meta.get('format', 1)}, POS pipeline {pos or 'not recorded'}; format {PREPARED_FORMAT} "
                       "tags with spaCy's full pipeline): re-prepare it with python -m compclip_jax prepare "
                       "(--rebuild to reuse the folder)")
    import grain  # pylint: disable=import-outside-toplevel
    self.directory = directory
    self._shards = [os.path.join(directory, s) for s in self.meta["shards"]]
    self._ds = grain.sources.ArrayRecordDataSource(self._shards)
    self.wide = np.load(os.path.join(directory, "orientation.npy"))
    self.image_size = self.meta["image_size"]
    self.rejected = []

  def __len__(self) -> int:
    return len(self._ds)

  def __getitem__(self, i: int) -> dict:
    return {"bytes": self._ds[i], "index": i}

  def __getstate__(self):
    return {"directory": self.directory}

  def __setstate__(self, state):
    self.__init__(state["directory"])

  def read_rejects(self) -> tuple[list[Rejected], int, list[Rejected]]:
    """(records `prepare` skipped, as listed in its skipped.jsonl; records examined; []) for the run's `SkipReport`:
    rows dropped when the prepared data was built count against the run's skip limit like read-time rejects."""
    path = os.path.join(self.directory, "skipped.jsonl")
    dropped = []
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        for line in f:
          if line.strip():
            d = json.loads(line)
            where, detail = str(d.get("id", path)), d.get("detail", "")
            detail = compat.prepared_reject_detail(where, detail)  # `Rejected` prefixes the row itself
            dropped.append(Rejected(d.get("reason", "unknown"), where, detail))
    return dropped, len(self) + len(dropped), []

  @staticmethod
  def materialize(raw: dict) -> dict:
    """Images stay encoded and analyses stay JSON until a sample builder asks for them (a CLIC step needs only the
    half images and the first sentences' analysis)."""
    d = msgpack.unpackb(raw["bytes"])
    return {
        "id": d["id"], "sentences": d["s"], "half": d["h"], "full": d["f"], "analysis": d["a"], "paraphrases": d["p"]
    }
