"""Convert a CLIP checkpoint between formats.

  python -m compclip_jax.convert --src=PATH --dst=PATH --to=hf|open_clip|compclip [--model_name=ViT-B-32-quickgelu]

`--src` is anything `load_clip` reads (HF directory, open_clip file, compclip directory). `--dst` is a directory
for hf/compclip, and a `.safetensors` file (or a directory) for open_clip. Nothing is downloaded; torch is only needed
when `--src` is a torch pickle.
"""
from __future__ import annotations

import os
import sys
import time

from absl import app, flags

from compclip_jax.cli import app as cli
from compclip_jax.weights.loading import FORMATS, load_clip, save_clip
from compclip_jax.weights.params import flat_params


def _size(path: str) -> str:
  return f"{os.path.getsize(path) / 2**20:,.1f} MiB"


def convert(src: str, dst: str, to: str, model_name: str | None = None, activation: str | None = None,
            out=sys.stdout) -> list[str]:
  """Loads `src` and writes it as `to`; prints a progress line per stage and a summary. Returns the paths written."""
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


def _define_flags() -> dict:
  """The CLI's flags, defined only when this module runs as the program: importing `convert` next to another CLI
  module (evaluate also has --model_name) must not define them twice."""
  return {
      "src": flags.DEFINE_string("src", None, "Checkpoint to read (HF dir, open_clip file, compclip dir).",
                                 required=True),
      "dst": flags.DEFINE_string("dst", None, "Where to write.", required=True),
      "to": flags.DEFINE_enum("to", None, FORMATS, "Output format.", required=True),
      "model_name": flags.DEFINE_string(
          "model_name", None, "open_clip model name for --src state dicts whose "
          "architecture is not recorded (e.g. ViT-B-32-quickgelu)."),
      "activation": flags.DEFINE_enum("activation", None, ["quick_gelu", "gelu"], "Activation of an open_clip --src."),
  }


def main(argv, f: dict):
  del argv
  cli.quiet_logging(cli.verbosity_given())
  convert(f["src"].value, f["dst"].value, f["to"].value, f["model_name"].value, f["activation"].value)


def run() -> None:
  flag_values = _define_flags()
  app.run(cli.guard(lambda argv: main(argv, flag_values)))


if __name__ == "__main__":
  run()
