"""The run's config: the sections every method shares (`base`), the `:runlocal` / `:demo` presets, the checks of the
shared sections, and older flat keys carried over to the method sections (`migrate`, `migrate_flat`).

A config is `base(method)` (+ the method's `Section`s, config.<section>) with the method's recipe applied
(configs/<name>.py). Everything here is values: no code path depends on which method runs. `problems` lists the
shared values that make no sense (train/trainer.py `validate` adds the rest); `key_problem` names the nearest key of a
mistyped one.
"""
from __future__ import annotations

import difflib
import logging

import ml_collections

from compclip_jax.data import records
from compclip_jax.errors import UserError
from compclip_jax.methods import base as methods_base
from compclip_jax.methods.base import Method


class ConfigError(UserError, ValueError):
  """A config that cannot run (a ValueError too: ml_collections and older callers catch that)."""


# Parameter-rule regexes for CLIP (matched against dotted paths, e.g. 'text_model.encoder.layers.0.mlp.fc1.kernel').
# SigLIP's names are transformers' too: its text head is text_model.head, its vision head is in vision_model, and its
# logit_bias sits with the text side, as logit_scale does (models/siglip/).
CLIP_TEXT = (r"text_model\..*", r"text_projection\..*", r"logit_scale", r"logit_bias")
CLIP_VISION = (r"vision_model\..*", r"visual_projection\..*")
# ≥2-D weights (kernels, token/position embeddings) decay; biases, LayerNorm scales and logit_scale do not (§1.4);
# nor do SigLIP's logit_bias and its pooling head's probe (a learned query, as CLIP's class embedding)
DECAY_2D = (r".*\.(kernel|embedding)", r".*\.in_proj_weight")
NO_DECAY_2D = (r".*\.(bias|scale)", r"(clip\.)?logit_scale", r".*class_embedding", r"(clip\.)?logit_bias",
               r".*\.head\.probe", r".*\.in_proj_bias")
# The rules that name SigLIP's parameters alone (added 2026-12-05): they match no CLIP parameter, so a run recorded
# before they existed is the same run without them (`carry_added_rules`)
SIGLIP_RULES = (r"logit_bias", r"(clip\.)?logit_bias", r"clip\.logit_bias", r".*\.in_proj_weight", r".*\.in_proj_bias",
                r".*\.head\.probe")
RULE_KEYS = ("optim.trainable", "optim.frozen", "optim.decay", "optim.no_decay")


def _model() -> dict:
  # precision / speed (docs/performance.md): compute dtype per tower ("" → compute_dtype; trained parameters and
  # AdamW state stay fp32, logits and losses fp32); attention "explicit" (reference numerics) | "xla" | "cudnn" |
  # "auto" (jax.nn.dot_product_attention, cuDNN on GPU in bf16); remat_policy "full" | "dots_no_batch" |
  # "dots_saveable" | "none", used when remat_text; scan_layers: each tower's blocks as one lax.scan (compiled once;
  # docs/tpu.md).
  # remat_text is on by default: the same function, +20 % of the text step's FLOPs, and what makes the paper configs
  # fit their TPUs with margin (ViT-L/14 text-side training at batch 800 on a v4-8; docs/tpu.md); the tiny
  # :runlocal / :demo runs on CPU turn it off. remat_vision (off) does the same for the vision tower's blocks, for a
  # method that trains them (a ViT-L/14 one at 256 on a v5e-8 needs it for a 10 % margin: docs/tpu.md)
  return dict(init="", model_name="", activation="", random="", frozen_dtype="bfloat16", compute_dtype="float32",
              remat_text=True, text_compute_dtype="", vision_compute_dtype="", attention="explicit",
              remat_policy="full", scan_layers=False, remat_vision=False)


