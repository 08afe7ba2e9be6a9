"""Training methods, one folder each — the single home of what a method is (base.Method): its step kinds and their
alternation, the sample builder and image normalisation of each kind, its losses and their typed options, the loss
terms its console line shows, its extra model parts, its config section with its checks. Its recipe, the values, is
configs/<name>.py. `ALL` lists them.

  clic       CLIC steps alternating with CLIC's CLIP step (METHODS §1)
  read       READ: hard-negative contrastive + reconstruction + alignment (METHODS §2)
  negclip    "our NegCLIP" (METHODS §1.5)
  clip       plain CLIP fine-tuning
  clic_read  ours: CLIC + READ's reconstruction and alignment objectives
"""
from __future__ import annotations

from compclip_jax.methods import clic, clic_read, clip, negclip, read
from compclip_jax.methods.base import Method, StepKind

ALL: tuple[Method, ...] = (clic.METHOD, read.METHOD, negclip.METHOD, clip.METHOD, clic_read.METHOD)


def names() -> tuple[str, ...]:
  return tuple(m.name for m in ALL)


def get(name: str) -> Method:
  """The method called `name` (config.method); ValueError naming the known ones otherwise."""
  for m in ALL:
    if m.name == name:
      return m
  raise ValueError(f"method {name!r}: use one of {names()}")


def step_kind(name: str) -> StepKind:
  """The step kind called `name` ("clic", "clic_clip", "read", …) of any method."""
  for m in ALL:
    for k in m.kinds:
      if k.name == name:
        return k
  raise ValueError(f"step kind {name!r}: use one of {tuple(dict.fromkeys(k.name for m in ALL for k in m.kinds))}")


__all__ = ["ALL", "Method", "StepKind", "get", "names", "step_kind"]
