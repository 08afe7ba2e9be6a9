"""Evaluation as a library: where a config's benchmark files are, and running benchmarks on an encoder.

`benchmark_dirs(evals, …)` → (data_dir, image_dir) of a config's `evals` section: the folders it names (`evals.source`
"files") or the synthetic world's held-out benchmarks in the real formats ("synthetic", `evals.synthetic_size`
scenes; written once by process 0 into `evals.data_dir`, default `<workdir>/world/benchmarks`). `run_benchmarks` →
{benchmark: metrics}; `evaluators.output.markdown` renders them as a table. The trainer, the notebooks and
`python -m compclip_jax evaluate` (flags and main only) all call these.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Callable

from compclip_jax.data.synthetic import benchmarks as synthetic_benchmarks
from compclip_jax.evaluators import registry, scorers
from compclip_jax.evaluators.encoding import Encoder

SOURCES = ("files", "synthetic")
SYNTHETIC_SEED_OFFSET = 1000  # the benchmarks' scenes are seeded seed + 1000: never the training world's


def config_errors(e) -> list[str]:
  """Problems of a config's `evals` section (`train.validate` reports them with the rest, at once)."""
  if e.source not in SOURCES:
    return [f"evals.source {e.source!r}: use one of {SOURCES}"]
  if not e.benchmarks:
    return []
  errors = [f"evals.tie {e.tie!r}: use one of {scorers.TIES}"] if e.tie not in scorers.TIES else []
  unknown = registry.unknown_names(list(e.benchmarks), allow_all=False)
  errors += [f"evals.benchmarks: {unknown}"] if unknown else []
  if e.source == "synthetic":
    return errors + ([] if e.synthetic_size > 0 else
                     [f"evals.synthetic_size {e.synthetic_size}: need ≥ 1 benchmark scene"])
  if e.get("coco_tfds"):
    from compclip_jax.evaluators.retrieval import check_tfds  # pylint: disable=import-outside-toplevel
    errors += [f"evals.coco_tfds: {err}" for err in check_tfds(e.coco_tfds, e.tfds_data_dir)]
  if all(b in tfds_benchmarks(e) for b in e.benchmarks):
    return errors
  return errors + [
      f"evals.{k} {e[k]!r} is not a directory" for k in ("data_dir", "image_dir") if not os.path.isdir(e[k])
  ]


def tfds_benchmarks(e) -> dict[str, tuple[str, str]]:
  """{benchmark: (TFDS dataset, data_dir)} of a config's `evals` section: what `run_benchmarks(tfds=…)` takes."""
  return {"coco_retrieval": (e.coco_tfds, e.tfds_data_dir)} if e.get("coco_tfds") else {}


def benchmark_dirs(e, workdir: str, seed: int, process_index: int = 0,
                   barrier: Callable[[str], None] | None = None) -> tuple[str, str]:
  """(data_dir, image_dir) of a config's `evals` section `e`; for the synthetic source, process 0 writes the files
  (unless the same ones are there) and every process waits at `barrier(name)` before reading them."""
  if e.source != "synthetic":
    return e.data_dir, e.image_dir
  data_dir = e.data_dir or os.path.join(workdir, "world", "benchmarks")
  n, bench_seed = e.synthetic_size, seed + SYNTHETIC_SEED_OFFSET
  if process_index == 0:
    synthetic_benchmarks.write_benchmarks(data_dir, n, bench_seed, e.image_dir)
  if barrier is not None:
    barrier("synthetic benchmarks written")
  dirs = synthetic_benchmarks.read_benchmarks(data_dir, n, bench_seed, e.image_dir)
  return dirs["data_dir"], dirs["image_dir"]


def run_benchmarks(encoder: Encoder, names: list[str], data_dir: str, image_dir: str, tie: str = "strict",
                   cache_dir: str | None = None, seed: int = 0, strict: bool = False,
                   tfds: dict[str, tuple[str, str]] | None = None) -> dict[str, dict]:
  """{benchmark: {"task", "dataset", "metrics", "skipped_images"}} with the encoder's current weights; unknown names
  raise, missing files name themselves. An image that cannot be read is skipped with the examples that use it
  (`skipped_images`: [{"image", "reason"}]; metrics `skipped_images`, `skipped_examples`, the `count` keys over what
  is left), or with `strict` refused by name (UserError). `tfds`: benchmarks read from TFDS (`registry.load`)."""
  out = {}
  for name in names:
    t0 = time.perf_counter()
    task = registry.load(name, data_dir, image_dir, cache_dir, seed, tfds)
    bad: dict[int, str] = {}
    img = encoder.images(task.images.items, desc=f"{name} images", bad=bad, strict=strict)
    dropped = _skip(task, bad) if bad else 0
    txt = encoder.texts(task.texts.items, desc=f"{name} texts")
    metrics = task.score(img, txt, tie)
    if bad:
      metrics |= {"skipped_images": len(bad), "skipped_examples": dropped}
    out[name] = {
        "task": task.task, "dataset": task.name, "metrics": metrics | {"seconds": round(time.perf_counter() - t0, 1)},
        "skipped_images": [{"image": task.images.items[r].path, "reason": why} for r, why in sorted(bad.items())]
    }
  return out


def _skip(task, bad: dict[int, str]) -> int:
  """Drops the examples that use the unreadable images `bad` ({row: reason}) and says so; → examples dropped."""
  dropped = task.skip_images(bad)
  row, why = next(iter(sorted(bad.items())))
  logging.warning(
      "%s: skipped %d of %d images that cannot be read and the %d examples using them (its metrics count "
      "only the rest: see its count keys); e.g. %s: %s", task.name, len(bad), len(task.images), dropped,
      task.images.items[row].path, why)
  return dropped