def _data() -> dict:
  # data.image_size only sets the input size of a random model (model.random); a loaded model brings its own.
  # data.source: csv, coco, prepared (data.path), tfds (below) or synthetic: the generated world
  # (compclip_jax/data/synthetic/scenes.py) of data.synthetic_size scenes seeded by `seed`, written once into data.path
  # (default <workdir>/world), read as CSV rows (synthetic_format="csv") or COCO JSON + paraphrases ("coco");
  # synthetic_binding_noise p: each caption names the two objects with their colours exchanged with probability p and,
  # independently, their shapes exchanged with probability p (the demo's pretraining uses 0.5).
  return dict(
      source="csv",
      path="",
      image_root="",
      paraphrases="",
      splits=("train", "restval"),
      num_workers=0,
      max_skip_fraction=records.MAX_SKIP_FRACTION,
      image_size=224,
      synthetic_size=0,
      synthetic_format="csv",
      synthetic_binding_noise=0.0,
      trim_tokens=True,
      # METHODS §1.2 steps 3, 7: images with transparency resized with alpha, then alpha dropped (reference; False:
      # alpha dropped first); the CLIP tokenizer cleans text as open_clip (ftfy, html)
      alpha_premultiplied_resize=True,
      clean_text=True,
      # METHODS §1.1: CSV rows whose image path does not end in .png/.jpg/.jpeg (case-sensitive) are skipped and
      # counted as unsupported_extension (reference filter); True admits every format PIL reads
      any_image_format=False,
      **_tfds_data())


def _tfds_data() -> dict:
  # data.source="tfds" (data/tfds_source.py, docs/data.md): a TFDS dataset by name *with* its version, in
  # tfds_data_dir (local or gs://), one split (sub-splits as "train[:10%]" too), read without TensorFlow; the
  # feature key paths of the image, the captions (a text or a sequence of texts) and the id paraphrases are joined
  # by. The defaults read coco_captions (the Karpathy splits). tfds_lowercase: lower-case the captions (as
  # CSV rows are); tfds_split_sentences: cut each caption into sentences after . ! ? (one dense caption per image
  # → a main caption + extra sentences)
  return dict(tfds_name="coco_captions/2014:1.1.0", tfds_data_dir="", tfds_split="train", tfds_image_key="image",
              tfds_captions_key="captions/text", tfds_id_key="image/id", tfds_lowercase=False,
              tfds_split_sentences=False)


def base(method: Method) -> ml_collections.ConfigDict:
  """The shared sections with their defaults, plus `method`'s own sections (config.<name>)."""
  c = ml_collections.ConfigDict()
  c.method = method.name
  c.seed = 0
  c.model = _model()
  c.data = _data()
  c.batch_size = 800
  c.num_epochs = 1.0
  c.total_steps = 0  # 0: from num_epochs × records / batch_size
  # schedule "warmup_frac_cosine": linear start_lr → lr over warmup_frac of the steps, then cosine to end_lr;
  # "warmup_steps_cosine": linear 0 → lr over warmup_steps, then cosine to 0; "constant". clamp_logit_scale: clip
  # logit_scale to [0, ln 100] after every update (open_clip's training; what one reference intends but, acting on a
  # copy, does not do: off, as the references train; docs/fidelity.md row 13)
  c.optim = dict(schedule="warmup_frac_cosine", lr=1e-6, start_lr=1e-7, end_lr=1e-8, warmup_frac=0.2, warmup_steps=50,
                 b1=0.9, b2=0.98, eps=1e-8, weight_decay=0.1, grad_clip=0.0, trainable=CLIP_TEXT, frozen=CLIP_VISION,
                 decay=DECAY_2D, no_decay=NO_DECAY_2D, clamp_logit_scale=False)
  c.mesh = dict(data=-1, fsdp=1, min_fsdp_size=2 ** 18)
  # asynchronous: orbax writes a checkpoint in the background once it is on the host (train/checkpointing.py)
  c.checkpoint = dict(every_steps=200, keep=3, asynchronous=True)
  c.log_every = 10
  # read_ahead: the next batch is read and put on the devices while a step runs (docs/performance.md, the loop);
  # forbid_host_sync: any device → host fetch outside the log / eval / checkpoint points is an error (the tests' runs)
  c.loop = dict(read_ahead=True, forbid_host_sync=False)
  c.peak_flops = 0.0  # per device, for the MFU estimate (e.g. 989e12 for an H100 in bf16); 0 → no MFU
  c.export = dict(hf=True, open_clip=False)
  # Benchmarks run before training, every `every_steps` (0: only then and at the end) and at the end, logged as
  # eval/<benchmark>/<metric>. Names as for python -m compclip_jax evaluate. Lists are tuples so that they can be
  # overridden from the command line: --config.evals.benchmarks='("valse",)'. evals.source: "files"
  # (evals.data_dir / image_dir) or "synthetic": the synthetic world's held-out benchmarks (evals.synthetic_size
  # scenes seeded by seed + 1000), written once into evals.data_dir (default <workdir>/world/benchmarks).
  # evals.coco_tfds (+ evals.tfds_data_dir): coco_retrieval from that TFDS dataset's split test, e.g.
  # "coco_captions/2014:1.1.0" (evaluators/retrieval.py; data_dir / image_dir then only for the other benchmarks)
  c.evals = dict(benchmarks=(), every_steps=0, source="files", data_dir="", image_dir="", synthetic_size=0,
                 tie="strict", batch_size=64, coco_tfds="", tfds_data_dir="")
  c.siglip = siglip()
  for s in method.sections:
    c[s.name] = s.defaults()
  return c


