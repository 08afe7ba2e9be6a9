"""Build the prepared training format: ArrayRecord shards of pre-resized images, sentences and cached POS analysis.

  python -m compclip_jax.prepare --csv=rows.csv --image_root=IMAGES --out=DIR            # CLIC rows
  python -m compclip_jax.prepare --coco_json=dataset_coco.json --image_root=COCO --out=DIR [--paraphrases=P.json]

Each record keeps the CLIC half image (squashed to 112×224 or 224×112 from the original, METHODS §1.2 step 3), the
eval crop for CLIP/READ/NegCLIP steps, the sentences, and spaCy's analysis (tokens, POS, noun chunks for COCO/READ),
so training never runs spaCy and decodes only small images. Shards are written by parallel workers; a rerun skips
finished shards (resumable). Rows that cannot be used are skipped and listed in `skipped.jsonl` with the reason.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
from typing import Sequence

import numpy as np
from absl import app, flags

from compclip_jax.data.images import Preprocess
from compclip_jax.data.negatives import SpacyTagger
from compclip_jax.data.records import BadRecord
from compclip_jax.data.samples import half_image
from compclip_jax.data.sources import PREPARED_META, CocoSource, CsvSource, encode_record, read_paraphrases

_CSV = flags.DEFINE_string("csv", None, "CLIC rows: header-less CSV image_path, sentence_1, …")
_COCO = flags.DEFINE_string("coco_json", None, "Karpathy-style COCO caption JSON.")
_SPLITS = flags.DEFINE_list("splits", ["train", "restval"], "COCO splits to keep.")
_PARA = flags.DEFINE_string("paraphrases", None, "Optional JSON {cocoid: [paraphrases]} (READ).")
_ROOT = flags.DEFINE_string("image_root", None, "Directory the image paths are relative to.")
_OUT = flags.DEFINE_string("out", None, "Output directory.")
_SIZE = flags.DEFINE_integer("image_size", 224, "Model input size.")
_SHARD = flags.DEFINE_integer("shard_size", 2000, "Records per ArrayRecord shard.")
_WORKERS = flags.DEFINE_integer("workers", max(1, (os.cpu_count() or 2) - 1), "Parallel worker processes.")
_FORMAT = flags.DEFINE_enum("image_format", "PNG", ["PNG", "JPEG"], "PNG is lossless (bit-exact pixels); JPEG "
                            "(q95) is smaller.")

# One spaCy pipeline per worker process, built by the pool initializer (loading it per shard would cost seconds).
_WORKER_TAGGER: list[SpacyTagger] = []


def _init_worker(parse: bool) -> None:
  _WORKER_TAGGER[:] = [SpacyTagger(parse=parse)]


def _shard_name(k: int) -> str:
  return f"shard-{k:05d}.array_record"


def write_shard(out: str, k: int, rows: Sequence[dict], image_size: int, image_format: str,
                tagger: SpacyTagger) -> dict:
  """Writes shard k (atomically) and its summary `shard-k.json` (count, orientations, skipped rows)."""
  from array_record.python.array_record_module import ArrayRecordWriter  # pylint: disable=import-outside-toplevel
  pre = Preprocess(image_size)
  path = os.path.join(out, _shard_name(k))
  writer = ArrayRecordWriter(path + ".tmp", "group_size:1")
  wide, skipped = [], []
  tagged = tagger([s for r in rows for s in r["sentences"]])
  pos = 0
  for row in rows:
    n = len(row["sentences"])
    analysis, pos = tagged[pos:pos + n], pos + n
    try:
      rec = CsvSource.materialize(row)
    except BadRecord as e:
      skipped.append({"id": row["id"], "reason": e.reason, "detail": e.detail})
      continue
    w, h = rec["image"].size
    writer.write(encode_record(row["id"], row["sentences"], half_image(rec, image_size),
                               pre.resize_crop(rec["image"]), analysis, row.get("paraphrases", ()), image_format))
    wide.append(int(w >= h))
  writer.close()
  os.replace(path + ".tmp", path)
  summary = {"count": len(wide), "wide": wide, "skipped": skipped}
  with open(os.path.join(out, f"shard-{k:05d}.json.tmp"), "w") as f:
    json.dump(summary, f)
  os.replace(os.path.join(out, f"shard-{k:05d}.json.tmp"), os.path.join(out, f"shard-{k:05d}.json"))
  return summary


def _work(args):
  out, k, rows, size, fmt = args
  return k, write_shard(out, k, rows, size, fmt, _WORKER_TAGGER[0])


def prepare(source, out: str, image_size: int = 224, shard_size: int = 2000, workers: int = 1,
            image_format: str = "PNG", parse: bool = False, progress: bool = True) -> dict:
  """Writes (or resumes) the prepared dataset for `source` into `out`; returns the metadata written."""
  os.makedirs(out, exist_ok=True)
  n_shards = (len(source) + shard_size - 1) // shard_size
  todo = [k for k in range(n_shards) if not os.path.exists(os.path.join(out, f"shard-{k:05d}.json"))]
  if len(todo) < n_shards:
    print(f"resuming: {n_shards - len(todo)} of {n_shards} shards already written", file=sys.stderr)
  jobs = [(out, k, [source[i] for i in range(k * shard_size, min(len(source), (k + 1) * shard_size))], image_size,
           image_format) for k in todo]
  bar = None
  if progress:
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    bar = tqdm(total=sum(len(j[2]) for j in jobs), unit="rec", desc="prepare")
  if workers > 1 and len(jobs) > 1:
    with mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(parse,)) as pool:
      for _, summary in pool.imap_unordered(_work, jobs):
        if bar:
          bar.update(summary["count"] + len(summary["skipped"]))
  else:
    tagger = SpacyTagger(parse=parse)
    for job in jobs:
      summary = write_shard(*job, tagger)
      if bar:
        bar.update(summary["count"] + len(summary["skipped"]))
  if bar:
    bar.close()
  return _finish(source, out, n_shards, image_size, image_format, parse)


def _finish(source, out, n_shards, image_size, image_format, parse) -> dict:
  wide, skipped = [], [{"id": d.split(": ")[0], "reason": r, "detail": d} for r, d in source.rejected]
  shards = []
  for k in range(n_shards):
    with open(os.path.join(out, f"shard-{k:05d}.json")) as f:
      s = json.load(f)
    wide += s["wide"]
    skipped += s["skipped"]
    if s["count"]:
      shards.append(_shard_name(k))
  np.save(os.path.join(out, "orientation.npy"), np.asarray(wide, np.int8))
  with open(os.path.join(out, "skipped.jsonl"), "w") as f:
    f.writelines(json.dumps(s) + "\n" for s in skipped)
  reasons: dict[str, int] = {}
  for s in skipped:
    reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
  meta = {"complete": True, "source": getattr(source, "path", ""), "records": len(wide), "shards": shards,
          "image_size": image_size, "image_format": image_format, "parsed": parse, "skipped": reasons}
  with open(os.path.join(out, PREPARED_META), "w") as f:
    json.dump(meta, f, indent=2)
  return meta


def main(argv):
  del argv
  if bool(_CSV.value) == bool(_COCO.value):
    raise app.UsageError("give exactly one of --csv or --coco_json")
  if not (_ROOT.value and _OUT.value):
    raise app.UsageError("--image_root and --out are required")
  if _CSV.value:
    source, parse = CsvSource(_CSV.value, _ROOT.value), False
  else:
    paras = read_paraphrases(_PARA.value) if _PARA.value else None
    source, parse = CocoSource(_COCO.value, _ROOT.value, _SPLITS.value, paras), True
  meta = prepare(source, _OUT.value, _SIZE.value, _SHARD.value, _WORKERS.value, _FORMAT.value, parse)
  print(f"wrote {meta['records']:,} records in {len(meta['shards'])} shards to {_OUT.value}")
  if meta["skipped"]:
    print("skipped: " + ", ".join(f"{r} {n}" for r, n in sorted(meta["skipped"].items())) +
          f" (details: {os.path.join(_OUT.value, 'skipped.jsonl')})")


if __name__ == "__main__":
  app.run(main)
