"""Build the prepared training format: ArrayRecord shards of pre-resized images, sentences and cached POS analysis.

  python -m compclip_jax prepare --csv=rows.csv --image_root=IMAGES --out=DIR            # CLIC rows
  python -m compclip_jax prepare --coco_json=dataset_coco.json --image_root=COCO --out=DIR [--paraphrases=P.json]

Each record keeps the CLIC half image (squashed to 112×224 or 224×112 from the original, METHODS §1.2 step 3), the
eval crop for CLIP/READ/NegCLIP steps, the sentences, and spaCy's analysis (tokens, coarse POS from the full pipeline,
noun chunks, verb-phrase matches; METHODS §1.2 step 6, §2.2), so training never runs spaCy and decodes only small
images. Shards are written by parallel workers. Rows that cannot be used are skipped and listed in `skipped.jsonl`
with the reason.

Resuming is safe: `manifest.json`, written first, records every input and option that shapes the output (source
files' path, size and mtime, image root, image size and format, shard size, alpha handling, the POS pipeline, the
prepared-format version). A rerun into the same --out continues with the missing shards only when the manifest is
identical; otherwise it refuses and lists the differences (use a new --out, or --rebuild to clear the shards this
folder holds). Shards, their summaries and `prepared.json` are written atomically (temp file + rename),
`prepared.json` last: a folder without it is unfinished.

An input with no usable row is refused before anything is written. More rows skipped than training accepts
(`max_skip_fraction`, default data.max_skip_fraction's `records.MAX_SKIP_FRACTION`, counted as training counts them:
skipped / (kept + skipped)) is refused too — before anything is written when the rows rejected while reading the
input already exceed it, else after the shards with `skipped.jsonl` written and no `prepared.json` (unfinished: a
rerun with a raised `--max_skip_fraction` resumes and finishes it; training then needs data.max_skip_fraction ≥ it).
"""
from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import re
import shutil
import sys
from typing import Sequence

import numpy as np

from compclip_jax.errors import UserError
from compclip_jax.data import tfds_source
from compclip_jax.data.images import Preprocess, has_transparency
from compclip_jax.data.negatives import SpacyTagger
from compclip_jax.data.records import MAX_SKIP_FRACTION, BadRecord, counts
from compclip_jax.data.samples import half_image
from compclip_jax.data.sources import PREPARED_FORMAT, PREPARED_META, CsvSource, encode_record

MANIFEST = "manifest.json"
# Every file prepare writes into --out (and their temp files): what --rebuild may delete, and nothing else.
_OWN_FILE = re.compile(r"(shard-\d{5}\.(array_record|json)|prepared\.json|manifest\.json|orientation\.npy|"
                       r"skipped\.jsonl)(\.tmp)?")

# One spaCy pipeline per worker process, built by the pool initializer (loading it per shard would cost seconds).
_WORKER_TAGGER: list[SpacyTagger] = []


class PrepareError(UserError, ValueError):
  """A user error of `prepare` (the CLI prints it as one line and exits 2)."""


def _init_worker() -> None:
  _WORKER_TAGGER[:] = [SpacyTagger()]


def _shard_name(k: int) -> str:
  return f"shard-{k:05d}.array_record"


def _write_json(path: str, obj, indent: int | None = None) -> None:
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=indent)
  os.replace(path + ".tmp", path)