def siglip() -> dict:
  """How the methods' terms read a sigmoid-family model (SigLIP; docs/siglip.md, "Methods on SigLIP"); a CLIP ignores
  them. contrastive: "sigmoid" (SigLIP's pairwise loss, each of an image's positives a +1 label, every other text −1)
  | "softmax" (the CLIP forms with the model's scale; its bias cancels). negatives (with "sigmoid"): "columns" (each
  swap negative an extra −1 column for every image) | "pair_softmax" (the softmax over each (positive, negative) pair,
  with the model's scale; the bias cancels)."""
  return dict(contrastive="sigmoid", negatives="columns")


ARGS = ("", "runlocal", "demo")


def for_method(method: Method, arg: str = "") -> ml_collections.ConfigDict:
  """`method`'s config: the shared sections and its own (`base`), its reference recipe, then the `:arg` preset —
  what configs/<name>.py returns."""
  c = base(method)
  method.recipe(c)
  return with_arg(c, arg, method)


def with_arg(c: ml_collections.ConfigDict, arg: str, method: Method) -> ml_collections.ConfigDict:
  """Applies the `:arg` of `--config=configs/<name>.py:arg`."""
  if arg == "runlocal":
    return runlocal(c, method)
  if arg == "demo":
    return demo(c, method)
  if arg:
    raise ConfigError(f"configs/{method.name}.py: unknown argument {arg!r} (use one of: runlocal, demo; or none, "
                      f"--config=configs/{method.name}.py)")
  return c


def runlocal(c: ml_collections.ConfigDict, method: Method, world_size: int = 64) -> ml_collections.ConfigDict:
  """A tiny random model on the synthetic world (written into the workdir), in the format the method reads (CSV
  rows, or COCO JSON + paraphrases), evaluated on its held-out benchmarks: a minute on a laptop CPU."""
  c.model.random = "tiny"
  c.model.frozen_dtype = "float32"
  c.model.remat_text = False  # a tiny model on a CPU: the second forward costs time and saves nothing that matters
  for s in method.sections:
    if s.runlocal is not None:
      s.runlocal(c)
  c.data.source, c.data.synthetic_format, c.data.synthetic_size = "synthetic", c.data.source, world_size
  c.data.image_size = 32
  c.batch_size = 8
  c.total_steps = 6
  c.log_every = 2
  c.checkpoint.every_steps = 3
  c.optim.lr = 1e-4
  c.optim.start_lr, c.optim.end_lr = 1e-5, 1e-6
  c.optim.warmup_steps = 2
  c.evals.benchmarks = ("sugarcrepe", "sugarcrepe_pp", "coco_retrieval")
  c.evals.source, c.evals.synthetic_size = "synthetic", 32  # held-out scenes of the same world, real formats
  return c


