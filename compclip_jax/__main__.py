"""python -m compclip_jax COMMAND [flags]: every command of the package, one table (`COMMANDS`).

  train       python -m compclip_jax train --config=clic --workdir=DIR   (the same as python -m compclip_jax.main)
  demo        the synthetic-world demo (the same as python -m compclip_jax.demo)
  evaluate    the benchmark suite on a checkpoint
  convert     weights between HF, open_clip and this project's runs
  prepare     a dataset's cached spaCy analysis and image shards (CSV, COCO, TFDS)
  compile     a config's train steps compiled for a TPU slice on this host: memory, FLOPs, bytes, roofline
  bench       timings: load, encode, pipeline, train (medians, baselines alternated)
  bench_device  the prepared accelerator benchmark
  synthetic   the synthetic world's SentencePiece model

`python -m compclip_jax COMMAND --help` prints that command's flags. The same commands are console scripts
(pyproject.toml: compclip-train, compclip-evaluate, …).
"""
from __future__ import annotations

import sys


# Each command's module, imported on use (each pulls in only what it needs: the device benchmark runs where spaCy,
# grain or orbax are absent); its run() parses the command's flags.
def _train():
  from compclip_jax.cli import main  # pylint: disable=import-outside-toplevel
  return main


def _demo():
  from compclip_jax.demo import command  # pylint: disable=import-outside-toplevel
  return command


def _evaluate():
  from compclip_jax.cli import evaluate  # pylint: disable=import-outside-toplevel
  return evaluate


def _convert():
  from compclip_jax.cli import convert  # pylint: disable=import-outside-toplevel
  return convert


def _prepare():
  from compclip_jax.cli import prepare  # pylint: disable=import-outside-toplevel
  return prepare


def _compile():
  from compclip_jax.cli import compile as compile_  # pylint: disable=import-outside-toplevel
  return compile_


def _bench():
  from compclip_jax.bench import main  # pylint: disable=import-outside-toplevel
  return main


def _bench_device():
  from compclip_jax.bench import device  # pylint: disable=import-outside-toplevel
  return device


def _synthetic():
  from compclip_jax.cli import synthetic  # pylint: disable=import-outside-toplevel
  return synthetic


COMMANDS = {
    "train": _train, "demo": _demo, "evaluate": _evaluate, "convert": _convert, "prepare": _prepare,
    "compile": _compile, "bench": _bench, "bench_device": _bench_device, "synthetic": _synthetic
}


def main(argv: list[str]) -> None:
  if len(argv) < 2 or argv[1] not in COMMANDS:
    given = f"unknown command {argv[1]!r}; " if len(argv) >= 2 and not argv[1].startswith("-") else ""
    print(f"error: {given}usage: python -m compclip_jax COMMAND [flags], COMMAND one of {', '.join(COMMANDS)}",
          file=sys.stderr)
    raise SystemExit(2)
  module = COMMANDS[argv[1]]()
  # absl prints __main__'s docstring for --help: the command's own
  sys.modules["__main__"].__doc__ = module.__doc__
  sys.argv = [f"python -m compclip_jax {argv[1]}"] + argv[2:]
  module.run()


if __name__ == "__main__":
  main(sys.argv)
