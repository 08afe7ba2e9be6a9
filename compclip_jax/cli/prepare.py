"""python -m compclip_jax prepare: the prepared training format (compclip_jax/data/prepare.py says what it holds).

  python -m compclip_jax prepare --csv=rows.csv --image_root=IMAGES --out=DIR            # CLIC rows
  python -m compclip_jax prepare --coco_json=dataset_coco.json --image_root=COCO --out=DIR [--paraphrases=P.json]
  … --format=tfds [--tfds_name=NAME]        # the same records as the TFDS dataset DIR/NAME/1.0.0 (data.source=tfds)

An input without usable rows, or with more rows skipped than training accepts (--max_skip_fraction, the default of
data.max_skip_fraction), is refused: one line, exit 2, and the folder is not marked finished (details in
`skipped.jsonl`; a rerun with a raised --max_skip_fraction resumes and finishes it).
"""
from __future__ import annotations

import os
import sys

from absl import flags

from compclip_jax.cli import app as cli
from compclip_jax.data.prepare import prepare
from compclip_jax.data.records import MAX_SKIP_FRACTION
from compclip_jax.data.sources import CocoSource, CsvSource, read_paraphrases
from compclip_jax.errors import UserError

_CSV = flags.DEFINE_string("csv", None, "CLIC rows: header-less CSV image_path, sentence_1, …")
_COCO = flags.DEFINE_string("coco_json", None, "Karpathy-style COCO caption JSON.")
_SPLITS = flags.DEFINE_list("splits", ["train"], "COCO splits to keep (READ's reference: Karpathy train only).")
_PARA = flags.DEFINE_string("paraphrases", None, "Optional JSON {cocoid: [paraphrases]} (READ).")
_ROOT = flags.DEFINE_string("image_root", None, "Directory the image paths are relative to.")
_OUT = flags.DEFINE_string("out", None, "Output directory.")
_SIZE = flags.DEFINE_integer("image_size", 224, "Model input size.")
_SHARD = flags.DEFINE_integer("shard_size", 2000, "Records per ArrayRecord shard.")
_WORKERS = flags.DEFINE_integer("workers", max(1, (os.cpu_count() or 2) - 1), "Parallel worker processes.")
_FORMAT = flags.DEFINE_enum("image_format", "PNG", ["PNG", "JPEG"], "PNG is lossless (bit-exact pixels); JPEG "
                            "(q95) is smaller.")
_ALPHA = flags.DEFINE_bool(
    "alpha_premultiplied_resize", None, "Resize images with transparency with their alpha "
    "(PIL premultiplies; data.alpha_premultiplied_resize). Default: on for --csv (CLIC "
    "reference), off for --coco_json (READ's reference drops alpha first).")
_ANY_FORMAT = flags.DEFINE_bool(
    "any_image_format", False, "--csv: keep rows whose image path does not end in "
    ".png/.jpg/.jpeg (the reference skips them; data.any_image_format).")
_MAX_SKIP = flags.DEFINE_float(
    "max_skip_fraction", MAX_SKIP_FRACTION, "Refuse (exit 2, the folder left unfinished) when more than this share "
    "of the rows is skipped; training's data.max_skip_fraction must be at least as large to train on the result.")
_OUTPUT_FORMAT = flags.DEFINE_enum(
    "format", "prepared", ["prepared", "tfds"], "prepared: this project's ArrayRecord layout (data.source=prepared); "
    "tfds: the same records as a TFDS dataset <out>/<tfds_name>/1.0.0, split train (data.source=tfds; readable by "
    "tfds.builder_from_directory without TensorFlow).")
_TFDS_NAME = flags.DEFINE_string("tfds_name", None, "--format=tfds: the dataset's name (default compclip_prepared).")
_REBUILD = flags.DEFINE_bool(
    "rebuild", False, "--out holds a prepared dataset of other inputs or options: delete "
    "the files prepare wrote there and start again.")


def _check_flags(argv) -> None:
  """One line (UserError) for a flag missing, or an input file or folder that is not there."""
  cli.refuse_arguments(argv)
  if bool(_CSV.value) == bool(_COCO.value):
    raise UserError("give exactly one of --csv or --coco_json (see --help)")
  if not (_ROOT.value and _OUT.value):
    raise UserError("--image_root and --out are required (see --help)")
  for flag in (_CSV, _COCO, _PARA):
    if flag.value and not os.path.isfile(flag.value):
      raise UserError(f"--{flag.name} {flag.value} is not a file")
  if not os.path.isdir(_ROOT.value):
    raise UserError(f"--image_root {_ROOT.value} is not a folder")
  if _TFDS_NAME.value and _OUTPUT_FORMAT.value != "tfds":
    raise UserError("--tfds_name names the dataset --format=tfds writes: add --format=tfds")
  if not 0 <= _MAX_SKIP.value <= 1:  # as data.max_skip_fraction (1: refuse only an input with no usable row)
    raise UserError(f"--max_skip_fraction {_MAX_SKIP.value}: give a fraction in [0, 1]")


def main(argv):
  _check_flags(argv)
  try:
    if _CSV.value:
      source = CsvSource(_CSV.value, _ROOT.value, any_image_format=_ANY_FORMAT.value)
      inputs, options = (), {"any_image_format": _ANY_FORMAT.value}
    else:
      paras = read_paraphrases(_PARA.value) if _PARA.value else None
      source = CocoSource(_COCO.value, _ROOT.value, _SPLITS.value, paras)
      inputs, options = ([_PARA.value] if _PARA.value else []), {"splits": list(_SPLITS.value)}
    alpha = _ALPHA.value if _ALPHA.value is not None else bool(_CSV.value)
    meta = prepare(
        source,
        _OUT.value,
        _SIZE.value,
        _SHARD.value,
        _WORKERS.value,
        _FORMAT.value,
        alpha_premultiplied_resize=alpha,
        rebuild=_REBUILD.value,
        inputs=inputs,
        options=options,
        max_skip_fraction=_MAX_SKIP.value,
        progress=sys.stderr.isatty(),  # no bar in a log
        tfds_name=(_TFDS_NAME.value or "compclip_prepared") if _OUTPUT_FORMAT.value == "tfds" else None)
  except (ValueError, OSError) as e:  # user errors: bad flags, unreadable inputs, a mismatching --out
    if os.environ.get("COMPCLIP_TRACEBACK"):
      raise
    print(f"prepare: error: {' '.join(str(e).split())}", file=sys.stderr)
    sys.exit(cli.EXIT_USER_ERROR)
  print(f"wrote {meta['records']:,} records in {len(meta['shards'])} shards to {_OUT.value}")
  if meta.get("output") == "tfds":
    print(f"as a TFDS dataset: train with --config.data.source=tfds --config.data.tfds_data_dir={_OUT.value} "
          f"--config.data.tfds_name={meta['tfds_name']}")
  if meta["skipped"]:
    print("skipped: " + ", ".join(f"{r} {n}" for r, n in sorted(meta["skipped"].items())) +
          f" (details: {os.path.join(_OUT.value, 'skipped.jsonl')})")


def run() -> None:
  cli.run(main)  # the package's other user errors (e.g. TooManySkipped) the same way


if __name__ == "__main__":
  run()