def demo(c: ml_collections.ConfigDict, method: Method) -> ml_collections.ConfigDict:
  """The fine-tuning step of the synthetic-world demo (`python -m compclip_jax.demo`, which brings the model it
  starts from and points data.path / evals.data_dir at one shared world): config values only."""
  runlocal(c, method)
  c.data.synthetic_size = 16000
  c.data.image_size = 64
  c.evals.synthetic_size = 300
  c.evals.every_steps = 100
  c.batch_size = 32
  # A short fine-tuning from a converged model, as in the papers (9,600 samples: 0.6 passes over the world). One
  # recipe for every method (linear warm-up, cosine decay). With 1,000 steps at lr 5e-4 the plain-contrastive
  # control itself reaches what the frozen vision tower allows (docs/demo.md) and every text-side method ties with it.
  c.total_steps = 300
  c.log_every = 25
  c.checkpoint.every_steps = 100
  c.optim.schedule, c.optim.lr, c.optim.warmup_steps = "warmup_steps_cosine", 1e-4, 20
  return c


# ------------------------------------------------------------------------------------------------------ checks
_POS, _NONNEG, _UNIT = methods_base.POSITIVE, methods_base.NON_NEGATIVE, methods_base.PROBABILITY
_MESH = (lambda v: v == -1 or v >= 1, "-1 (the devices left) or ≥ 1")
# the shared values that make no sense (0 only where it is a documented "off" / "derived")
RANGES = (("batch_size", _POS), ("num_epochs", _POS), ("total_steps", (_NONNEG[0], "≥ 0 (0: from num_epochs)")),
          ("log_every", _POS), ("checkpoint.every_steps", _POS), ("checkpoint.keep", _POS), ("optim.lr", _POS),
          ("optim.start_lr", _NONNEG), ("optim.end_lr", _NONNEG), ("optim.warmup_frac", _UNIT),
          ("optim.warmup_steps", _NONNEG), ("optim.b1", (lambda v: 0 <= v < 1, "in [0, 1)")),
          ("optim.b2", (lambda v: 0 <= v < 1, "in [0, 1)")), ("optim.eps", _NONNEG), ("optim.weight_decay", _NONNEG),
          ("optim.grad_clip", (_NONNEG[0], "≥ 0 (0: no clipping)")), ("data.max_skip_fraction", _UNIT),
          ("data.num_workers", _NONNEG), ("data.image_size", _POS),
          ("evals.every_steps", (_NONNEG[0], "≥ 0 (0: before and after training only)")), ("evals.batch_size", _POS),
          ("mesh.data", _MESH), ("mesh.fsdp", _MESH), ("mesh.min_fsdp_size", _NONNEG),
          ("peak_flops", (_NONNEG[0], "≥ 0 (0: no MFU)")))

# (key, its values): the shared string switches
CHOICES = (("siglip.contrastive", ("sigmoid", "softmax")), ("siglip.negatives", ("columns", "pair_softmax")))


def problems(c: ml_collections.ConfigDict) -> list[str]:
  """Every shared value of `c` that makes no sense (`RANGES`, `CHOICES`), e.g. a learning rate ≤ 0 or a NaN."""
  out = methods_base.out_of_range(c, RANGES)
  for key, values in CHOICES:
    section, name = key.split(".")
    if c[section][name] not in values:
      out.append(f"{key} {c[section][name]!r}: must be one of {', '.join(values)}")
  return out


