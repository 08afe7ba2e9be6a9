"""Evaluate a CLIP checkpoint on the compositional benchmarks, retrieval and zero-shot classification (the flags and
`main`; the library is `compclip_jax.evaluators.run`, which the trainer and the notebooks use).

  python -m compclip_jax evaluate --model=PATH --benchmark=sugarcrepe,sugarcrepe_pp --data_dir=DIR --image_dir=DIR \
      --output=OUT_DIR [--tie=strict|lenient]

`--data_dir` holds one folder per benchmark (`sugarcrepe/*.json`, `valse/*.json`, `aro/…`, `retrieval/…`);
images are looked up as `<image_dir>/<benchmark>/<file>` then `<image_dir>/<file>`. `--benchmark=all` runs every
benchmark whose files exist and says which were skipped and why. `OUT_DIR` receives clip_benchmark's files — one JSON
object per dataset named `{dataset}_{pretrained}_{model}_{language}_{task}.json`, with its dataset names and metric
keys where it has the dataset (`sugar_crepe/swap_att` … with `acc`), so `clip_benchmark build OUT_DIR` reads them —
plus `results.md`, the combined table (also printed), and `skipped.jsonl` (`compclip_jax.evaluators.output`). An
`--output` ending in `.json` (the older form) names the folder without the suffix.
`--coco_tfds=coco_captions/2014:1.1.0 --tfds_data_dir=DIR` reads coco_retrieval from TFDS (split `test`, the Karpathy
test set; no TensorFlow) instead of its JSON and image folder; --data_dir and --image_dir are then needed only for
the other benchmarks.

An image that cannot be read (missing, truncated, not an image) is skipped with the examples that use it, counted per
benchmark (a warning, and `skipped_images` in its JSON records with each file and reason; its `count` keys are the
examples scored); `--strict` refuses it by name instead. A mistake (an unknown benchmark, a missing folder or file,
no benchmark files at all) is one line and exit 2, and nothing is written.
"""
from __future__ import annotations

import os

from absl import flags

from compclip_jax.cli import app as cli
from compclip_jax.cli import host_memory
from compclip_jax.errors import UserError
from compclip_jax.evaluators import output, registry, scorers

_MODEL = flags.DEFINE_string("model", None, "Checkpoint load_clip reads (HF dir, open_clip file, compclip dir).")
_BENCH = flags.DEFINE_list(
    "benchmark", ["all"], f"Comma list of {sorted(registry.BENCHMARKS)}, "
    f"{registry.ZEROSHOT_PREFIX}<dataset>, or all.")
_DATA = flags.DEFINE_string("data_dir", None, "Folder of benchmark annotation folders.")
_IMAGES = flags.DEFINE_string("image_dir", None, "Folder of images.")
_OUTPUT = flags.DEFINE_string("output", None, "Output folder: clip_benchmark JSON files + results.md.")
_TIE = flags.DEFINE_enum("tie", "strict", list(scorers.TIES), "A tie counts as wrong (strict) or right (lenient).")
_BATCH = flags.DEFINE_integer("batch_size", 256, "Encoding batch size.")
_MODEL_NAME = flags.DEFINE_string(
    "model_name", None, "open_clip model name for state dicts (e.g. ViT-B-32-quickgelu); "
    "also the `model` of the clip_benchmark records.")
_LABEL = flags.DEFINE_string(
    "model_label", None, "`model` in the clip_benchmark records (default: --model_name, else "
    "the checkpoint folder's name).")
_ACT = flags.DEFINE_enum("activation", None, ["quick_gelu", "gelu"], "Activation of an open_clip state dict.")
_CACHE = flags.DEFINE_string(
    "cache_dir", None, "Where generated ARO order negatives are kept (default: beside "
    "the annotations, else ~/.cache/compclip_jax).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the generated ARO order negatives.")
