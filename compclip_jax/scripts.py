"""Console entry points (pyproject `[project.scripts]`): each runs its module exactly as `python -m` does.

  compclip-train     = python -m compclip_jax.main       (--config=clic[:arg] or a path, --workdir=…)
  compclip-evaluate  = python -m compclip_jax.evaluate
  compclip-convert   = python -m compclip_jax.convert
  compclip-prepare   = python -m compclip_jax.prepare
"""
from __future__ import annotations

import runpy


def _run(module: str) -> None:
  runpy.run_module(module, run_name="__main__", alter_sys=True)


def train() -> None:
  _run("compclip_jax.main")


def evaluate() -> None:
  _run("compclip_jax.evaluate")


def convert() -> None:
  _run("compclip_jax.convert")


def prepare() -> None:
  _run("compclip_jax.prepare")
