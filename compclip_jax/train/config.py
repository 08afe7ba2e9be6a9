"""The shared part of every recipe and the checks of the shared sections.

A recipe, configs/<name>.py, is `base(method)` — the sections no paper sets (where the data and the model come from,
the mesh, checkpoints, the loop, how benchmarks are read, how a sigmoid family takes the terms) — plus every value a
reader of the paper looks for: the precision, the data, the batch, the steps, the schedule and optimiser, the loss
weights, what is frozen, the benchmarks. Its variants are `:key=value` arguments (`parse_arg`): `runlocal` and `demo`
(`runlocal`, `demo`: values only), `model=B/32` (a random model of that architecture, for the compile check and the
benchmarks), `family=siglip` (with runlocal / demo: the tiny SigLIP). Everything here is values: no code path depends
on which method runs. `problems` lists the shared values that make no sense (train/trainer.py `validate` adds the
rest); `key_problem` names the nearest key of a mistyped one.
"""
from __future__ import annotations

import difflib
import math

import ml_collections

from compclip_jax.data import records
from compclip_jax.errors import UserError
from compclip_jax.methods import base as methods_base
from compclip_jax.models import TINY


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
# the architectures `:model=` names (the papers' ViT-B/32 and the larger ViT-L/14, OpenAI's quick-GELU towers)
MODELS = {"B/32": "ViT-B-32-quickgelu", "L/14": "ViT-L-14-quickgelu", "B/16": "ViT-B-16-quickgelu"}


def base(method: str) -> ml_collections.ConfigDict:
  """The sections no paper sets, for the method called `method`; the recipe adds the rest."""
  c = ml_collections.ConfigDict()
  c.method = method
  c.seed = 0
  # model.init: an HF / open_clip / compclip checkpoint (load_clip); or model.random, a random model ("tiny", "demo",
  # "siglip_tiny", "siglip_demo", an open_clip name). Speed knobs (docs/performance.md): compute dtype per tower
  # ("" → model.compute_dtype, which the recipe sets, as it sets model.attention); remat_policy "full" |
  # "dots_no_batch" | "dots_saveable" | "none" for a rematerialised tower; scan_layers: each tower's blocks as one
  # lax.scan (compiled once; docs/tpu.md); remat_vision: the vision tower's blocks rematerialised, for a method that
  # trains them; pad_tokens_to: CLIP's text tower runs its token width rounded up to a multiple of this (padding after
  # the text, exact under the causal mask; 16 spares XLA:TPU a layout copy per projection at 77 tokens: docs/tpu.md).
  c.model = dict(init="", model_name="", activation="", random="", text_compute_dtype="", vision_compute_dtype="",
                 remat_policy="full", scan_layers=False, remat_vision=False, pad_tokens_to=1)
  c.data = _data()
  # shard_optimizer: AdamW's moments sharded over every device, the parameters as they are (data-parallel: on every
  # device); each device updates its slice of them (ZeRO stage 1; docs/tpu.md)
  c.mesh = dict(data=-1, fsdp=1, min_fsdp_size=2 ** 18, shard_optimizer=False)
  # asynchronous: orbax writes a checkpoint in the background once it is on the host (train/checkpointing.py)
  c.checkpoint = dict(every_steps=200, keep=3, asynchronous=True)
  c.log_every = 10
  # read_ahead: the next batch is read and put on the devices while a step runs (docs/performance.md, the loop);
  # forbid_host_sync: any device → host fetch outside the log / eval / checkpoint points is an error (the tests' runs)
  c.loop = dict(read_ahead=True, forbid_host_sync=False)
  c.peak_flops = 0.0  # per device, for the MFU estimate (e.g. 989e12 for an H100 in bf16); 0 → no MFU
  c.export = dict(hf=True, open_clip=False)
  # Benchmarks (the recipe names them, evals.benchmarks) run before training, every `every_steps` (0: only then and
  # at the end) and at the end, logged as eval/<benchmark>/<metric>. evals.source: "files" (evals.data_dir /
  # image_dir) or "synthetic": the synthetic world's held-out benchmarks (evals.synthetic_size scenes seeded by
  # seed + 1000), written once into evals.data_dir (default <workdir>/world/benchmarks). evals.coco_tfds (+
  # evals.tfds_data_dir): coco_retrieval from that TFDS dataset's split test, e.g. "coco_captions/2014:1.1.0"
  # (evaluators/retrieval.py; data_dir / image_dir then only for the other benchmarks)
  c.evals = dict(every_steps=0, source="files", data_dir="", image_dir="", synthetic_size=0, tie="strict",
                 batch_size=64, coco_tfds="", tfds_data_dir="")
  # how the methods' terms read a sigmoid-family model (methods/base.SigmoidForms, docs/siglip.md); a CLIP ignores it
  c.siglip = dict(contrastive="sigmoid", negatives="columns")
  return c


