"""Convert a CLIP checkpoint between formats.

  python -m compclip_jax convert --src=PATH --dst=PATH --to=hf|open_clip|compclip [--model_name=ViT-B-32-quickgelu]
  python -m compclip_jax convert --src=WORKDIR[/checkpoints/N] --dst=DIR [--to=hf|open_clip]

`--src` is anything `load_clip` reads (HF directory, open_clip file, compclip directory). `--dst` is a directory
for hf/compclip, and a `.safetensors` file (or a directory) for open_clip. Nothing is downloaded; torch is only needed
when `--src` is a torch pickle.

`--src` a training workdir (its latest checkpoint) or one of its `checkpoints/N`: the new folder `--dst` receives
what the end of training writes to `<workdir>/export` (`hf/`, `open_clip/model.safetensors` as the run's `export.*`
config says; `--to` only that format), by training's own export code (compclip_jax/train/export.py) — an export
after Ctrl-C, or of an earlier step.
"""
from __future__ import annotations

import os
import sys
import time

from absl import flags

from compclip_jax.train import export as export_run
from compclip_jax.cli import app as cli
from compclip_jax.errors import UserError
from compclip_jax.weights.files import FORMATS  # jax-free: a mistake is answered before jax is imported


def _size(path: str) -> str:
  return f"{os.path.getsize(path) / 2**20:,.1f} MiB"


def convert(src: str, dst: str, to: str, model_name: str | None = None, activation: str | None = None,
            out=sys.stdout) -> list[str]:
  """Loads `src` and writes it as `to`; prints a progress line per stage and a summary. Returns the paths written."""
  from compclip_jax.weights.loading import load_clip, save_clip  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights.params import flat_params  # pylint: disable=import-outside-toplevel
  t0 = time.perf_counter()
  print(f"[1/2] reading {src} …", file=out, flush=True)
  model, tokenizer, preprocess = load_clip(src, model_name=model_name, activation=activation)
  n = sum(v.size for v in flat_params(model).values())
  cfg = model.cfg
  print(
      f"      {n:,} parameters; text {cfg.text.layers}×{cfg.text.width} ({cfg.text.act}), vision "
      f"{cfg.vision.layers}×{cfg.vision.width} patch {cfg.vision.patch_size} @ {cfg.vision.image_size}px, embed "
      f"{cfg.embed_dim}; tokenizer: {tokenizer.backend if tokenizer else 'none (see the warning above)'} "
      f"({time.perf_counter() - t0:.1f} s)", file=out, flush=True)
  t1 = time.perf_counter()
  print(f"[2/2] writing {to} to {dst} …", file=out, flush=True)
  written = save_clip(model, dst, format=to, tokenizer=tokenizer, preprocess=preprocess)
  print(f"done in {time.perf_counter() - t1:.1f} s; wrote {len(written)} files:", file=out)
  for p in written:
    print(f"  {p}  ({_size(p)})", file=out)
  return written


def convert_run(workdir: str, step: int | None, dst: str, to: str | None, out=sys.stdout) -> list[str]:
  """Training's export of a checkpoint of the run in `workdir` (see the module docstring); → the paths written."""
  if to == "compclip":
    raise UserError("--to=compclip: a training run exports as hf or open_clip (what training writes); leave --to "
                    "out for the run's own export formats")
  t0 = time.perf_counter()
  print(f"[1/2] reading the run in {workdir} (checkpoint {'latest' if step is None else step}) …", file=out, flush=True)
  step, written = export_run.export_run(workdir, step, dst, (to,) if to else ())
  print(
      f"[2/2] wrote training's export of step {step} to {dst} in {time.perf_counter() - t0:.1f} s; "
      f"{len(written)} files:", file=out)
  for p in written:
    print(f"  {p}  ({_size(p)})", file=out)
  return written


def _define_flags() -> dict:
  """The CLI's flags, defined only when this module runs as the program: importing `convert` next to another CLI
  module (evaluate also has --model_name) must not define them twice."""
  return {
      "src": flags.DEFINE_string(
          "src", None, "Checkpoint to read (HF dir, open_clip file, compclip dir, or a training "
          "workdir / its checkpoints/N).", required=True),
      "dst": flags.DEFINE_string("dst", None, "Where to write.", required=True),
      "to": flags.DEFINE_enum("to", None, FORMATS, "Output format (required unless --src is a training run)."),
      "model_name": flags.DEFINE_string(
          "model_name", None, "open_clip model name for --src state dicts whose "
          "architecture is not recorded (e.g. ViT-B-32-quickgelu)."),
      "activation": flags.DEFINE_enum("activation", None, ["quick_gelu", "gelu"], "Activation of an open_clip --src."),
  }


def main(argv, f: dict):
  cli.refuse_arguments(argv)
  cli.quiet_logging(cli.verbosity_given())
  src, dst, to = f["src"].value, f["dst"].value, f["to"].value
  if not os.path.exists(src):
    raise UserError(f"--src {src} does not exist (convert never downloads: pass a local directory or file)")
  run_src = export_run.run_source(src)
  if run_src is not None:
    convert_run(*run_src, dst, to)
    return
  if to is None:
    raise UserError(f"--to is required for --src {src}: one of {', '.join(FORMATS)}")
  convert(src, dst, to, f["model_name"].value, f["activation"].value)


def run() -> None:
  flag_values = _define_flags()
  cli.run(lambda argv: main(argv, flag_values))


if __name__ == "__main__":
  run()
