"""Training methods, one folder each — the single home of what a method is (base.Method): its step kinds and their
alternation, the sample builder and image normalisation of each kind, its losses, the loss terms its console line
shows, its extra model parts, its config section with its checks and its reference recipe (`configs/<name>.py`
applies it). `ALL` lists them; `renamed_keys` gathers what their sections took over from older flat config keys.

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


def renamed_keys() -> tuple[tuple[str, str], ...]:
  """(old dotted key or prefix, new one) of every method's config section: older workdirs and command lines."""
  return tuple(dict.fromkeys(r for m in ALL for s in m.sections for r in s.renamed))


def renamed_values() -> tuple[tuple[str, object, object], ...]:
  """(key, old value, new value) of every method's config section: values older versions named after a method."""
  return tuple(dict.fromkeys(r for m in ALL for s in m.sections for r in s.renamed_values))


def step_kind(name: str) -> StepKind:
  """The step kind called `name` ("clic", "clic_clip", "read", …) of any method."""
  for m in ALL:
    for k in m.kinds:
      if k.name == name:
        return k
  raise ValueError(f"step kind {name!r}: use one of {tuple(dict.fromkeys(k.name for m in ALL for k in m.kinds))}")


__all__ = ["ALL", "Method", "StepKind", "get", "names", "renamed_keys", "renamed_values", "step_kind"]
