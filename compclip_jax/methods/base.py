"""What a training method is: `StepKind` (one kind of train step: record → sample → loss), `Section` (a config
section of its own) and `Method` (its step kinds, their alternation, its metric names, config sections, extra model
parts), plus the encoding helpers the methods' losses share. The trainer, the step builder, the pipeline and the
metric writer take these objects and never name a method (docs/architecture.md, "methods/").
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from compclip_jax.data.samples import ImageOptions, Tagger
from compclip_jax.models.clip import CLIP

# (record, partner record or None, rng, tagger, the kind's options) → {"image": uint8 [S, S, 3], "texts": [str], …}
SampleFn = Callable[[dict, dict | None, np.random.Generator, Tagger | None, Any], dict]
# (merged model, global batch, this step's rng, (mean, std), the kind's loss options) → (loss [], metrics {name: []})
LossFn = Callable[[nnx.Module, dict, jax.Array, tuple, Any], tuple[jax.Array, dict]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SigmoidForms:
  """How the methods' terms read a sigmoid-family model (SigLIP; config section `siglip`, docs/siglip.md); a CLIP
  ignores them. contrastive: "sigmoid" (SigLIP's pairwise loss, each of an image's positives a +1 label, every other
  text −1) | "softmax" (the CLIP forms with the model's scale; its bias cancels). negatives (with "sigmoid"):
  "columns" (each swap negative an extra −1 column for every image) | "pair_softmax" (the softmax over each
  (positive, negative) pair, with the model's scale; the bias cancels)."""
  contrastive: str
  negatives: str


def sigmoid_forms(c: ml_collections.ConfigDict) -> SigmoidForms:
  """The run's `siglip` section as typed options (what a kind without terms of its own gets as its loss options)."""
  return options_from(SigmoidForms, c, "siglip")


def options_from(cls, c: ml_collections.ConfigDict, section: str, **given):
  """`cls` (a dataclass of loss options) from config section `section`: each field not in `given` is the section's
  key of that name. A key the config lacks is a ValueError naming it (each value is set in exactly one place: the
  recipe, configs/<name>.py)."""
  values = dict(given)
  for f in dataclasses.fields(cls):
    if f.name in values:
      continue
    if section not in c or f.name not in c[section]:
      raise ValueError(f"the config has no {section}.{f.name}: its recipe (configs/<method>.py) sets it")
    values[f.name] = c[section][f.name]
  return cls(**values)


def image_options(c: ml_collections.ConfigDict, image_size: int) -> ImageOptions:
  """The options every kind's builder gets: the model's input size and `data.alpha_premultiplied_resize`."""
  return ImageOptions(image_size=image_size, alpha_premultiplied_resize=bool(c.data.alpha_premultiplied_resize))


def model_normalization(opts, mean, std) -> tuple[tuple, tuple]:
  """The model's own preprocessing constants (METHODS §1.4: CLIP steps, NegCLIP, READ)."""
  del opts
  return tuple(mean), tuple(std)


def no_partner(opts) -> bool:
  del opts
  return False


@dataclasses.dataclass(frozen=True)
class Layout:
  """The global batch a kind's pipeline emits (data/pipeline.py) besides `image` uint8 [B, S, S, 3]: ids int32
  [B, texts, L]; neg_valid bool [B, *negatives] when `negatives` is not None; para_ids int32 [B, L] with
  `paraphrase`; t5_target int32 [B, T5] when the kind has a T5 target. What a compile check builds abstractly."""
  texts: int = 1
  negatives: tuple[int, ...] | None = None
  paraphrase: bool = False


@dataclasses.dataclass(frozen=True)
class StepKind:
  """One kind of train step. Picklable (module-level functions only): grain workers receive it with the pipeline."""
  name: str  # pipeline layout, data-state and `loss/<name>` key: checkpointed, never rename
  sample: SampleFn
  loss: LossFn
  # config → the typed options its `loss` gets, built once per run (train/state.py): loss weights and switches
  loss_options: Callable[[ml_collections.ConfigDict], Any] = sigmoid_forms
  # (config, the model's input size) → the picklable options its `sample` gets (an ImageOptions or an extension)
  options: Callable[[ml_collections.ConfigDict, int], ImageOptions] = image_options
  # (options, model mean, model std) → the (mean, std) the step applies on device to the batch's uint8 images
  normalization: Callable[[Any, Any, Any], tuple[tuple, tuple]] = model_normalization
  partner: Callable[[Any], bool] = no_partner  # True: the sample takes a same-orientation partner record
  t5_target: bool = False  # the sample has a "target" caption the T5 tokenizer encodes (the decoder's target)
  # its images follow data.alpha_premultiplied_resize; False: alpha is always dropped before resizing
  alpha_from_config: bool = True
  layout: Layout = Layout()
  # records with fewer sentences are skipped, counted as too_few_sentences (METHODS §1.1: CLIC's sample takes a main
  # caption and extra sentences); the CSV source drops such rows when read, other sources meet them when loaded
  min_sentences: int = 1

  def batch_shapes(self, batch: int, image_size: int, text_len: int = 77, t5_len: int = 77) -> dict:
    """{key: (shape, dtype name)} of the global batch its pipeline emits (`Layout`), at full token width."""
    out = {
        "image": ((batch, image_size, image_size, 3), "uint8"), "ids": ((batch, self.layout.texts, text_len), "int32")
    }
    if self.layout.negatives is not None:
      out["neg_valid"] = ((batch, *self.layout.negatives), "bool")
    if self.layout.paraphrase:
      out["para_ids"] = ((batch, text_len), "int32")
    if self.t5_target:
      out["t5_target"] = ((batch, t5_len), "int32")
    return out


def no_problems(c: ml_collections.ConfigDict) -> list[str]:
  del c
  return []


# (test, what a value must be) of `out_of_range`'s rules
POSITIVE = (lambda v: v > 0, "> 0")
NON_NEGATIVE = (lambda v: v >= 0, "≥ 0")
PROBABILITY = (lambda v: 0 <= v <= 1, "in [0, 1]")


def out_of_range(c: ml_collections.ConfigDict, rules: tuple[tuple[str, tuple], ...]) -> list[str]:
  """The values of `c` that make no sense: `rules` are (dotted key, (test, what the value must be)); a value that is
  no finite number fails too (a NaN passes every comparison's negation)."""
  out = []
  for key, (test, must) in rules:
    v = c
    for part in key.split("."):
      v = v[part]
    finite = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not finite or not test(v):
      out.append(f"{key} {v!r}: must be {must}")
  return out


@dataclasses.dataclass(frozen=True)
class Section:
  """A method's own config section, `config.<name>`: the keys it must hold (set by the recipes,
  configs/<name>.py), its checks, the keys a checkpoint cannot continue with when changed (`fixed`) and those that do
  not change what is trained (`neutral`)."""
  name: str
  keys: tuple[str, ...]
  problems: Callable[[ml_collections.ConfigDict], list[str]] = no_problems  # given the whole config
  fixed: tuple[str, ...] = ()
  neutral: tuple[str, ...] = ()  # keys that do not change what is trained (may differ between starts of one run)

  def missing(self, c: ml_collections.ConfigDict) -> list[str]:
    """The section's keys `c` lacks (a recipe that leaves one out)."""
    if self.name not in c:
      return [self.name]
    return [f"{self.name}.{k}" for k in self.keys if k not in c[self.name]]


@dataclasses.dataclass
class Extension:
  """What a method builds around CLIP (`Method.extend_model`): the whole model and its initial parameters."""
  abstract: nnx.Module  # shape only
  flat: dict  # {dotted path: numpy array} of the whole model, CLIP's parameters included (or ShapeDtypeStructs)
  target_tokenizer: Any = None  # the tokenizer of the samples' "target" captions (READ: its decoder's), if any
  export_info: Any = None  # handed back to `Method.export_parts` (e.g. the decoder's config)


@dataclasses.dataclass(frozen=True)
class Method:
  """A training method: the single home of what it trains with (its recipe, the values, is configs/<name>.py)."""
  name: str  # config.method
  kinds: tuple[StepKind, ...]  # every kind it may run; kinds[0] is its main step
  console_terms: tuple[str, ...]  # loss terms the console line shows: metric `x/<term>` for each term
  # config → the step kinds of one period of the schedule: step g runs cycle[g % len(cycle)] (METHODS §1.4)
  cycle: Callable[[ml_collections.ConfigDict], tuple[StepKind, ...]] | None = None
  sections: tuple[Section, ...] = ()  # its config sections (config.<section.name>)
  # (config, CLIP config, CLIP's flat initial parameters, make_clip(cfg, rngs=None) → a CLIP module,
  # shapes_only=bool) → Extension: the model the steps train (e.g. READ's CLIP + W + frozen T5 decoder); None: CLIP
  # itself. shapes_only: the Extension's flat holds ShapeDtypeStructs, no weights read or drawn
  # (train/state.build_model)
  extend_model: Callable[..., Extension] | None = None
  # (config, workdir, export_info, t5 tokenizer, flat {path: array} of the whole model) → CLIP's own flat parameters,
  # after writing what else the method exports (READ: the decoder, when read.export_decoder)
  export_parts: Callable[..., dict] | None = None
  needs_parse: bool = False  # its negatives need the dependency parse (noun chunks) of a prepared source

  def problems(self, c: ml_collections.ConfigDict) -> list[str]:
    """Every problem of the method's config sections: a key its recipe left out, then each section's own checks."""
    missing = [k for s in self.sections for k in s.missing(c)]
    if missing:
      return [f"the config has no {', '.join(missing)}: configs/{self.name}.py sets every key of its sections"]
    return [e for s in self.sections for e in s.problems(c)]

  def schedule(self, c: ml_collections.ConfigDict) -> tuple[StepKind, ...]:
    return self.cycle(c) if self.cycle is not None else self.kinds[:1]

  def period(self, c: ml_collections.ConfigDict) -> int:
    """Steps after which `kind_at` repeats."""
    return len(self.schedule(c))

  def kind_at(self, c: ml_collections.ConfigDict, step: int) -> StepKind:
    cycle = self.schedule(c)
    return cycle[step % len(cycle)]

  def step_kinds(self, c: ml_collections.ConfigDict) -> tuple[StepKind, ...]:
    """The kinds this config runs, in order of first use (each gets a pipeline and a jitted step)."""
    return tuple(dict.fromkeys(self.schedule(c)))


# ----------------------------------------------------------------------------------- encoding, shared by the losses
def normalize_images(images_u8: jax.Array, mean, std) -> jax.Array:
  """uint8 [B, H, W, 3] → float32 (x/255 − mean)/std (the on-device twin of data/images.Preprocess)."""
  x = images_u8.astype(jnp.float32) / 255.0
  return (x - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)


def image_embeddings(clip: CLIP, batch: dict, norm: tuple) -> jax.Array:
  """batch["image"] uint8 [B, H, W, 3] → L2-normalised fp32 [B, D]."""
  return clip.encode_image(normalize_images(batch["image"], *norm), normalize=True)


def stacked(ids: jax.Array) -> jax.Array:
  """[B, K, L] per-sample caption sets → [K·B, L] stacked set by set ([p1 (B); p2 (B); …])."""
  return jnp.swapaxes(ids, 0, 1).reshape(-1, ids.shape[-1])


def per_sample(fn: Callable[[jax.Array], jax.Array], ids: jax.Array) -> jax.Array:
  """`fn` (a text tower) on every caption of ids [B, K, L] → its outputs [B, K, …], sample-major.

  The captions go through `fn` as [B·K, L], a reshape that keeps the batch axis, and so its sharding, outermost.
  Stacking the ids set by set first merges the sharded batch axis into an inner one, which XLA lays out by
  gathering every caption's activations to every device, layer by layer: CLIC's step (ViT-B/32, global batch 800,
  v5e-8, bf16 FSDP, no remat; `python -m compclip_jax compile`) held 17.48 GiB per chip that way, 9.48
  sample-major (docs/tpu.md). Take one caption of every sample as `out[:, j]` (its rows stay where they are)."""
  b, k, l = ids.shape
  out = fn(ids.reshape(b * k, l))
  return out.reshape(b, k, *out.shape[1:])


def set_major(out: jax.Array) -> jax.Array:
  """[B, K, …] → [K·B, …], set by set (what the losses index as `txt[j·B:(j+1)·B]`). Its rows of one set are no
  longer the batch axis's own shards: read one set from the sample-major array instead (`per_sample`)."""
  b, k = out.shape[:2]
  return jnp.swapaxes(out, 0, 1).reshape(k * b, *out.shape[2:])


def per_set(fn: Callable[[jax.Array], jax.Array], ids: jax.Array) -> jax.Array:
  """`fn` on every caption of ids [B, K, L] → its outputs [K·B, …] stacked set by set, as `fn(stacked(ids))` — the
  same rows, the same values, computed sample-major (`per_sample`)."""
  return set_major(per_sample(fn, ids))


def logit_scale(clip: CLIP) -> jax.Array:
  """s = exp(logit_scale), fp32 [] (stored as a log, METHODS §4; SigLIP stores it [1])."""
  return jnp.exp(clip.logit_scale[...].astype(jnp.float32).reshape(()))


def logit_bias(clip: CLIP, forms: SigmoidForms) -> jax.Array | None:
  """SigLIP's b, fp32 [], when the losses take their sigmoid forms: a sigmoid family (its `logit_bias_value`) with
  `forms.contrastive == "sigmoid"`. None: the softmax forms the references define — a CLIP, or a SigLIP with
  contrastive "softmax" (its scale; the bias cancels in every softmax). docs/siglip.md."""
  bias = clip.logit_bias_value()
  return bias if bias is not None and forms.contrastive == "sigmoid" else None
