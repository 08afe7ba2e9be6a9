"""The demo's starting point (docs/demo.md, "The starting point"): a tiny CLIP or SigLIP pretrained from scratch on the
synthetic world in the papers' regime — a frozen vision tower that binds colours to shapes, a bag-of-words text tower —
and READ's tiny T5 v1.1 decoder trained on it; or the shipped one (demo/shipped.py). Each stage is a `train.run` on a
config built here from the demo's fine-tuning config; nothing in training knows the demo exists."""
from __future__ import annotations

import copy
import dataclasses
import json
import os

from compclip_jax import methods, recipes
from compclip_jax.demo import shipped
from compclip_jax.demo.diagnose import diagnose
from compclip_jax.data.synthetic import scenes as synthetic
from compclip_jax.train import config as config_lib
from compclip_jax.train import loop as train


@dataclasses.dataclass(frozen=True)
class DemoOptions:
  """The demo's own settings: what the fine-tuning starts from (the fine-tuning itself is `configs/<m>.py:demo`).

  By default the demo starts from the pretrained models shipped in the package for the tower family `family`
  (`shipped.root`: "clip", or "siglip" — a tiny SigLIP made the same way; made by `--pretrain=DIR` with
  these defaults); `from_scratch` trains them in the workdir instead (seeded by the run's seed),
  in three stages (docs/demo.md): collage contrastive (both towers), binding (both towers, NegCLIP's swap negatives),
  then a text tower from scratch against the frozen vision tower on single images and captions of `bag_noise`
  (bag-of-words). The text tower that is fine-tuned never sees a concatenated image or a method's negative (the
  gate, docs/demo.md): the first two stages' text tower is thrown away."""
  from_scratch: bool = False
  family: str = "clip"  # the towers: "clip" or "siglip" (the same stages; each loss in its family's form)
  # the model pretrained from scratch (model.random): "demo" is the family's demo size (CLIP "demo", SigLIP
  # "siglip_demo"); or 'tiny', 'siglip_tiny', an open_clip name
  model: str = "demo"
  pretrain_batch: int = 64
  pretrain_lr: float = 1e-3
  # stage 1: contrastive on single images *and* two-image collages with their joined captions (CLIC's
  # concatenated inputs would otherwise be unlike anything the frozen vision tower has seen), plus, weighted by
  # collage_negatives, CLIC's S-Neg term: its cross-collage swaps (a colour, shape, relation or scene word traded
  # between the two halves' sentences) are told apart only by a vision tower that binds within each half. Its text
  # tower is thrown away (stage 3), so the text tower that is fine-tuned never sees them (the gate, docs/demo.md).
  collage_steps: int = 1000
  collage_negatives: float = 0.0
  # stage 2: both towers with NegCLIP's swap negatives: the image embedding must tell a red square and a blue circle
  # from a blue square and a red circle (the binding-aware vision tower of a converged CLIP)
  binding_steps: int = 2500
  # stage 3: a new text tower, vision frozen, plain contrastive on single images (the first sentence, and the further
  # sentences as extra positives, alternating with CLIP steps) whose captions exchange the two objects' colours with
  # probability bag_noise: it learns which colours and shapes an image holds, not which goes with which
  text_steps: int = 1500
  bag_noise: float = 0.5
  decoder_steps: int = 300  # READ's decoder: reconstruction-only training on the frozen pretrained CLIP
  decoder_lr: float = 1e-3


def random_model(opts: DemoOptions) -> str:
  """The model.random the pretraining starts from: `opts.model`, "demo" read as the family's demo size."""
  return {"clip": "demo", "siglip": "siglip_demo"}[opts.family] if opts.model == "demo" else opts.model


def as_method(c, name: str):
  """`c` for another method: that method's recipe (configs/<name>.py: its own sections' values) with `c`'s shared
  sections (model, data, optim, …) and the sections both have."""
  out = recipes.load(name).get_config()
  for k in c.keys():
    if k != "method" and k in out:
      out[k] = copy.deepcopy(c[k])
  return out