def _data() -> dict:
  # data.path / image_root / paraphrases: where the recipe's data.source reads (csv, coco, prepared; tfds below; or
  # synthetic: the generated world, compclip_jax/data/synthetic/, of data.synthetic_size scenes seeded by `seed`,
  # written once into data.path (default <workdir>/world), read as CSV rows (synthetic_format="csv") or COCO JSON +
  # paraphrases ("coco"); synthetic_binding_noise p: each caption names the two objects with their colours
  # exchanged with probability p and, independently, their shapes (the demo's pretraining uses 0.5)).
  # data.image_size only sets the input size of a random model (model.random); a loaded model brings its own.
  return dict(
      path="",
      image_root="",
      paraphrases="",
      num_workers=0,
      max_skip_fraction=records.MAX_SKIP_FRACTION,
      image_size=224,
      synthetic_size=0,
      synthetic_format="csv",
      synthetic_binding_noise=0.0,
      trim_tokens=True,
      # METHODS §1.2 step 3: images with transparency resized with alpha, then alpha dropped (reference; False:
      # alpha dropped first)
      alpha_premultiplied_resize=True,
      # METHODS §1.1: CSV rows whose image path does not end in .png/.jpg/.jpeg (case-sensitive) are skipped and
      # counted as unsupported_extension (reference filter); True admits every format PIL reads
      any_image_format=False,
      # data.source="tfds" (data/tfds_source.py, docs/data.md): a TFDS dataset by name *with* its version, in
      # tfds_data_dir (local or gs://), one split (sub-splits as "train[:10%]" too), read without TensorFlow; the
      # feature key paths of the image, the captions (a text or a sequence of texts) and the id paraphrases are
      # joined by. The defaults read coco_captions (the Karpathy splits). tfds_lowercase: lower-case the captions (as
      # CSV rows are); tfds_split_sentences: cut each caption into sentences after . ! ? (one dense caption per
      # image → a main caption + extra sentences)
      tfds_name="coco_captions/2014:1.1.0",
      tfds_data_dir="",
      tfds_split="train",
      tfds_image_key="image",
      tfds_captions_key="captions/text",
      tfds_id_key="image/id",
      tfds_lowercase=False,
      tfds_split_sentences=False)


# ------------------------------------------------------------------------------------------------ variants
def parse_arg(arg: str, name: str, **defaults) -> ml_collections.ConfigDict:
  """`--config=configs/<name>.py:ARG` → its values: ARG is comma-separated `key=value` or bare `key` (True), each
  key one of `defaults`, whose types the values take (big_vision's convention). An unknown key or a value of the
  wrong kind is a ConfigError naming the file."""
  out = ml_collections.ConfigDict(defaults)
  for part in filter(None, (p.strip() for p in arg.split(","))):
    key, sep, value = part.partition("=")
    if key not in defaults:
      raise ConfigError(f"configs/{name}.py: unknown argument {key!r} (use {', '.join(sorted(defaults))}, comma-"
                        f"separated, e.g. --config=configs/{name}.py:runlocal)")
    kind = type(defaults[key])
    if kind is bool:
      if sep and value not in ("True", "False", "true", "false", "1", "0"):
        raise ConfigError(f"configs/{name}.py: argument {key}={value}: True or False")
      out[key] = not sep or value in ("True", "true", "1")
    else:
      out[key] = kind(value)
  return out


