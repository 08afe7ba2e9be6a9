"""Name maps between our parameters and PyTorch checkpoints, declared once and run in both directions.

A map is a list of `Rule`s: one checkpoint key ↔ one or more of our flat parameter paths, with a reversible
`Transform` between the layouts (METHODS §4). Our dense `kernel`s are stored as torch's `Linear.weight`, [out, in]
(compclip_jax/models/layers.py), so HF and open_clip linears map as they are — a load is a copy, not a transpose;
what differs: the patch conv (ours HWIO, torch OIHW), open_clip's fused q/k/v `in_proj_weight` (split along rows),
and open_clip's two projections, which it applies as x @ W with W [width, embed].
`import_params` reads a checkpoint through a map and reports every mismatch at once; `export_params` writes through
the same map. Every parameter of the model must be covered by exactly one rule (asserted both ways).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from compclip_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class Transform:
  name: str
  export: Callable[[Sequence[np.ndarray]], np.ndarray]  # ours (1..n arrays) → theirs
  import_: Callable[[np.ndarray, int], tuple[np.ndarray, ...]]  # theirs → n arrays of ours


KEEP = Transform("keep", lambda a: a[0], lambda t, n: (t,))
TRANSPOSE = Transform("transpose", lambda a: a[0].T, lambda t, n: (t.T,))  # [out, in] ↔ [in, out]
CONV = Transform("conv", lambda a: a[0].transpose(3, 2, 0, 1), lambda t, n: (t.transpose(2, 3, 1, 0),))  # HWIO↔OIHW
FUSED = Transform("fused", lambda a: np.concatenate(list(a), axis=0), lambda t, n: tuple(np.split(t, n, axis=0)))


@dataclasses.dataclass(frozen=True)
class Rule:
  ours: tuple[str, ...]
  theirs: str
  transform: Transform = KEEP


class CheckpointMismatchError(UserError, ValueError):
  """A checkpoint that does not fit the model; the message lists every missing, unexpected and mis-shaped key."""
  def __init__(self, source: str, missing: list[str], unexpected: list[str], mismatched: list[str], hint: str = ""):
    self.missing, self.unexpected, self.mismatched = missing, unexpected, mismatched
    lines = [f"checkpoint {source} does not fit the model:"]
    for title, items in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", mismatched)):
      if items:
        lines.append(f"  {title} ({len(items)}):")
        lines += [f"    {k}" for k in items[:20]] + ([f"    … and {len(items) - 20} more"] if len(items) > 20 else [])
    if hint:
      lines.append(f"  hint: {hint}")
    super().__init__("\n".join(lines))


# ----------------------------------------------------------------------------------------------------- HF maps
# Our module paths mirror transformers' (`text_model.encoder.layers.0.self_attn.q_proj`), so an HF map only renames
# Flax leaves to torch leaves; the transform follows from the leaf kind.
_HF_LEAVES = {
    "kernel": ("weight", KEEP), "scale": ("weight", KEEP), "embedding": ("weight", KEEP), "bias": ("bias", KEEP),
    "weight": ("weight", KEEP)
}
_HF_CONV_KERNELS = ("vision_model.embeddings.patch_embedding.kernel",)


def hf_rules(our_paths: Iterable[str]) -> list[Rule]:
  """HF map for any of our mirror-named models (CLIP, T5 decoder): rename the leaf, pick the layout transform."""
  rules = []
  for path in our_paths:
    stem, _, leaf = path.rpartition(".")
    if path in _HF_CONV_KERNELS:
      rules.append(Rule((path,), f"{stem}.weight", CONV))
    elif stem and leaf in _HF_LEAVES:
      name, t = _HF_LEAVES[leaf]
      rules.append(Rule((path,), f"{stem}.{name}", t))
    else:  # class_embedding, logit_scale: same name, same layout
      rules.append(Rule((path,), path, KEEP))
  return rules


# ---------------------------------------------------------------------------------------------- open_clip map
# (our suffix(es) under <tower>.encoder.layers.{i}., open_clip suffix under <oc>transformer.resblocks.{i}., transform)
OPEN_CLIP_BLOCK = [
    (("layer_norm1.scale",), "ln_1.weight", KEEP),
    (("layer_norm1.bias",), "ln_1.bias", KEEP),
    (("self_attn.q_proj.kernel", "self_attn.k_proj.kernel", "self_attn.v_proj.kernel"), "attn.in_proj_weight", FUSED),
    (("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"), "attn.in_proj_bias", FUSED),
    (("self_attn.out_proj.kernel",), "attn.out_proj.weight", KEEP),
    (("self_attn.out_proj.bias",), "attn.out_proj.bias", KEEP),
    (("layer_norm2.scale",), "ln_2.weight", KEEP),
    (("layer_norm2.bias",), "ln_2.bias", KEEP),
    (("mlp.fc1.kernel",), "mlp.c_fc.weight", KEEP),
    (("mlp.fc1.bias",), "mlp.c_fc.bias", KEEP),
    (("mlp.fc2.kernel",), "mlp.c_proj.weight", KEEP),
    (("mlp.fc2.bias",), "mlp.c_proj.bias", KEEP),
]
_OC_TOP = [
    ("text_model.embeddings.token_embedding.embedding", "token_embedding.weight", KEEP),
    ("text_model.embeddings.position_embedding.embedding", "positional_embedding", KEEP),
    ("text_model.final_layer_norm.scale", "ln_final.weight", KEEP),
    ("text_model.final_layer_norm.bias", "ln_final.bias", KEEP),
    ("text_projection.kernel", "text_projection", TRANSPOSE),  # open_clip applies x @ W with W [width, embed]
    ("logit_scale", "logit_scale", KEEP),
    ("vision_model.embeddings.class_embedding", "visual.class_embedding", KEEP),
    ("vision_model.embeddings.patch_embedding.kernel", "visual.conv1.weight", CONV),
    ("vision_model.embeddings.position_embedding.embedding", "visual.positional_embedding", KEEP),
    ("vision_model.pre_layrnorm.scale", "visual.ln_pre.weight", KEEP),
    ("vision_model.pre_layrnorm.bias", "visual.ln_pre.bias", KEEP),
    ("vision_model.post_layernorm.scale", "visual.ln_post.weight", KEEP),
    ("vision_model.post_layernorm.bias", "visual.ln_post.bias", KEEP),
    ("visual_projection.kernel", "visual.proj", TRANSPOSE),
]


def open_clip_rules(text_layers: int, vision_layers: int) -> list[Rule]:
  rules = [Rule((ours,), theirs, t) for ours, theirs, t in _OC_TOP]
  for tower, oc, n in (("text_model", "", text_layers), ("vision_model", "visual.", vision_layers)):
    for i in range(n):
      rules += [
          Rule(tuple(f"{tower}.encoder.layers.{i}.{s}" for s in ours), f"{oc}transformer.resblocks.{i}.{theirs}", t)
          for ours, theirs, t in OPEN_CLIP_BLOCK
      ]
  return rules


# ------------------------------------------------------------------------------------------ generic import/export
def _check_coverage(rules: Sequence[Rule], our_paths: Iterable[str]) -> None:
  covered = [p for r in rules for p in r.ours]
  dupes = sorted({p for p in covered if covered.count(p) > 1})
  missing = sorted(set(our_paths) - set(covered))
  stray = sorted(set(covered) - set(our_paths))
  assert not (dupes or missing or stray), f"name map broken: twice {dupes}, uncovered {missing}, unknown {stray}"


def import_params(ckpt: Mapping[str, np.ndarray], rules: Sequence[Rule], expected: Mapping[str, tuple[int, ...]],
                  source: str, ignore: Sequence[str] = (), hint: str = "") -> dict[str, np.ndarray]:
  """Checkpoint {key: array} → our {path: array}, checked against `expected` {path: shape}.

  `ignore` holds regexes of checkpoint keys that are known and deliberately dropped (buffers, the T5 encoder, …).
  Raises CheckpointMismatchError listing everything that does not fit.
  """
  _check_coverage(rules, expected)
  known = {r.theirs for r in rules}
  dropped = re.compile("|".join(f"(?:{p})" for p in ignore)) if ignore else None
  unexpected = sorted(k for k in ckpt if k not in known and not (dropped and dropped.fullmatch(k)))
  missing = sorted(r.theirs for r in rules if r.theirs not in ckpt)
  out, mismatched = {}, []
  for r in rules:
    if r.theirs not in ckpt:
      continue
    arr = np.asarray(ckpt[r.theirs])
    try:
      parts = r.transform.import_(arr, len(r.ours))
    except (ValueError, IndexError):  # e.g. a fused tensor whose rows do not split in three
      parts = ()
    want = [tuple(expected[p]) for p in r.ours]
    if [p.shape for p in parts] != want:
      mismatched.append(f"{r.theirs}: checkpoint {tuple(arr.shape)}, model expects {_their_shape(r, want)} "
                        f"(as {', '.join(r.ours)})")
      continue
    out.update(zip(r.ours, parts))
  if missing or unexpected or mismatched:
    raise CheckpointMismatchError(source, missing, unexpected, mismatched, hint)
  return out


@dataclasses.dataclass(frozen=True)
class RawCheckpoint:
  """Tensors read from disk plus how to map them, before the model's shapes are known."""
  source: str
  tensors: Mapping[str, np.ndarray]
  rules: Callable[[Sequence[str]], list[Rule]]  # our parameter paths → the map
  ignore: tuple[str, ...] = ()
  hint: str = ""

  def to_ours(self, expected: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    return import_params(self.tensors, self.rules(list(expected)), expected, self.source, self.ignore, self.hint)


def _their_shape(rule: Rule, ours: list[tuple[int, ...]]) -> tuple[int, ...]:
  """The checkpoint-side shape that `rule` expects for our shapes (a message speaks the checkpoint's layout)."""
  zeros = [np.broadcast_to(np.zeros((), np.uint8), s) for s in ours]  # no memory of their own
  return tuple(rule.transform.export(zeros).shape)


def export_params(params: Mapping[str, np.ndarray], rules: Sequence[Rule]) -> dict[str, np.ndarray]:
  """Our {path: array} → checkpoint {key: array} through the same rules (contiguous arrays, ready to save)."""
  _check_coverage(rules, params)
  return {r.theirs: np.asarray(r.transform.export([np.asarray(params[p]) for p in r.ours]), order="C") for r in rules}
