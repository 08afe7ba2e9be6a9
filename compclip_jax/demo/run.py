"""The synthetic-world demo: the whole method on a laptop CPU, on a generated compositional world — an entry point on
top of the library (`train.run` on `configs/<method>.py:demo` values; nothing in training knows the demo exists).

  python -m compclip_jax.demo --method=clic --workdir=runs/demo      # also read, negclip, clip, clic_read
  python -m compclip_jax.demo --workdir=runs/sweep --seeds=0,1,2     # every method and control × 3 seeds
  python -m compclip_jax.demo --diagnose --workdir=runs/diagnose     # what the starting point's embeddings carry
  python -m compclip_jax.demo --family=siglip --method=clic --workdir=runs/demo_siglip   # on a tiny SigLIP

1. the world (training images + captions in the CLIC CSV and COCO formats, every caption's spaCy analysis) and its
   held-out benchmarks (SugarCrepe, SugarCrepe++ and retrieval files built on pairings of colour–shape bindings never
   seen in training), written once into `<workdir>/world` by the first training run (`data.source="synthetic"`,
   `evals.source="synthetic"`) and read by every later one;
2. the starting point in the papers' regime — a tiny CLIP (or, `--family=siglip`, SigLIP) whose frozen vision tower
   binds colours to shapes and whose text tower is a bag of words, and READ's tiny T5 v1.1 decoder — shipped in the
   package (`demo/shipped.py`; hashes checked) or, with `--from_scratch`, pretrained in `<workdir>/pretrained` in three
   stages (`demo/pretrain.py`);
3. fine-tuning with the method's control (plain contrastive fine-tuning of what the method trains, `CONTROL_OF`) and
   then the method, from that checkpoint (`configs/<method>.py:demo`), evaluated along the way;
4. a before/after table (console + `<workdir>/report_<method>.md`) and plots (`<workdir>/report_<method>.png`: the
   method against its control over steps, its loss terms).

A sweep (`sweep`) runs several methods and both controls — `clip` trains the text side (as CLIC and NegCLIP do),
`clip_all` all of CLIP (as READ does) — over several seeds (the fine-tuning world, benchmarks and runs; the starting
point is the shipped one) and writes mean ± std and per-seed tables. The demo's own knobs (the starting point) are
`DemoOptions` (demo/pretrain.py), one flag each; `--config.KEY=VALUE` overrides the fine-tuning config.
"""
from __future__ import annotations

import ast
import json
import os

import jax

from compclip_jax import methods
from compclip_jax import recipes
from compclip_jax.demo import plots as demo_plots
from compclip_jax.demo.pretrain import DemoOptions, on_world, starting_point
from compclip_jax.demo import diagnose as diagnostics
from compclip_jax.demo.tables import (COLLAGE_SWAP, before_after, hypothesis_table, paired_table, report_table,
                                      summary_table)
from compclip_jax.data.synthetic import scenes as synthetic
from compclip_jax.errors import UserError
from compclip_jax.train import config as config_lib
from compclip_jax.train import loop as train


def say(text: str) -> None:
  """A line of the demo's own on the console (process 0): what it does next, where its results are."""
  if jax.process_index() == 0:
    print(f"demo: {text}", flush=True)


def _say_world(f, workdir: str) -> None:
  if not os.path.exists(os.path.join(workdir, "world", synthetic.WORLD_MANIFEST)):
    say(f"writing the synthetic world ({f.data.synthetic_size} training scenes, {f.evals.synthetic_size} held-out "
        f"benchmark scenes) into {os.path.join(workdir, 'world')}: once (minutes on a laptop CPU; later runs reuse it)")


def run(c, workdir: str, name: str = "", opts: DemoOptions = DemoOptions(), allow: tuple[str, ...] = ()) -> dict:
  """The demo of `c`'s method (its runs and reports named `name`, default the method) → {label: (before, after)}.
  The report draws the run of its control (`CONTROL_OF`) beside it when `<workdir>/<control>` holds one. `allow`:
  train.run's allow_config_change (a rerun in the same workdir with changed values). `c` is validated first."""
  name = name or c.method
  f = on_world(c, workdir)
  train.validate(f)  # a mistake is refused before the world, the starting point, a stage line
  _say_world(f, workdir)  # before the starting point: from scratch, its pretraining writes the world
  clip, t5 = starting_point(c, workdir, opts)
  f.model.random, f.model.init = "", clip
  if methods.get(c.method).extend_model is not None:
    f.read.t5.init, f.read.t5.random = t5, False
  run_dir = os.path.join(workdir, name)
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
    export = os.path.join(run_dir, "export", "hf")
    exported = f"; the fine-tuned model (an HF directory transformers loads): {export}" if os.path.isdir(export) else ""
    say(f"{method}'s run: {run_dir}; its report: {md}, {png}{exported}")
  return table


