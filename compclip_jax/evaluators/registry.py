"""The benchmark registry: name → loader and the file that tells whether its data is there (for --benchmark=all)."""
from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from typing import Callable

from compclip_jax.errors import UserError
from compclip_jax.evaluators import aro, cola, crepe, retrieval, sugarcrepe, valse, whatsup, winoground, zeroshot
from compclip_jax.evaluators.tasks import Task


@dataclasses.dataclass(frozen=True)
class Benchmark:
  load: Callable[..., Task]  # (data_dir, image_dir, **options) → Task
  needs: str  # path under data_dir that must exist


BENCHMARKS: dict[str, Benchmark] = {
    "sugarcrepe": Benchmark(sugarcrepe.load_sugarcrepe, "sugarcrepe/swap_obj.json"),
    "sugarcrepe_pp": Benchmark(sugarcrepe.load_sugarcrepe_pp, "sugarcrepe_pp/swap_obj.json"),
    "winoground": Benchmark(winoground.load_winoground, "winoground/examples.jsonl"),
    "vg_relation": Benchmark(aro.load_vg_relation, "aro/visual_genome_relation.json"),
    "vg_attribution": Benchmark(aro.load_vg_attribution, "aro/visual_genome_attribution.json"),
    "coco_order": Benchmark(functools.partial(aro.load_order, dataset="coco"), "aro/coco_karpathy_test.json"),
    "flickr30k_order": Benchmark(functools.partial(aro.load_order, dataset="flickr30k"), "aro/flickr30k_test.json"),
    "valse": Benchmark(valse.load_valse, "valse"),
    "cola": Benchmark(cola.load_cola, f"cola/{cola.FILE}"),
    "whatsup": Benchmark(whatsup.load_whatsup, "whatsup"),
    "crepe": Benchmark(crepe.load_crepe, "crepe"),
    "coco_retrieval": Benchmark(functools.partial(retrieval.load_retrieval, dataset="coco"),
                                "retrieval/coco_test.json"),
    "flickr30k_retrieval": Benchmark(functools.partial(retrieval.load_retrieval, dataset="flickr30k"),
                                     "retrieval/flickr30k_test.json"),
}
# benchmarks that can read a TFDS split instead of their files (`tfds` arguments below): name → retrieval dataset
TFDS_SERVED = {"coco_retrieval": "coco"}
ZEROSHOT_PREFIX = "zeroshot:"  # zeroshot:<dataset> reads <image_dir>/<dataset>/<class>/…
ORDER_SETS = ("coco_order", "flickr30k_order")


class BenchmarkError(UserError, ValueError):
  """An unknown benchmark name, or no benchmark files where they were looked for."""


def unknown_names(names: list[str], allow_all: bool = True) -> str | None:
  """The message for the names in `names` that are no benchmark (with the nearest known one), or None if all are
  known. `allow_all`: whether the list of known names offers 'all' (`evaluate` expands it; training does not)."""
  unknown = [n for n in names if n not in BENCHMARKS and not n.startswith(ZEROSHOT_PREFIX)]
  if not unknown:
    return None
  near = {n: difflib.get_close_matches(n, list(BENCHMARKS), 1) for n in unknown}
  hint = "; ".join(f"{n!r}: did you mean {m[0]!r}?" for n, m in near.items() if m)
  return (f"unknown benchmark(s) {unknown}{' (' + hint + ')' if hint else ''}; known: "
          f"{', '.join(sorted(BENCHMARKS))}, {ZEROSHOT_PREFIX}<dataset>{', all' if allow_all else ''}")


def resolve(names: list[str], data_dir: str, image_dir: str,
            tfds: dict[str, tuple[str, str]] | None = None) -> tuple[list[str], dict[str, str]]:
  """(benchmarks to run, {skipped: why}); 'all' expands to every benchmark whose files exist (and those `tfds`
  serves). Raises BenchmarkError for an unknown name (with the nearest known one), a `data_dir` that is not a folder
  (unless `tfds` serves every name), or an 'all' that finds none."""
  problem = unknown_names(names) if names != ["all"] else None
  if problem:
    raise BenchmarkError(problem)
  tfds = tfds or {}
  if names != ["all"] and all(n in tfds for n in names):
    return names, {}
  if not os.path.isdir(data_dir or ""):
    raise BenchmarkError(f"--data_dir {data_dir} is not a folder: give the folder that holds one folder per "
                         f"benchmark ({', '.join(sorted({b.needs.split('/')[0] for b in BENCHMARKS.values()}))})")
  if names == ["all"]:
    run, skipped = [], {}
    for n, b in BENCHMARKS.items():
      if n in tfds or os.path.exists(os.path.join(data_dir, b.needs)):
        run.append(n)
      else:
        skipped[n] = f"{os.path.join(data_dir, b.needs)} not found"
    if not run:
      raise BenchmarkError(f"--benchmark=all: no benchmark files in {data_dir} (looked for "
                           f"{', '.join(b.needs for b in BENCHMARKS.values())})")
    return run, skipped
  return names, {}


def load(name: str, data_dir: str, image_dir: str, cache_dir: str | None = None, seed: int = 0,
         tfds: dict[str, tuple[str, str]] | None = None) -> Task:
  """The task `name`; from TFDS when `tfds` ({benchmark of TFDS_SERVED: (dataset name with version, TFDS data_dir)})
  names it."""
  if tfds and name in tfds:
    return retrieval.load_retrieval_tfds(*tfds[name], dataset=TFDS_SERVED[name])
  if name.startswith(ZEROSHOT_PREFIX):
    return zeroshot.load_zeroshot(data_dir, image_dir, name[len(ZEROSHOT_PREFIX):])
  kw = {"cache_dir": cache_dir, "seed": seed} if name in ORDER_SETS else {}
  return BENCHMARKS[name].load(data_dir, image_dir, **kw)
