"""Evaluation results as clip_benchmark writes them: one JSON object per (dataset, model) in a folder, plus one
Markdown table of everything.

clip_benchmark (`clip_benchmark eval`) dumps `{"dataset", "model", "pretrained", "task", "metrics", "language"}` to
`{dataset}_{pretrained}_{model}_{language}_{task}.json` (dataset with '/' → '_'); `clip_benchmark build DIR` reads
every `*.json` in DIR and takes `data["metrics"]`. Where clip_benchmark has the dataset we use its name, task and
metric keys:

- SugarCrepe subset S → `sugar_crepe/S`, task `image_caption_selection`, `acc` (= `text_acc`: the image picks the
  positive caption; `image_acc` is 1 by construction with one image per row, as clip_benchmark computes it);
- Winoground → `winoground`, `image_caption_selection`: `text_acc`, `image_acc`, `acc` (= group score);
- COCO / Flickr30k retrieval → `mscoco_captions` / `flickr30k`, `zeroshot_retrieval`:
  `{image,text}_retrieval_recall@k`;
- zero-shot classification → the folder's name, `zeroshot_classification`: `acc1`, `acc5`.

Other benchmarks (SugarCrepe++, ARO, VALSE, COLA, What'sUp, CREPE) keep our name, task `compositionality` and our
keys. Every record's metrics also carry `tie_rule` (clip_benchmark's argmax lets a tie go to the first option, i.e.
`lenient`; our default is `strict`, METHODS §3) and counts. A benchmark that skipped unreadable images says so in
each of its records: `skipped_images` (top level: [{"image", "reason"}]) and metrics `skipped_images`,
`skipped_examples` (its counts are of the examples scored). Skipped benchmarks go to `skipped.jsonl`, which the
reader ignores (it reads `.json` only).
"""
from __future__ import annotations

import json
import os
import re

from compclip_jax.evaluators import sugarcrepe

RETRIEVAL_NAMES = {"coco_retrieval": "mscoco_captions", "flickr30k_retrieval": "flickr30k"}
TABLE = "results.md"
SKIPPED = "skipped.jsonl"


def _slug(s: str) -> str:
  """A file-name-safe form (clip_benchmark puts names into file names as they are; ours may be paths)."""
  return re.sub(r"[^A-Za-z0-9._+-]+", "-", s).strip("-") or "model"


def records(name: str, result: dict, model: str, pretrained: str, tie: str) -> list[dict]:
  """One of `run_benchmarks`' results → clip_benchmark records (several for a benchmark with subsets)."""
  m, task = result["metrics"], result["task"]
  base = {"model": model, "pretrained": pretrained, "language": "en"}
  extra = {"tie_rule": tie, "seconds": m.get("seconds")}
  if name == "sugarcrepe":
    return [{
        **base, "dataset": f"sugar_crepe/{s}", "task": "image_caption_selection",
        "metrics": {"acc": m[s], "text_acc": m[s], "image_acc": 1.0, "count": m[f"{s}/count"], **extra}
    } for s in sugarcrepe.SC_SUBSETS]
  if name == "winoground":
    return [{
        **base, "dataset": "winoground", "task": "image_caption_selection",
        "metrics": {"acc": m["group"], "text_acc": m["text"], "image_acc": m["image"], "count": m["count"], **extra}
    }]
  if name in RETRIEVAL_NAMES:
    return [{**base, "dataset": RETRIEVAL_NAMES[name], "task": "zeroshot_retrieval", "metrics": {**m, **extra}}]
  return [{**base, "dataset": result["dataset"], "task": task, "metrics": {**m, **extra}}]


def _with_skips(recs: list[dict], result: dict) -> list[dict]:
  """Each record with the benchmark's skipped images (name and reason; their count is in its metrics)."""
  skipped = result.get("skipped_images") or []
  if not skipped:
    return recs
  counts = {k: result["metrics"][k] for k in ("skipped_images", "skipped_examples") if k in result["metrics"]}
  return [{**r, "metrics": {**r["metrics"], **counts}, "skipped_images": skipped} for r in recs]


def file_name(record: dict) -> str:
  """clip_benchmark's default output name `{dataset}_{pretrained}_{model}_{language}_{task}.json`."""
  return (f"{record['dataset'].replace('/', '_')}_{_slug(os.path.basename(record['pretrained'].rstrip('/')))}_"
          f"{_slug(record['model'])}_{record['language']}_{record['task']}.json")


def markdown(results: dict[str, dict]) -> str:
  """The combined table: every float metric of every benchmark, fractions as percentages."""
  lines = ["| benchmark | metric | value |", "|---|---|---|"]
  for name, r in results.items():
    for k, v in r["metrics"].items():
      if isinstance(v, float) and not k.endswith("seconds"):
        lines.append(f"| {name} | {k} | {100 * v:.2f} |" if v <= 1.0 else f"| {name} | {k} | {v:.2f} |")
  return "\n".join(lines)


def write(out_dir: str, results: dict[str, dict], model: str, pretrained: str, tie: str,
          skipped: dict[str, str] | None = None) -> list[str]:
  """Writes the clip_benchmark files, `results.md` and (if any) `skipped.jsonl` into `out_dir`; returns the paths."""
  os.makedirs(out_dir, exist_ok=True)
  written = []
  for name, result in results.items():
    for rec in _with_skips(records(name, result, model, pretrained, tie), result):
      path = os.path.join(out_dir, file_name(rec))
      tmp = f"{path}.tmp"
      with open(tmp, "w") as f:
        json.dump(rec, f, indent=2)
      os.replace(tmp, path)
      written.append(path)
  with open(os.path.join(out_dir, TABLE), "w") as f:
    f.write(markdown(results) + "\n")
  written.append(os.path.join(out_dir, TABLE))
  if skipped:
    with open(os.path.join(out_dir, SKIPPED), "w") as f:
      f.writelines(json.dumps({"benchmark": n, "reason": why}) + "\n" for n, why in skipped.items())
    written.append(os.path.join(out_dir, SKIPPED))
  return written