def _keys(c: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  out = []
  for k, v in c.items():
    out.append(prefix + k)
    if isinstance(v, ml_collections.ConfigDict):
      out += _keys(v, f"{prefix}{k}.")
  return out


def key_problem(c: ml_collections.ConfigDict, key: str) -> str | None:
  """None when the dotted `key` is one of config `c`; else what to say (the nearest key, or the section's keys)."""
  node, parts = c, key.split(".")
  for i, part in enumerate(parts):
    if isinstance(node, ml_collections.ConfigDict) and part in node:
      node = node[part]
      continue
    section = ".".join(parts[:i])
    keys = sorted(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
    # a sibling first (optim.lrr → optim.lr), then a key anywhere (optimm.lr → optim.lr)
    near = [".".join(parts[:i] + [k] + parts[i + 1:]) for k in difflib.get_close_matches(part, keys, n=1)]
    near = near or difflib.get_close_matches(key, _keys(c), n=1, cutoff=0.8)
    if near:
      return f"no such config key: did you mean {near[0]}?"
    return f"no such config key ({section or 'the config'} has {', '.join(keys) or 'no keys'})"
  return None


# ------------------------------------------------------------------------------------------- older flat keys
def rename(key: str, renamed: tuple[tuple[str, str], ...]) -> str | None:
  """Today's name of an older dotted `key` (an entry of `renamed` ending in "." renames a prefix), or None."""
  for old, new in renamed:
    if key == old or (old.endswith(".") and key.startswith(old)):
      return new + key[len(old):]
  return None


def new_value(key: str, value, renamed_values) -> object:
  """Today's value of an older one (`Section.renamed_values`: e.g. a schedule once named after a method)."""
  for k, old, new in renamed_values:
    if k == key and value == old:
      return new
  return value


# Keys added to the shared sections after runs were recorded, with the value that behaves as the code did before
# (an older identity lacks them: read as these, it resumes without a difference).
ADDED = {
    **{f"data.{k}": v for k, v in _tfds_data().items()},  # 2026-12-03: data.source="tfds"
    "optim.clamp_logit_scale": False,  # 2026-12-03: unclamped, as before
    "model.remat_vision": False,  # 2026-12-04: the vision tower's blocks stored, as before
    **{f"siglip.{k}": v for k, v in siglip().items()},  # 2026-12-05: SigLIP training (a CLIP ignores them)
}


def migrate_flat(flat: dict, renamed: tuple[tuple[str, str], ...], renamed_values=(),
                 keep: set | None = None) -> tuple[dict, list]:
  """A flat {dotted key: value} (a recorded run identity) with older keys and values renamed; renamed keys not in
  `keep` (another method's sections, which older configs carried) are dropped. → (migrated, [(old, new)] of the
  renamed keys kept)."""
  out, moved = {}, []
  for k, v in flat.items():
    new = rename(k, renamed)
    if new is not None:
      if keep is not None and new not in keep:
        continue
      moved.append((k, new))
      k = new
    out[k] = new_value(k, v, renamed_values)
  for k, v in ADDED.items():  # keys added since: the value that is how the code behaved before them
    if keep is None or k in keep:
      out.setdefault(k, v)
  return out, moved


def carry_added_rules(old: dict, new: dict) -> dict:
  """A recorded run identity `old` whose parameter rules are today's (`new`) less `SIGLIP_RULES` takes today's: the
  rules added for SigLIP match no CLIP parameter, so that run trains what it trained (its trainable set says so)."""
  out = dict(old)
  for k in RULE_KEYS:
    if k in old and k in new and list(old[k]) == [r for r in new[k] if r not in SIGLIP_RULES]:
      out[k] = new[k]
  return out


def warn_renamed(moved: list, where: str) -> None:
  """One warning line naming every older key of `where` and what it is now."""
  if moved:
    logging.warning("%s uses older config keys, read as today's: %s", where, ", ".join(f"{a} → {b}" for a, b in moved))