def on_world(c, workdir: str, world: str = "world", binding_noise: float = 0.0):
  """A copy of `c` that trains on `<workdir>/<world>` and evaluates with the held-out benchmarks of
  `<workdir>/world` (each written by whichever run comes first; seeded by `c.seed`)."""
  c = copy.deepcopy(c)
  c.data.source, c.data.path = "synthetic", os.path.join(workdir, world)
  c.data.synthetic_binding_noise = binding_noise
  c.evals.source, c.evals.data_dir, c.evals.image_dir = "synthetic", os.path.join(workdir, "world", "benchmarks"), ""
  return c


def _pretrain_config(c, workdir: str, opts: DemoOptions, steps: int, world: str = "world", noise: float = 0.0):
  """A pretraining stage's config: `c`'s world, batch, lr (warm-up, cosine decay), no benchmarks."""
  p = on_world(c, workdir, world, noise)
  p.batch_size, p.total_steps = opts.pretrain_batch, steps
  p.optim.schedule, p.optim.lr, p.optim.warmup_steps = "warmup_steps_cosine", opts.pretrain_lr, max(1, steps // 20)
  p.optim.trainable, p.optim.frozen = (r".*",), ()  # both towers (stage 3 narrows it)
  p.optim.decay, p.optim.no_decay = config_lib.DECAY_2D, config_lib.NO_DECAY_2D
  p.evals.benchmarks = ()
  p.checkpoint.every_steps = max(1, steps // 4)
  return p


def _collage_contrastive(p, collages: bool = True, negatives: float = 0.0):
  """CLIC's data with its contrastive term (and its S-Neg term weighted by `negatives`; no paraphrase term),
  alternating with CLIP steps on single images: contrastive learning on singles and collages (or, without
  `collages`, on singles only: the first sentence and the further sentences as positives of one image)."""
  p = as_method(p, "clic")
  p.data.synthetic_format, p.clic.clip_every, p.clic.concat = "csv", 1, collages
  p.clic.w_cont, p.clic.w_sneg, p.clic.w_uni = 1.0, negatives, 0.0
  return p


def _export(run_dir: str) -> str:
  return os.path.join(run_dir, "export", "hf")


def _done(run_dir: str) -> bool:
  return os.path.exists(os.path.join(_export(run_dir), "model.safetensors"))


def new_text_tower(src: str, out: str, seed: int) -> str:
  """The CLIP (or SigLIP) of HF directory `src` with its text side (text tower, text projection, logit scale and a
  SigLIP's bias: configs' CLIP_TEXT rules) freshly initialised (seed `seed`), written as an HF directory `out`."""
  import re  # pylint: disable=import-outside-toplevel

  from flax import nnx  # pylint: disable=import-outside-toplevel

  from compclip_jax.weights import loading  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights import params  # pylint: disable=import-outside-toplevel
  cfg, flat, tok, pre, _ = loading.load_clip_params(src)
  model = loading.model_class(cfg)(cfg, rngs=nnx.Rngs(seed))
  text = re.compile("|".join(f"(?:{r})" for r in config_lib.CLIP_TEXT))
  fresh = params.flat_params(model)
  merged = {k: (fresh[k] if text.fullmatch(k) else v) for k, v in flat.items()}
  loading.save_clip(params.fill_in_place(model, merged), out, "hf", tokenizer=tok, preprocess=pre)
  return out


def pretrain(c, workdir: str, opts: DemoOptions = DemoOptions()) -> str:
  """The tiny CLIP the fine-tuning starts from, trained from scratch in `<workdir>/pretrained/<stage>` (each stage
  cached: a rerun resumes or reuses it). Returns its HF export directory (stage 3's)."""
  root = os.path.join(workdir, "pretrained")
  stages = {k: os.path.join(root, k) for k in ("collages", "binding", "text")}
  if not _done(stages["collages"]):
    p = _collage_contrastive(_pretrain_config(c, workdir, opts, opts.collage_steps), negatives=opts.collage_negatives)
    p.model.random, p.model.init = random_model(opts), ""
    train.run(p, stages["collages"])
  if not _done(stages["binding"]):
    p = as_method(_pretrain_config(c, workdir, opts, opts.binding_steps), "negclip")
    p.data.synthetic_format = "coco"
    p.model.random, p.model.init = "", _export(stages["collages"])
    train.run(p, stages["binding"])
  if not _done(stages["text"]):
    p = _collage_contrastive(_pretrain_config(c, workdir, opts, opts.text_steps, "world_bag", opts.bag_noise),
                             collages=False)
    p.optim.trainable, p.optim.frozen = config_lib.CLIP_TEXT, config_lib.CLIP_VISION
    p.model.random = ""
    p.model.init = new_text_tower(_export(stages["binding"]), os.path.join(root, "text_init"), c.seed + 1)
    train.run(p, stages["text"])
  return _export(stages["text"])


def pretrain_decoder(c, workdir: str, clip_init: str, opts: DemoOptions = DemoOptions()) -> str:
  """READ's decoder: a random tiny T5 v1.1 decoder (`read.t5.random`, the bundled SentencePiece model) trained with the
  reconstruction loss alone on the frozen pretrained CLIP; cached. Returns its HF T5 directory."""
  out = os.path.join(workdir, "pretrained_t5")
  export = os.path.join(out, "export", "t5")
  if os.path.exists(os.path.join(export, "model.safetensors")):
    return export
  p = as_method(on_world(c, workdir), "read")
  p.data.synthetic_format = "coco"
  p.model.random, p.model.init, p.read.t5.init, p.read.t5.random = "", clip_init, "", True
  p.optim.trainable, p.optim.frozen = (r"decoder\..*", r"proj\.kernel"), (r"clip\..*",)
  p.optim.no_decay = tuple(p.optim.no_decay) + (r"decoder\..*layer_norm\.weight",)  # T5's RMSNorm scales
  p.read.w_con, p.read.w_rec, p.read.w_align = 0.0, 1.0, 0.0
  p.total_steps, p.optim.lr, p.optim.warmup_steps = opts.decoder_steps, opts.decoder_lr, 20
  p.export.hf, p.read.export_decoder = False, True
  p.evals.benchmarks = ()
  train.run(p, out)
  return export


def starting_point(c, workdir: str, opts: DemoOptions = DemoOptions()) -> tuple[str, str]:
  """(CLIP HF directory, READ decoder's HF T5 directory) the fine-tuning starts from: the shipped ones (hashes
  checked), or with `opts.from_scratch` those pretrained in the workdir (the decoder only for a method with one)."""
  if not opts.from_scratch:
    return shipped.check(shipped.root(opts.family))
  clip = pretrain(c, workdir, opts)
  return clip, (pretrain_decoder(c, workdir, clip, opts) if methods.get(c.method).extend_model else "")


def write_pretrained(c, workdir: str, out: str, opts: DemoOptions) -> dict:
  """Pretrains the CLIP and READ's decoder from scratch in `workdir` (seed `c.seed`, `opts`) and writes them to
  `out` in the shipped layout (demo_shipped.write) with a record of how and of its diagnostics (`diagnose`).
  Returns the manifest."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  t0 = time.time()
  c = as_method(c, "read")  # the decoder too
  clip = pretrain(c, workdir, opts)
  t5 = pretrain_decoder(c, workdir, clip, opts)
  flags = [
      f"--{f.name}={getattr(opts, f.name)}" for f in dataclasses.fields(opts)
      if f.name not in ("from_scratch", "family") and getattr(opts, f.name) != f.default
  ]
  try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    commit = ""
  record = {
      "command": " ".join([shipped.regenerate(opts.family), f"--seed={c.seed}", *flags]), "seed": c.seed,
      "options": dataclasses.asdict(opts), "world": synthetic.world_record(c.data.synthetic_size, c.seed),
      "git_commit": commit, "pretraining_seconds": round(time.time() - t0, 1)
  }
  shipped.write(out, clip, t5, record)
  # what the shipped (fp16) copy carries, for the regeneration test to compare against
  diagnosis = diagnose(os.path.join(out, "clip"), workdir, c.seed)
  record["diagnostics"] = {k: diagnosis[k] for k in ("probes", "sugarcrepe")}
  manifest = shipped.write(out, clip, t5, record)
  print(json.dumps(manifest, indent=2), flush=True)
  return manifest
