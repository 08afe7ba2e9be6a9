"""What a benchmark hands to the encoder: its distinct images and texts, and how to score their embeddings.

Loaders build a `Task` with an `Index` of distinct images (path + optional crop box) and one of distinct texts, so each
is encoded once however often the benchmark reuses it. `score(img, txt, tie)` receives the L2-normalised fp32
embeddings in index order and returns the metrics.

An image that cannot be read is skipped, with every example that uses it: a loader lists its example lists in
`Task.examples` (each example a tuple holding its image rows, which `Index.add` returns as `ImageRow`), `skip_images`
drops those examples from the lists in place, and `score` — which reads the same lists — counts only what is left
(its `count` keys are the denominators). A task without `examples` cannot skip: it refuses the image by name.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Callable, Hashable

import numpy as np

from compclip_jax.errors import InputError, UserError
from compclip_jax.evaluators import scorers


class ImageRow(int):
  """A row of a task's image index (an int): how `skip_images` finds the examples that use an image."""


class Index:
  """Distinct items in insertion order: `add(x)` → its row (an `ImageRow` for an `ImageRef`)."""
  def __init__(self):
    self.items: list = []
    self._rows: dict[Hashable, int] = {}

  def add(self, item) -> int:
    if item not in self._rows:
      n = len(self.items)
      self._rows[item] = ImageRow(n) if isinstance(item, ImageRef) else n
      self.items.append(item)
    return self._rows[item]

  def __len__(self) -> int:
    return len(self.items)


@dataclasses.dataclass(frozen=True)
class ImageRef:
  path: str  # a file, or for an image inside a dataset (`read`) the name it is reported by
  box: tuple[float, float, float, float] | None = None  # (x, y, w, h) crop, VG-style
  # () → the encoded image, for images that are not files (a TFDS record: evaluators/retrieval.py); None: open `path`
  read: Callable[[], bytes] | None = None


@dataclasses.dataclass
class Task:
  name: str  # clip_benchmark's `dataset`
  images: Index
  texts: Index
  score: Callable[[np.ndarray, np.ndarray, str], dict]
  task: str = "compositionality"  # clip_benchmark's `task`
  examples: tuple[list, ...] = ()  # the lists `score` reads, each example a tuple holding its ImageRows

  def skip_images(self, bad: dict[int, str]) -> int:
    """Drops, in place, every example that uses an image row in `bad` ({row: reason}); → how many were dropped.
    Raises UserError when the task cannot skip (no `examples`) or a list would be left empty."""
    if not self.examples:
      row, why = next(iter(bad.items()))
      raise UserError(f"{self.name}: image {self.images.items[row].path} cannot be used ({why}) and this benchmark "
                      "cannot skip images: fix or replace the file")
    dropped = 0
    for rows in self.examples:
      kept = [e for e in rows if not _uses(e, bad)]
      if rows and not kept:
        raise UserError(f"{self.name}: every example uses an unreadable image, e.g. "
                        f"{self.images.items[next(iter(bad))].path} ({next(iter(bad.values()))}): check --image_dir")
      dropped += len(rows) - len(kept)
      rows[:] = kept
    return dropped


def _uses(example, bad: dict[int, str]) -> bool:
  """Whether `example` (an ImageRow, or a tuple / list holding some) uses an image row in `bad`."""
  if isinstance(example, ImageRow):
    return example in bad
  return isinstance(example, (tuple, list)) and any(_uses(x, bad) for x in example)


def image_path(image_dir: str, benchmark: str, name: str) -> str:
  """`image_dir/<benchmark>/<name>` if it exists, else `image_dir/<name>` (one flat COCO folder serves several)."""
  nested = os.path.join(image_dir, benchmark, name)
  return nested if os.path.exists(nested) else os.path.join(image_dir, name)


def read_json(path: str):
  if not os.path.exists(path):
    raise FileNotFoundError(f"benchmark file {path} not found")
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise InputError(f"{path}: not valid JSON ({e})") from None


def read_jsonl(path: str) -> list[dict]:
  if not os.path.exists(path):
    raise FileNotFoundError(f"benchmark file {path} not found")
  rows = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, start=1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError as e:
          raise InputError(f"{path}:{n}: not valid JSON ({e})") from None
  return rows


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Row-wise dot products of normalised embeddings."""
  return np.sum(a * b, axis=-1)


def subset_files(data_dir: str, benchmark: str, suffix: str) -> list[str]:
  """The benchmark's subset files `<data_dir>/<benchmark>/*<suffix>`, sorted; an empty folder names itself."""
  files = sorted(glob.glob(os.path.join(data_dir, benchmark, f"*{suffix}")))
  if not files:
    raise FileNotFoundError(f"no {benchmark} subset files (*{suffix}) in {os.path.join(data_dir, benchmark)}")
  return files


def pair_accuracy(rows, img: np.ndarray, txt: np.ndarray, tie: str) -> float:
  """Rows (image, positive text, negative text) of indices → fraction where the positive wins (METHODS §3)."""
  i, p, n = (np.array(x) for x in zip(*rows))
  return float(np.mean(scorers.pair_correct(cos(img[i], txt[p]), cos(img[i], txt[n]), tie)))
