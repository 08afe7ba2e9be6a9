"""The synthetic world (scenes.py) as a training source: written once by process 0 — images, both data formats, every
sentence's spaCy analysis, the manifest — read by every process, its records carrying their cached analysis."""
from __future__ import annotations

import json
import os
from typing import Callable

from compclip_jax.data.synthetic import scenes as synthetic
from compclip_jax.data.negatives import Analysis, SpacyTagger, pos_pipeline_has_parser
from compclip_jax.data.sources import CocoSource, CsvSource, read_paraphrases

SYNTHETIC_FORMATS = ("csv", "coco")  # which of the world's files training reads: CLIC rows, or COCO JSON + paraphrases

ANALYSES_FILE = "analyses.json"


def synthetic_source(root: str, size: int, seed: int, fmt: str = "csv", process_index: int = 0,
                     barrier: Callable[[str], None] | None = None, tagger=None, any_image_format: bool = False,
                     binding_noise: float = 0.0):
  """The synthetic world (data/synthetic/scenes.py) as a training source, written once: process 0 writes it under
  `root` (images, both data formats, every sentence's spaCy analysis, the manifest) unless the same world is there,
  the processes meet at `barrier`, then every process reads the files. → `AnalysedSource` over a CsvSource (`fmt`
  "csv") or CocoSource ("coco")."""
  if process_index == 0:
    write_synthetic(root, size, seed, tagger, binding_noise)
  if barrier is not None:
    barrier("synthetic world written")
  return read_synthetic(root, size, seed, fmt, any_image_format, binding_noise)


def _world_sources(paths: dict, any_image_format: bool = False) -> dict:
  return {
      "csv": CsvSource(paths["csv"], paths["images"], any_image_format=any_image_format),
      "coco": CocoSource(paths["coco_json"], paths["images"], ("train",), read_paraphrases(paths["paraphrases"]))
  }


def write_synthetic(root: str, size: int, seed: int, tagger=None, binding_noise: float = 0.0) -> dict:
  """Writes (or checks) the world of (size, seed) under `root`, then the spaCy analysis of every sentence either
  format yields, tagged once, batched (`ANALYSES_FILE`): what the methods' tagger would compute sentence by sentence,
  so the CLIC / NegCLIP / READ negatives are the same and the pipeline tags nothing. Returns the world's paths."""
  paths = synthetic.write_world(root, size, seed, binding_noise)
  out = os.path.join(root, ANALYSES_FILE)
  if not os.path.exists(out):
    tagger = tagger or SpacyTagger()
    sentences = list(dict.fromkeys(s for src in _world_sources(paths).values() for _, s in _sentences(src)))
    record = {
        "pos_pipeline": tagger.identity(), "world": synthetic.world_record(size, seed, binding_noise),
        "analyses": {s: a.to_json() for s, a in zip(sentences, tagger(sentences))}
    }
    with open(out + ".tmp", "w") as f:
      json.dump(record, f)
    os.replace(out + ".tmp", out)
  return paths


def _sentences(src):
  """(row, sentence) of every sentence a CsvSource / CocoSource holds, in row order."""
  for k, row in enumerate(src.rows):
    for s in row[-1]:
      yield k, s


def read_synthetic(root: str, size: int, seed: int, fmt: str = "csv", any_image_format: bool = False,
                   binding_noise: float = 0.0):
  """The complete world of (size, seed, binding_noise) under `root` as an `AnalysedSource` in format `fmt`
  (`SYNTHETIC_FORMATS`)."""
  if fmt not in SYNTHETIC_FORMATS:
    raise ValueError(f"synthetic format {fmt!r}: use one of {SYNTHETIC_FORMATS}")
  paths = synthetic.read_world(root, size, seed, binding_noise)
  path = os.path.join(root, ANALYSES_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{root}: no {ANALYSES_FILE}; the world's writer (data.world.write_synthetic) adds it")
  with open(path) as f:
    cached = json.load(f)
  same_world = cached.get("world") == synthetic.world_record(size, seed, binding_noise)
  if not same_world or not pos_pipeline_has_parser(cached.get("pos_pipeline", "")):
    raise ValueError(f"{path} was tagged for another world or without spaCy's parser; delete it (the next run tags "
                     "the world again)")
  src = _world_sources(paths, any_image_format)[fmt]
  return AnalysedSource(src, {s: Analysis.from_json(a) for s, a in cached["analyses"].items()}, path)


class AnalysedSource:
  """A CsvSource / CocoSource whose raw records carry `analysis` (aligned with `sentences`) from a cache of every
  sentence's spaCy analysis, so the sample builders read it (`samples.analyses`) instead of tagging on the fly.

  Everything else — rows, rejects, orientation, `materialize` — is the wrapped source's."""
  def __init__(self, source, analyses: dict[str, Analysis], path: str = ""):
    missing = [s for _, s in _sentences(source) if s not in analyses]
    if missing:
      raise ValueError(f"{path or 'the analysis cache'} has no analysis of {len(missing)} sentence(s) of "
                       f"{source.path}, e.g. {missing[0]!r}; delete it (the next run tags the world again)")
    self.source, self.analyses, self.path = source, analyses, source.path

  def __len__(self) -> int:
    return len(self.source)

  def __getitem__(self, i: int) -> dict:
    raw = self.source[i]
    return {**raw, "analysis": [self.analyses[s] for s in raw["sentences"]]}

  def __getattr__(self, name):  # rows, rejected, wide, image_root, paraphrases, read_rejects, materialize
    if name in ("source", "analyses"):  # not set yet (unpickling): no recursion
      raise AttributeError(name)
    return getattr(self.source, name)