# ---------------------------------------------------------------------------------------------------- seed sweep
# What a sweep can run: the methods, and two controls — plain contrastive fine-tuning on the same data and steps,
# with what CLIC and NegCLIP train (the text side; "clip") and with what READ trains (all of CLIP; "clip_all") — and
# the ablations: a method's config with values changed, nothing else.
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
    c = recipes.load("clip").get_config("demo")
    c.optim.trainable, c.optim.frozen = config_lib.CLIP_TEXT + config_lib.CLIP_VISION, ()
    return c
  if name in ABLATIONS:
    method, overrides = ABLATIONS[name]
    c = demo_config(method)
    for o in overrides:
      override(c, o)
    return c
  if name not in recipes.names():
    raise UserError(f"no config named {name!r} (known: {', '.join(recipes.names())}, clip_all)")
  return recipes.load(name).get_config("demo")


sweep_config = demo_config  # the older name


def sweep(names: list[str], seeds: list[int], workdir: str, opts: DemoOptions = DemoOptions()) -> dict:
  """Every method's demo for every seed (the fine-tuning world, its benchmarks and the runs are seeded; the starting
  point is the shipped one, or with `opts.from_scratch` pretrained per seed) under `<workdir>/seed<k>`, controls
  first; then mean ± std tables (absolute; paired change from the pretrained model and beyond each
  method's control) and a plot over seeds (`<workdir>/summary.{md,png}`; the values in `summary.json`). Beside the
  report's rows, each model's cross-collage swap test (`COLLAGE_SWAP`: CLIC's own task, a diagnostic). A finished
  run is not retrained: rerunning with another method added trains only that one.
  Returns {column: {label: [value per seed]}}; column "pretrained" is the model all methods start from."""
  cols: dict[str, dict[str, list]] = {}
  names = sorted(names, key=lambda m: m not in CONTROL_OF.values())  # controls first: the reports draw them
  for seed in seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    for k, m in enumerate(names):
      c = demo_config(m)
      c.seed = seed
      table = run(c, seed_dir, m, opts)
      table[COLLAGE_SWAP] = (None, diagnostics.collage_swap(os.path.join(seed_dir, m, "export", "hf"), seed_dir, seed))
      if k == 0:
        clip_dir = starting_point(c, seed_dir, opts)[0]
        table[COLLAGE_SWAP] = (diagnostics.collage_swap(clip_dir, seed_dir, seed), table[COLLAGE_SWAP][1])
      for label, (before, after) in table.items():
        if k == 0:
          cols.setdefault("pretrained", {}).setdefault(label, []).append(before)
        cols.setdefault(m, {}).setdefault(label, []).append(after)
  if jax.process_index() == 0:
    text = summary_table(cols, seeds) + "\n\n" + paired_table(cols)
    controlled = controlled_pairs(cols)
    if controlled:
      text += "\n\n" + paired_table(cols, controlled, "change beyond its control")
      text += "\n\n" + hypothesis_table(cols, controlled)
    print(text, flush=True)
    with open(os.path.join(workdir, "summary.md"), "w") as f:
      f.write(text + "\n")
    with open(os.path.join(workdir, "summary.json"), "w") as f:
      json.dump({"seeds": seeds, "family": opts.family, "cols": cols}, f, indent=1)
    demo_plots.plot_summary(cols, os.path.join(workdir, "summary.png"))
  return cols


def controlled_pairs(cols: dict) -> list[tuple[str, str]]:
  """(method, its control) for each column of a sweep's `cols` whose control is a column too."""
  return [(m, CONTROL_OF[m]) for m in cols if CONTROL_OF.get(m) in cols]


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