def variant(c: ml_collections.ConfigDict, arg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The shared arguments of a recipe: `model=` (a random model of that architecture), then `runlocal` or `demo`
  (values only), whose random model `family` picks."""
  if arg.get("model"):
    if arg.model not in MODELS:
      raise ConfigError(f"configs/{c.method}.py: model={arg.model}: use one of {', '.join(MODELS)}")
    c.model.random, c.data.image_size = MODELS[arg.model], 224
  family = arg.get("family") or next(iter(TINY))
  if family not in TINY:
    raise ConfigError(f"configs/{c.method}.py: family={family}: use one of {', '.join(TINY)}")
  if arg.get("runlocal") and arg.get("demo"):
    raise ConfigError(f"configs/{c.method}.py: runlocal and demo are two presets: give one")
  if arg.get("runlocal") or arg.get("demo"):
    runlocal(c, model=TINY[family])
  if arg.get("demo"):
    demo(c)
  return c


def runlocal(c: ml_collections.ConfigDict, world_size: int = 64, model: str = "tiny") -> ml_collections.ConfigDict:
  """A tiny random model (`model`) on the synthetic world (written into the workdir), in the format the recipe reads
  (CSV rows, or COCO JSON + paraphrases), evaluated on its held-out benchmarks: a minute on a laptop CPU."""
  c.model.random = model
  # fp32 throughout and the explicit attention: the tests' parity with the PyTorch models and the demo's measured
  # figures are in these numerics (a CPU has no bf16 matrix unit to gain from)
  c.model.compute_dtype = c.model.frozen_dtype = "float32"
  c.model.attention = "explicit"
  c.model.pad_tokens_to = 1  # the width the batch has: the PyTorch references' shapes
  c.model.remat_text = False  # a tiny model on a CPU: the second forward costs time and saves nothing that matters
  c.data.source, c.data.synthetic_format, c.data.synthetic_size = "synthetic", c.data.source, world_size
  c.data.image_size = 32
  c.batch_size = 8
  c.total_steps = 6
  c.log_every = 2
  c.checkpoint.every_steps = 3
  c.optim.lr = 1e-4
  c.optim.start_lr, c.optim.end_lr = 1e-5, 1e-6
  c.optim.warmup_steps = 2
  # our presets (runlocal, demo) keep our own arithmetic, with which docs/demo.md's figures were measured: the exact
  # warmup_frac_cosine and optax.adamw's decay (the recipes' reference_warmup_cosine / fp32_decay_factor mirror torch)
  c.optim.reference_warmup_cosine, c.optim.fp32_decay_factor = False, False
  c.evals.benchmarks = ("sugarcrepe", "sugarcrepe_pp", "coco_retrieval")
  c.evals.source, c.evals.synthetic_size = "synthetic", 32  # held-out scenes of the same world, real formats
  return c


def demo(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The fine-tuning step of the synthetic-world demo (`python -m compclip_jax.demo`, which brings the model it
  starts from and points data.path / evals.data_dir at one shared world), on top of `runlocal`: values only."""
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
          ("peak_flops", (_NONNEG[0], "≥ 0 (0: no MFU)")), ("model.pad_tokens_to", (_POS[0], "≥ 1 (1: no padding)")))

# (key, its values): the shared string switches
CHOICES = (("siglip.contrastive", ("sigmoid", "softmax")), ("siglip.negatives", ("columns", "pair_softmax")))

# what every recipe sets (configs/<name>.py; `base` holds none of them): the precision, the data, the batch and
# steps, the schedule and optimiser, what trains, the benchmarks
RECIPE_KEYS = ("model.compute_dtype", "model.frozen_dtype", "model.attention", "model.remat_text", "data.source",
               "data.splits", "data.clean_text", "batch_size", "num_epochs", "total_steps", "drop_last",
               "optim.schedule", "optim.lr", "optim.start_lr", "optim.end_lr", "optim.warmup_frac",
               "optim.warmup_steps", "optim.reference_warmup_cosine", "optim.b1", "optim.b2", "optim.eps",
               "optim.weight_decay", "optim.grad_clip", "optim.clamp_logit_scale", "optim.fp32_decay_factor",
               "optim.trainable", "optim.frozen", "optim.decay", "optim.no_decay", "evals.benchmarks")


def steps_from_epochs(c: ml_collections.ConfigDict, records: int) -> int:
  """The run's length when total_steps is 0. `drop_last`: num_epochs × ⌊records / batch_size⌋ — each pass's last
  partial batch is left out, as torch's DataLoader(drop_last=True) in the reference that trains so; else
  ⌈num_epochs × records / batch_size⌉, the last batch completed from the next pass. (Either way the batches come from
  one repeated shuffled order, data/pipeline.py: over several epochs a batch may span two passes.)"""
  if c.drop_last:
    return max(1, int(c.num_epochs * (records // c.batch_size)))
  return max(1, math.ceil(c.num_epochs * records / c.batch_size))


def passes(c: ml_collections.ConfigDict) -> int:
  """The passes over the data a run's steps make, as an integer number of epochs (1 when total_steps is given): what
  `optim.reference_warmup_cosine` needs."""
  return 1 if c.total_steps else max(1, math.ceil(c.num_epochs))


def missing(c: ml_collections.ConfigDict) -> list[str]:
  """The `RECIPE_KEYS` config `c` lacks."""
  out = []
  for key in RECIPE_KEYS:
    node = c
    for part in key.split("."):
      if not isinstance(node, ml_collections.ConfigDict) or part not in node:
        out.append(key)
        break
      node = node[part]
  return out


def problems(c: ml_collections.ConfigDict) -> list[str]:
  """Every shared value of `c` that makes no sense (`RANGES`, `CHOICES`), e.g. a learning rate ≤ 0 or a NaN; first,
  the recipe's keys `c` lacks (one line: nothing else can be checked without them)."""
  absent = missing(c)
  if absent:
    return [f"the config has no {', '.join(absent)}: a recipe (configs/<method>.py) sets every one"]
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