def _file_identity(path: str) -> dict:
  st = os.stat(path)
  return {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def manifest(source, image_size: int, image_format: str, shard_size: int, alpha_premultiplied_resize: bool,
             pos_pipeline: str, inputs: Sequence[str] = (), options: dict | None = None) -> dict:
  """Everything that shapes the prepared output: the source (its kind, files, image root, rows after reading),
  `inputs` (further files, e.g. paraphrases), `options` (source options, e.g. splits), and prepare's own options."""
  files = [getattr(source, "path", "")] + list(inputs)
  return {
      "format": PREPARED_FORMAT, "source": type(source).__name__, "files": [_file_identity(p) for p in files if p],
      "image_root": os.path.abspath(getattr(source, "image_root", "") or "."), "rows": len(source),
      "options": dict(options or {}), "image_size": image_size, "image_format": image_format, "shard_size": shard_size,
      "alpha_premultiplied_resize": alpha_premultiplied_resize, "pos_pipeline": pos_pipeline
  }


def _flat(d, prefix: str = "") -> dict:
  if isinstance(d, dict):
    return {k2: v2 for k, v in d.items() for k2, v2 in _flat(v, f"{prefix}{k}.").items()}
  if isinstance(d, list):
    return {k2: v2 for i, v in enumerate(d) for k2, v2 in _flat(v, f"{prefix}{i}.").items()} or {prefix[:-1]: []}
  return {prefix[:-1]: d}


def manifest_differences(old: dict, new: dict) -> list[str]:
  """"key: old → new" for every value that differs (dotted keys, e.g. "files.0.mtime_ns")."""
  a, b = _flat(old), _flat(new)
  return [
      f"{k}: {a.get(k, '(none)')!r} → {b.get(k, '(none)')!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
  ]


def _own_files(out: str) -> list[str]:
  return sorted(n for n in os.listdir(out) if _OWN_FILE.fullmatch(n))


def _check_or_clear(out: str, want: dict, rebuild: bool) -> None:
  """Refuses (PrepareError) to mix this run's output with another one's in `out`, unless `rebuild`, which deletes
  the files a previous prepare wrote there (only those)."""
  own = _own_files(out)
  path = os.path.join(out, MANIFEST)
  problem, have = None, None
  if os.path.exists(path):
    try:
      with open(path, encoding="utf-8") as f:
        have = json.load(f)
    except (OSError, ValueError) as e:
      have, problem = None, f"its {MANIFEST} cannot be read ({e})"
    if have is not None:
      diffs = manifest_differences(have, want)
      if diffs:
        problem = "it was prepared from other inputs or options: " + "; ".join(diffs)
  elif own:
    problem = f"it holds prepared files ({', '.join(own[:3])}{', …' if len(own) > 3 else ''}) but no {MANIFEST} " \
              "(made by an older version of prepare)"
  if problem is None:
    return
  if not rebuild:
    raise PrepareError(f"{out}: {problem}. Use a new --out, or --rebuild to delete the files prepare wrote there and "
                       "start again")
  # prepared.json first: a folder being rebuilt must never look finished
  for name in sorted(own, key=lambda n: n != PREPARED_META):
    os.remove(os.path.join(out, name))
  dataset = (have.get("output") or {}).get("name") if isinstance(have, dict) else None
  if dataset and os.path.isdir(os.path.join(out, dataset)):  # the TFDS dataset an earlier --format=tfds made
    shutil.rmtree(os.path.join(out, dataset))
  print(f"rebuild: deleted {len(own)} files prepare had written to {out}{f' and {dataset}/' if dataset else ''}",
        file=sys.stderr)


def write_shard(out: str, k: int, rows: Sequence[dict], image_size: int, image_format: str, tagger: SpacyTagger,
                alpha_premultiplied_resize: bool = True, pos_pipeline: str | None = None, encode=encode_record) -> dict:
  """Writes shard k (atomically) and its summary `shard-k.json` (count, orientations, skipped rows, images with
  transparency: those the alpha choice changes). `encode`: `encode_record`'s arguments → the record's bytes (the
  prepared format's msgpack, or a TFDS example: tfds_source.PreparedEncoder)."""
  from array_record.python.array_record_module import ArrayRecordWriter  # pylint: disable=import-outside-toplevel
  if pos_pipeline is not None and tagger.identity() != pos_pipeline:  # a worker must tag as the manifest says
    raise RuntimeError(f"shard {k}: POS pipeline {tagger.identity()!r} is not the manifest's {pos_pipeline!r}")
  pre = Preprocess(image_size)
  path = os.path.join(out, _shard_name(k))
  writer = ArrayRecordWriter(path + ".tmp", "group_size:1")
  wide, skipped, transparent = [], [], 0
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
    writer.write(
        encode(row["id"], row["sentences"], half_image(rec, image_size, alpha_premultiplied_resize),
               pre.resize_crop(rec["image"], alpha_premultiplied_resize), analysis, row.get("paraphrases", ()),
               image_format))
    wide.append(int(w >= h))
    transparent += has_transparency(rec["image"])
  writer.close()
  os.replace(path + ".tmp", path)
  summary = {"count": len(wide), "wide": wide, "skipped": skipped, "transparent": transparent}
  _write_json(os.path.join(out, f"shard-{k:05d}.json"), summary)
  return summary


def _work(args):
  out, k, rows, size, fmt, alpha, identity, encode = args
  return k, write_shard(out, k, rows, size, fmt, _WORKER_TAGGER[0], alpha, identity, encode)


def prepare(source, out: str, image_size: int = 224, shard_size: int = 2000, workers: int = 1,
            image_format: str = "PNG", progress: bool = True, alpha_premultiplied_resize: bool = True,
            rebuild: bool = False, inputs: Sequence[str] = (), options: dict | None = None,
            max_skip_fraction: float = MAX_SKIP_FRACTION, tfds_name: str | None = None) -> dict:
  """Writes (or resumes) the prepared dataset for `source` into `out`; returns the metadata written.

  `tfds_name`: write it as the TFDS dataset `<out>/<tfds_name>/1.0.0` (split `train`) instead of the prepared
  format (`data.source=tfds`; any TFDS reader, no TensorFlow): the same records, as TFDS examples.

  Resumes only when `out`'s manifest equals this call's (`manifest`); otherwise raises PrepareError naming the
  differences, or with `rebuild` deletes what a previous prepare wrote there first. `inputs` / `options`: further
  input files and source options to record (the CLI passes the paraphrase file and the COCO splits). Raises
  PrepareError for an input without usable rows, or above `max_skip_fraction` skipped (see the module docstring).
  """
  if shard_size < 1:
    raise PrepareError(f"--shard_size must be ≥ 1, got {shard_size}")
  _check_read(source, max_skip_fraction)
  tagger = SpacyTagger()
  want = manifest(source, image_size, image_format, shard_size, alpha_premultiplied_resize, tagger.identity(), inputs,
                  options)
  encode = encode_record
  if tfds_name:  # only then: the manifests of prepared-format folders stay as they were (they resume)
    _check_tfds_name(tfds_name)
    tfds_source.prepared_features(image_format)  # tensorflow-datasets is there (else one line), before any write
    want["output"] = {"format": "tfds", "name": tfds_name}
    encode = tfds_source.PreparedEncoder(image_format)
  os.makedirs(out, exist_ok=True)
  _check_or_clear(out, want, rebuild)
  _write_json(os.path.join(out, MANIFEST), want, indent=2)
  n_shards = (len(source) + shard_size - 1) // shard_size
  done = lambda k: all(os.path.exists(os.path.join(out, n)) for n in (_shard_name(k), f"shard-{k:05d}.json"))
  todo = [k for k in range(n_shards) if not done(k)]
  if len(todo) < n_shards:
    print(f"resuming: {n_shards - len(todo)} of {n_shards} shards already written (same manifest)", file=sys.stderr)
  jobs = [(out, k, [source[i] for i in range(k * shard_size, min(len(source), (k + 1) * shard_size))], image_size,
           image_format, alpha_premultiplied_resize, want["pos_pipeline"], encode) for k in todo]
  bar = None
  if progress:
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    bar = tqdm(total=sum(len(j[2]) for j in jobs), unit="rec", desc="prepare")
  if workers > 1 and len(jobs) > 1:
    with mp.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
      for _, summary in pool.imap_unordered(_work, jobs):
        if bar:
          bar.update(summary["count"] + len(summary["skipped"]))
  else:
    for job in jobs:
      summary = write_shard(*job[:5], tagger, *job[5:])  # job[5:]: alpha, POS identity, encode
      if bar:
        bar.update(summary["count"] + len(summary["skipped"]))
  if bar:
    bar.close()
  return _finish(source, out, n_shards, want, max_skip_fraction)


def _check_tfds_name(name: str) -> None:
  if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
    raise PrepareError(f"--tfds_name {name!r}: TFDS names are lower-case snake_case (letters, digits, _), e.g. "
                       "my_captions")


def _check_read(source, limit: float) -> None:
  """Refuses (before anything is written) an input with no usable row, or whose rows rejected when read already
  exceed `limit`."""
  rejected, n_read, _ = source.read_rejects() if hasattr(source, "read_rejects") else (source.rejected, len(source), ())
  where = getattr(source, "path", "") or "the input"
  why = f"; rejected when read: {counts(r.reason for r in rejected)}, e.g. {rejected[0]}" if rejected else ""
  if len(source) == 0:
    raise PrepareError(f"{where}: no usable rows ({n_read} read){why}: nothing written")
  if n_read and len(rejected) / n_read > limit:
    raise PrepareError(f"{where}: {len(rejected)} of {n_read} rows ({len(rejected) / n_read:.1%}) cannot be used, "
                       f"more than the {limit:.1%} training accepts (data.max_skip_fraction){why}: nothing written; "
                       "fix the input, or raise --max_skip_fraction (and data.max_skip_fraction to train on it)")


def _check_skipped(out: str, skipped: list[dict], kept: int, limit: float) -> None:
  """Refuses (no prepared.json: the folder stays unfinished) when skipped / (kept + skipped) exceeds `limit`, as
  training counts it."""
  n = len(skipped) + kept
  if not skipped or len(skipped) / n <= limit:
    return
  raise PrepareError(
      f"{out}: {len(skipped)} of {n} rows ({len(skipped) / n:.1%}) skipped ({counts(s['reason'] for s in skipped)}"
      f"), more than the {limit:.1%} training accepts (data.max_skip_fraction); each one is listed in "
      f"{os.path.join(out, 'skipped.jsonl')}. The folder is left unfinished (no {PREPARED_META}): fix the input and "
      f"rerun, or rerun with --max_skip_fraction={math.ceil(1000 * len(skipped) / n) / 1000} to finish it (and "
      "train with data.max_skip_fraction at least that)")


def _finish(source, out: str, n_shards: int, want: dict, max_skip_fraction: float = MAX_SKIP_FRACTION) -> dict:
  wide, skipped = [], [{"id": r.where, "reason": r.reason, "detail": r.detail} for r in source.rejected]
  shards, shard_counts, transparent = [], [], 0
  for k in range(n_shards):
    with open(os.path.join(out, f"shard-{k:05d}.json")) as f:
      s = json.load(f)
    wide += s["wide"]
    skipped += s["skipped"]
    # None (unknown) once a shard of an older version, which did not count them, is part of the set
    transparent = None if transparent is None or "transparent" not in s else transparent + s["transparent"]
    if s["count"]:
      shards.append(_shard_name(k))
      shard_counts.append(s["count"])
  with open(os.path.join(out, "orientation.npy.tmp"), "wb") as f:
    np.save(f, np.asarray(wide, np.int8))
  os.replace(os.path.join(out, "orientation.npy.tmp"), os.path.join(out, "orientation.npy"))
  with open(os.path.join(out, "skipped.jsonl.tmp"), "w", encoding="utf-8", errors="backslashreplace") as f:
    f.writelines(json.dumps(s, ensure_ascii=False) + "\n" for s in skipped)
  os.replace(os.path.join(out, "skipped.jsonl.tmp"), os.path.join(out, "skipped.jsonl"))
  _check_skipped(out, skipped, len(wide), max_skip_fraction)
  output = want.get("output")
  if output:
    tfds_source.write_prepared_dataset(out, output["name"], shards, shard_counts, np.asarray(wide, np.int8),
                                       want["image_format"], f"compclip_jax prepare of {getattr(source, 'path', '')}")
  reasons: dict[str, int] = {}
  for s in skipped:
    reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
  # "parsed": noun chunks present (always, since the POS pipeline has the parser); kept for readers that check it
  meta = {
      "complete": True, "format": want["format"], "source": getattr(source, "path", ""), "records": len(wide),
      "shards": shards, "image_size": want["image_size"], "image_format": want["image_format"], "parsed": True,
      "pos_pipeline": want["pos_pipeline"], "alpha_premultiplied_resize": want["alpha_premultiplied_resize"],
      "transparent_images": transparent, "skipped": reasons, "manifest": want
  }
  if output:  # read by data.source=tfds, not as the prepared format (PreparedSource says so)
    meta |= {"output": "tfds", "tfds_name": f"{output['name']}:{tfds_source.PREPARED_VERSION}"}
  _write_json(os.path.join(out, PREPARED_META), meta, indent=2)  # last: its presence means "finished"
  return meta