_COCO_TFDS = flags.DEFINE_string(
    "coco_tfds", None, "Read coco_retrieval from this TFDS dataset (name with version, e.g. "
    "coco_captions/2014:1.1.0; its split 'test' is the Karpathy test set) instead of retrieval/coco_test.json.")
_TFDS_DIR = flags.DEFINE_string("tfds_data_dir", None, "The TFDS data_dir of --coco_tfds (local or gs://).")
_STRICT = flags.DEFINE_bool(
    "strict", False, "Refuse an image that cannot be read (by name) instead of skipping it "
    "and the examples that use it.")


def _tfds() -> dict[str, tuple[str, str]]:
  """{benchmark: (TFDS dataset, data_dir)} the flags ask to read from TFDS."""
  if _TFDS_DIR.value and not _COCO_TFDS.value:
    raise UserError("--tfds_data_dir is given but no benchmark reads TFDS: add --coco_tfds=coco_captions/2014:1.1.0")
  if not _COCO_TFDS.value:
    return {}
  if not _TFDS_DIR.value:
    raise UserError("--coco_tfds needs --tfds_data_dir: the folder TFDS prepared the dataset into (local or gs://)")
  from compclip_jax.evaluators.retrieval import check_tfds  # pylint: disable=import-outside-toplevel
  for problem in check_tfds(_COCO_TFDS.value, _TFDS_DIR.value):  # name, version, folder, split, features: now
    raise UserError(f"--coco_tfds: {problem}")
  return {"coco_retrieval": (_COCO_TFDS.value, _TFDS_DIR.value)}


def _check_flags(tfds: dict) -> None:
  """One line (UserError) for a required flag not given or an input folder that is not there; --data_dir and
  --image_dir are not needed when every benchmark asked for reads TFDS."""
  only_tfds = tfds and _BENCH.value != ["all"] and all(n in tfds for n in _BENCH.value)
  for flag in (_MODEL, _OUTPUT) + (() if only_tfds else (_DATA, _IMAGES)):
    if not flag.value:
      raise UserError(f"--{flag.name} is required (see --help)")
  if not only_tfds and not os.path.isdir(_IMAGES.value):
    raise UserError(f"--image_dir {_IMAGES.value} is not a folder: give the folder of the benchmarks' images")


def main(argv):
  cli.refuse_arguments(argv)
  tfds = _tfds()
  _check_flags(tfds)
  cli.quiet_logging(cli.verbosity_given())
  host_memory.keep_freed_memory()
  names, skipped = registry.resolve(_BENCH.value, _DATA.value or "", _IMAGES.value or "", tfds)
  for n, why in skipped.items():
    print(f"skipped {n}: {why}")
  # jax and the model code only now: a mistake above is answered in a second
  from compclip_jax.evaluators.encoding import Encoder  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluators.run import run_benchmarks  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights.loading import load_clip  # pylint: disable=import-outside-toplevel
  model, tokenizer, preprocess = load_clip(_MODEL.value, model_name=_MODEL_NAME.value, activation=_ACT.value)
  if tokenizer is None:
    raise UserError(f"{_MODEL.value} has no tokenizer files and a non-standard vocabulary: put its tokenizer files "
                    "(vocab.json, merges.txt) beside it")
  results = run_benchmarks(Encoder(model, tokenizer, preprocess), names, _DATA.value or "", _IMAGES.value or "",
                           _TIE.value, _CACHE.value, _SEED.value, _STRICT.value, tfds)
  print(output.markdown(results))
  out_dir = _OUTPUT.value[:-len(".json")] if _OUTPUT.value.endswith(".json") else _OUTPUT.value
  label = _LABEL.value or _MODEL_NAME.value or os.path.basename(os.path.abspath(_MODEL.value))
  written = output.write(out_dir, results, label, _MODEL.value, _TIE.value, skipped)
  print(f"wrote {len(written)} files to {out_dir} (clip_benchmark's JSON per dataset, {output.TABLE})")


def run() -> None:
  cli.run(main)


if __name__ == "__main__":
  run()
