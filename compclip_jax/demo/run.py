"""The synthetic-world demo: the whole method on a laptop CPU, on a generated compositional world — an entry point on
top of the library (`train.run` on `configs/<method>.py:demo` values; nothing in training knows the demo exists).

  python -m compclip_jax.demo --method=clic --workdir=runs/demo      # also read, negclip, clip, clic_read
  python -m compclip_jax.demo --workdir=runs/sweep --seeds=0,1,2     # every method and control × 3 seeds
  python -m compclip_jax.demo --diagnose --workdir=runs/diagnose     # what the starting point's embeddings carry

1. the world (training images + captions in the CLIC CSV and COCO formats, every caption's spaCy analysis) and its
   held-out benchmarks (SugarCrepe, SugarCrepe++ and retrieval files built on pairings of colour–shape bindings never
   seen in training), written once into `<workdir>/world` by the first training run (`data.source="synthetic"`,
   `evals.source="synthetic"`) and read by every later one;
2. the starting point in the papers' regime — a tiny CLIP whose frozen vision tower binds colours to shapes and whose
   text tower is a bag of words, and READ's tiny T5 v1.1 decoder — shipped in the package (`demo/shipped.py`; hashes
   checked) or, with `--from_scratch`, pretrained in `<workdir>/pretrained` in three stages (`pretrain`);
3. fine-tuning with the method's control (plain contrastive fine-tuning of what the method trains, `CONTROL_OF`) and
   then the method, from that checkpoint (`configs/<method>.py:demo`), evaluated along the way;
4. a before/after table (console + `<workdir>/report_<method>.md`) and plots (`<workdir>/report_<method>.png`: the
   method against its control over steps, its loss terms).

A sweep (`sweep`) runs several methods and both controls — `clip` trains the text side (as CLIC and NegCLIP do),
`clip_all` all of CLIP (as READ does) — over several seeds (the fine-tuning world, benchmarks and runs; the starting
point is the shipped one) and writes mean ± std and per-seed tables. The demo's own knobs (the starting point) are
`DemoOptions`, one flag each; `--config.KEY=VALUE` overrides the fine-tuning config.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import json
import os

import jax

from compclip_jax import methods
from compclip_jax.cli import config_files
from compclip_jax.demo import plots as demo_plots
from compclip_jax.demo import shipped
from compclip_jax.demo.diagnose import diagnose
from compclip_jax.demo.tables import before_after, paired_table, report_table, summary_table
from compclip_jax.data import synthetic
from compclip_jax.errors import UserError
from compclip_jax.train import config as config_lib
from compclip_jax.train import loop as train


@dataclasses.dataclass(frozen=True)
class DemoOptions:
  """The demo's own settings: what the fine-tuning starts from (the fine-tuning itself is `configs/<m>.py:demo`).

  By default the demo starts from the pretrained models shipped in the package (`SHIPPED`, made by
  `--pretrain=DIR` with these defaults); `from_scratch` trains them in the workdir instead (seeded by the run's seed),
  in three stages (docs/demo.md): collage contrastive (both towers), binding (both towers, NegCLIP's swap negatives),
  then a text tower from scratch against the frozen vision tower on single images and captions of `bag_noise`
  (bag-of-words). The text tower that is fine-tuned never sees a concatenated image or a method's negative (issue 31
  rule 4): the first two stages' text tower is thrown away."""
  from_scratch: bool = False
  model: str = "demo"  # the CLIP pretrained from scratch (model.random: 'demo', 'tiny' or an open_clip name)
  pretrain_batch: int = 64
  pretrain_lr: float = 1e-3
  # stage 1: contrastive on single images *and* two-image collages with their joined captions (CLIC's
  # concatenated inputs would otherwise be unlike anything the frozen vision tower has seen), plus, weighted by
  # collage_negatives, CLIC's S-Neg term: its cross-collage swaps (a colour, shape, relation or scene word traded
  # between the two halves' sentences) are told apart only by a vision tower that binds within each half. Its text
  # tower is thrown away (stage 3), so the text tower that is fine-tuned never sees them (issue 31 rule 4).
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


def as_method(c, name: str):
  """`c` for another method: that method's config (its own sections, at their defaults) with `c`'s shared sections
  (model, data, optim, …) and the sections both have."""
  out = config_lib.base(methods.get(name))
  for k in c.keys():
    if k != "method" and k in out:
      out[k] = copy.deepcopy(c[k])
  return out


def _on_world(c, workdir: str, world: str = "world", binding_noise: float = 0.0):
  """A copy of `c` that trains on `<workdir>/<world>` and evaluates with the held-out benchmarks of
  `<workdir>/world` (each written by whichever run comes first; seeded by `c.seed`)."""
  c = copy.deepcopy(c)
  c.data.source, c.data.path = "synthetic", os.path.join(workdir, world)
  c.data.synthetic_binding_noise = binding_noise
  c.evals.source, c.evals.data_dir, c.evals.image_dir = "synthetic", os.path.join(workdir, "world", "benchmarks"), ""
  return c


def _pretrain_config(c, workdir: str, opts: DemoOptions, steps: int, world: str = "world", noise: float = 0.0):
  """A pretraining stage's config: `c`'s world, batch, lr (warm-up, cosine decay), no benchmarks."""
  p = _on_world(c, workdir, world, noise)
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
  """The CLIP of HF directory `src` with its text side (text tower, text projection, logit scale: configs'
  CLIP_TEXT rules) freshly initialised (seed `seed`), written as an HF directory `out`."""
  import re  # pylint: disable=import-outside-toplevel

  from flax import nnx  # pylint: disable=import-outside-toplevel

  from compclip_jax.weights import loading  # pylint: disable=import-outside-toplevel
  from compclip_jax.models.clip import CLIP  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights import params  # pylint: disable=import-outside-toplevel
  cfg, flat, tok, pre, _ = loading.load_clip_params(src)
  model = CLIP(cfg, rngs=nnx.Rngs(seed))
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
    p.model.random, p.model.init = opts.model, ""
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
  p = as_method(_on_world(c, workdir), "read")
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
    return shipped.check(shipped.SHIPPED)
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
      if f.name != "from_scratch" and getattr(opts, f.name) != f.default
  ]
  try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    commit = ""
  record = {
      "command": " ".join([shipped.REGENERATE, f"--seed={c.seed}", *flags]), "seed": c.seed,
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


def say(text: str) -> None:
  """A line of the demo's own on the console (process 0): what it does next, where its results are."""
  if jax.process_index() == 0:
    print(f"demo: {text}", flush=True)


def _say_world(f, workdir: str) -> None:
  if not os.path.exists(os.path.join(workdir, "world", synthetic.WORLD_MANIFEST)):
    say(f"writing the synthetic world ({f.data.synthetic_size} training scenes, {f.evals.synthetic_size} held-out "
        f"benchmark scenes) into {os.path.join(workdir, 'world')}: once, about half a minute")


def run(c, workdir: str, name: str = "", opts: DemoOptions = DemoOptions(), allow: tuple[str, ...] = ()) -> dict:
  """The demo of `c`'s method (its runs and reports named `name`, default the method) → {label: (before, after)}.
  The report draws the run of its control (`CONTROL_OF`) beside it when `<workdir>/<control>` holds one. `allow`:
  train.run's allow_config_change (a rerun in the same workdir with changed values). `c` is validated first."""
  name = name or c.method
  train.validate(_on_world(c, workdir))  # a mistake is refused before the world, the starting point, a stage line
  clip, t5 = starting_point(c, workdir, opts)
  f = _on_world(c, workdir)
  f.model.random, f.model.init = "", clip
  if methods.get(c.method).extend_model is not None:
    f.read.t5.init, f.read.t5.random = t5, False
  run_dir = os.path.join(workdir, name)
  _say_world(f, workdir)
  say(f"fine-tuning {name} ({f.total_steps} steps of batch {f.batch_size}) in {run_dir}")
  train.run(f, run_dir, allow)
  return report(run_dir, workdir, name)


def run_with_control(c, workdir: str, name: str, opts: DemoOptions = DemoOptions(), overrides: tuple = (),
                     allow: tuple[str, ...] = ()) -> dict:
  """`name`'s control first (its `:demo` config, the same seed and `--config` overrides: the same data and steps),
  then `name` (config `c`) → `name`'s {label: (before, after)}, its report drawn against the control's run. Both
  configs are checked before either runs."""
  control = CONTROL_OF.get(name)
  if control:
    k = demo_config(control)
    k.seed = c.seed
    for o in overrides:  # a key of the method's own section does not apply to its control
      if o.partition("=")[0].split(".")[0] in k:
        override(k, o)
    train.validate(c)  # a mistake in the method's values is refused now, not after the control's run (run() checks k)
    say(f"the control first: {control} (plain contrastive fine-tuning of what {name} trains, same data and steps)")
    run(k, workdir, control, opts, allow)
    say(f"the control's run ended: {os.path.join(workdir, control)}; now {name}")
  return run(c, workdir, name, opts, allow)


def _metrics(run_dir: str) -> list[dict]:
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def report(run_dir: str, workdir: str, method: str) -> dict:
  """Before (step 0) and after (last evaluation) for each report row, beside the control's run where the workdir
  holds one; table (console + report_<method>.md) and plots. Returns {label: (before, after)}."""
  table = before_after(_metrics(run_dir))
  control = CONTROL_OF.get(method, "")
  control_dir = os.path.join(workdir, control)
  control_rows = _metrics(control_dir) if control and os.path.exists(os.path.join(control_dir, "metrics.jsonl")) \
      else None
  text = report_table(method, table, control if control_rows else "", control_rows and before_after(control_rows))
  if jax.process_index() == 0:
    print(text, flush=True)
    md, png = (os.path.join(workdir, f"report_{method}.{ext}") for ext in ("md", "png"))
    with open(md, "w") as f:
      f.write(text + "\n")
    demo_plots.plot_report(_metrics(run_dir), png, method, control_rows, control if control_rows else "")
    say(f"{method}'s run: {run_dir}; its report: {md}, {png}")
  return table


# ---------------------------------------------------------------------------------------------------- seed sweep
# What a sweep can run: the methods, and two controls — plain contrastive fine-tuning on the same data and steps,
# with what CLIC and NegCLIP train (the text side; "clip") and with what READ trains (all of CLIP; "clip_all") — and
# the ablations: a method's config with values changed, nothing else (issue 31 rule 7).
ABLATIONS = {
    "clic_no_sneg": ("clic", ("clic.w_sneg=0.0",)),  # no S-Neg term: CLIC's negatives unused
    "clic_single": ("clic", ("clic.concat=False",)),  # METHODS §1.5: single images, single-sentence swaps
    "clic_no_clip_steps": ("clic", ("clic.clip_every=0",)),  # CLIC steps only
    "read_no_rec": ("read", ("read.w_rec=0.0",)),  # READ without token reconstruction
    "read_no_align": ("read", ("read.w_align=0.0",)),  # READ without paraphrase alignment
}
SWEEP_METHODS = ("clip", "clip_all", "clic", "negclip", "read", "clic_read", *ABLATIONS)


def demo_config(name: str):
  """The `:demo` config of a method (a config name: clic, read, negclip, clip, clic_read), of the control
  "clip_all" (plain contrastive fine-tuning of all of CLIP) or of an ablation (`ABLATIONS`)."""
  if name == "clip_all":
    c = config_files.load("clip").get_config("demo")
    c.optim.trainable, c.optim.frozen = config_lib.CLIP_TEXT + config_lib.CLIP_VISION, ()
    return c
  if name in ABLATIONS:
    method, overrides = ABLATIONS[name]
    c = demo_config(method)
    for o in overrides:
      override(c, o)
    return c
  if name not in config_files.names():
    raise UserError(f"no config named {name!r} (known: {', '.join(config_files.names())}, clip_all)")
  return config_files.load(name).get_config("demo")


sweep_config = demo_config  # the older name


def sweep(names: list[str], seeds: list[int], workdir: str, opts: DemoOptions = DemoOptions()) -> dict:
  """Every method's demo for every seed (the fine-tuning world, its benchmarks and the runs are seeded; the starting
  point is the shipped one, or with `opts.from_scratch` pretrained per seed) under `<workdir>/seed<k>`, controls
  first; then mean ± std tables (absolute; paired change from the pretrained model and beyond each
  method's control) and a plot over seeds (`<workdir>/summary.{md,png}`). A finished run is not retrained:
  rerunning with another method added trains only that one.
  Returns {column: {label: [value per seed]}}; column "pretrained" is the model all methods start from."""
  cols: dict[str, dict[str, list]] = {}
  names = sorted(names, key=lambda m: m not in CONTROL_OF.values())  # controls first: the reports draw them
  for seed in seeds:
    for k, m in enumerate(names):
      c = demo_config(m)
      c.seed = seed
      table = run(c, os.path.join(workdir, f"seed{seed}"), m, opts)
      for label, (before, after) in table.items():
        if k == 0:
          cols.setdefault("pretrained", {}).setdefault(label, []).append(before)
        cols.setdefault(m, {}).setdefault(label, []).append(after)
  if jax.process_index() == 0:
    text = summary_table(cols, seeds) + "\n\n" + paired_table(cols)
    controlled = [(m, CONTROL_OF[m]) for m in cols if CONTROL_OF.get(m) in cols]
    if controlled:
      text += "\n\n" + paired_table(cols, controlled, "change beyond its control")
    print(text, flush=True)
    with open(os.path.join(workdir, "summary.md"), "w") as f:
      f.write(text + "\n")
    demo_plots.plot_summary(cols, os.path.join(workdir, "summary.png"))
  return cols


# each method's control: plain contrastive fine-tuning of what the method trains (an ablation: its method's)
CONTROL_OF = {
    "clic": "clip", "negclip": "clip", "read": "clip_all", "clic_read": "clip",
    **{name: {"clic": "clip", "read": "clip_all"}[method] for name, (method, _) in ABLATIONS.items()}
}


def override(c, assignment: str) -> None:
  """Applies `KEY=VALUE` (dotted KEY, VALUE a Python literal or else a string) to the config `c`."""
  key, sep, text = assignment.partition("=")
  if not sep:
    raise UserError(f"--config.{assignment}: expected --config.KEY=VALUE")
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  problem = config_lib.key_problem(c, key)
  if problem:
    raise UserError(f"--config.{key}: {problem}")
  *path, leaf = key.split(".")
  node = c
  for part in path:
    node = node[part]
  try:
    node[leaf] = value
  except TypeError as e:  # ml_collections keeps each key's type: a string for a number, a number for a string
    raise UserError(f"--config.{assignment}: {key} takes a {type(node[leaf]).__name__} ({e})") from None
