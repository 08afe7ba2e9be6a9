"""Data sources with random access: CLIC CSV rows, COCO-style caption JSON, and the prepared ArrayRecord format.

Every source is a sequence of raw records (`len`, `[i]`, picklable for grain workers) plus
`materialize(raw) -> record` which reads the image and raises `BadRecord` (counted, never silent) when it cannot.
`wide[i]` gives each record's orientation (METHODS §1.2 step 1) for CLIC's partner buckets, or -1 when unknown.

Rows that are bad on their face (fewer than 2 sentences for CLIC, empty or non-UTF-8 captions) are dropped when the
source is read and reported by file and row in `source.rejected`.
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

from compclip_jax.data.images import load_image, orientation
from compclip_jax.data.negatives import Analysis
from compclip_jax.data.records import BadRecord

PREPARED_META = "prepared.json"


def _clean(s: str) -> str:
  return " ".join(s.split())


def _image_orientation(path: str) -> int:
  """1 wide, 0 tall, -1 unreadable (read from the header only)."""
  try:
    with Image.open(path) as im:
      return int(orientation(*im.size) == "wide")
  except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
    return -1


class CsvSource:
  """CLIC rows: header-less CSV `image_path, sentence_1, …` (METHODS §1.1), lower-cased, images under `image_root`."""

  def __init__(self, csv_path: str, image_root: str, min_sentences: int = 2, lowercase: bool = True):
    self.path, self.image_root = csv_path, image_root
    self.rows: list[tuple[str, list[str]]] = []
    self.rejected: list[tuple[str, str]] = []  # (reason, "file:row: detail")
    with open(csv_path, "rb") as f:
      raw_lines = f.read().split(b"\n")
    for n, raw in enumerate(raw_lines, start=1):
      if not raw.strip():
        continue
      where = f"{csv_path}:{n}"
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        self.rejected.append(("non_utf8", f"{where}: {e.reason} at byte {e.start}; re-encode the file as UTF-8"))
        continue
      fields = next(csv.reader(io.StringIO(line)))
      image, sentences = fields[0].strip(), [_clean(s) for s in fields[1:]]
      sentences = [s.lower() if lowercase else s for s in sentences if s]
      if not image:
        self.rejected.append(("no_image_path", f"{where}: empty image path"))
      elif len(sentences) < min_sentences:
        self.rejected.append(("too_few_sentences", f"{where}: {len(sentences)} non-empty sentence(s), need "
                                                   f"{min_sentences}"))
      else:
        self.rows.append((image, sentences))
    self._wide = None

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
  """Karpathy-style COCO caption JSON (`images[]` with filepath, filename, split, sentences[].raw, cocoid)."""

  def __init__(self, json_path: str, image_root: str, splits: Sequence[str] = ("train", "restval"),
               paraphrases: dict[str, list[str]] | None = None):
    self.path, self.image_root = json_path, image_root
    with open(json_path, encoding="utf-8") as f:
      data = json.load(f)
    if "images" not in data:
      raise ValueError(f"{json_path}: expected a Karpathy-style caption file with an 'images' list")
    self.rows, self.rejected = [], []
    for n, img in enumerate(data["images"]):
      if img.get("split") not in splits:
        continue
      caps = [_clean(s.get("raw", "")) for s in img.get("sentences", [])]
      caps = [c for c in caps if c]
      where = f"{json_path}: images[{n}] (cocoid {img.get('cocoid')})"
      if not caps:
        self.rejected.append(("no_captions", f"{where}: no non-empty caption"))
        continue
      rel = os.path.join(img.get("filepath", ""), img["filename"])
      self.rows.append((str(img.get("cocoid", img.get("imgid", n))), rel, caps))
    self.paraphrases = paraphrases or {}
    self._wide = None

  def __len__(self) -> int:
    return len(self.rows)

  def __getitem__(self, i: int) -> dict:
    cid, rel, caps = self.rows[i]
    return {"id": cid, "image_path": os.path.join(self.image_root, rel), "sentences": caps,
            "paraphrases": self.paraphrases.get(cid, [])}

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
def encode_record(rec_id: str, sentences: Sequence[str], half: np.ndarray, full: np.ndarray,
                  analysis: Sequence[Analysis], paraphrases: Sequence[str] = (), image_format: str = "PNG") -> bytes:
  """One prepared record: pre-resized images (CLIC half + eval crop, encoded), sentences, cached POS analysis."""
  def enc(a):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format=image_format, **({"quality": 95} if image_format == "JPEG" else {}))
    return buf.getvalue()
  return msgpack.packb({"id": rec_id, "s": list(sentences), "h": enc(half), "f": enc(full),
                        "a": [a.to_json() for a in analysis], "p": list(paraphrases)})


class PreparedSource:
  """ArrayRecord shards written by `python -m compclip_jax.prepare`, read with grain (no TensorFlow)."""

  def __init__(self, directory: str):
    meta_path = os.path.join(directory, PREPARED_META)
    if not os.path.exists(meta_path):
      raise FileNotFoundError(f"{directory}: no {PREPARED_META}; build it with python -m compclip_jax.prepare")
    with open(meta_path) as f:
      self.meta = json.load(f)
    if not self.meta.get("complete"):
      raise ValueError(f"{directory}: preparation did not finish; rerun python -m compclip_jax.prepare to resume")
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

  @staticmethod
  def materialize(raw: dict) -> dict:
    """Images stay encoded and analyses stay JSON until a sample builder asks for them (a CLIC step needs only the
    half images and the first sentences' analysis)."""
    d = msgpack.unpackb(raw["bytes"])
    return {"id": d["id"], "sentences": d["s"], "half": d["h"], "full": d["f"], "analysis": d["a"],
            "paraphrases": d["p"]}
