"""python -m compclip_jax.demo: the synthetic-world demo's command (what it does: compclip_jax/demo/run.py).

  python -m compclip_jax.demo --method=clic --workdir=runs/demo      # also read, negclip, clip, clic_read
  python -m compclip_jax.demo --workdir=runs/sweep --seeds=0,1,2     # every method and control × 3 seeds
  python -m compclip_jax.demo --diagnose --workdir=runs/diagnose     # what the starting point's embeddings carry
  python -m compclip_jax.demo --family=siglip --method=clic --workdir=runs/demo_siglip   # on a tiny SigLIP

`--config.KEY=VALUE` overrides the fine-tuning config (configs/<method>.py:demo); each `DemoOptions` field is a flag.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys

from absl import flags

from compclip_jax.cli import app as cli
from compclip_jax.cli import host_memory
from compclip_jax.demo import pretrain
from compclip_jax.demo import run as demo
from compclip_jax.demo import diagnose as diagnostics
from compclip_jax.demo import shipped
from compclip_jax.train import state

_WORKDIR = flags.DEFINE_string("workdir", None, "Where the world, runs and reports go.", required=True)
_METHOD = flags.DEFINE_string("method", None, "One demo: clic, read, negclip, clip, clic_read (or clip_all); "
                              "default: a sweep")
_SEED = flags.DEFINE_integer("seed", 0, "With --method: the seed of the world, pretraining and run.")
_NO_CONTROL = flags.DEFINE_bool(
    "no_control", False, "With --method: do not also run the method's control (plain contrastive "
    "fine-tuning of what it trains, same data and steps), drawn beside it in report_<method>.png.")
_METHODS = flags.DEFINE_list(
    "methods", list(demo.SWEEP_METHODS), "Sweep: methods, the controls clip (plain contrastive fine-tuning "
    "of the text side) and clip_all (of all of CLIP), and the ablations (a method's config with values changed: "
    "demo/run.py ABLATIONS).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Sweep: seeds (integers).")
_PRETRAIN = flags.DEFINE_string(
    "pretrain", None, "Instead: pretrain the demo's starting point from scratch in --workdir (seed --seed; the "
    "DemoOptions flags) and write it to this folder in the layout of compclip_jax/assets/demo_pretrained.")
_DIAGNOSE = flags.DEFINE_string(
    "diagnose", None, "Instead: the probes and bag-of-words gap of a CLIP or SigLIP (alone or 'shipped': the "
    "shipped model of --family; or an HF directory, e.g. <workdir>/pretrained/text/export/hf) on seed --seed's "
    "held-out scenes.")
_NEGATIVE_KINDS = flags.DEFINE_bool(
    "negative_kinds", False, "Instead: what CLIC's hard negatives trade on <workdir>/world's first sentences (the "
    "exact distribution, by kind of word), the swap-twin rate and the caption lengths (the gate's rules 1–3, "
    "docs/demo.md).")
_ALLOW = flags.DEFINE_list(
    "allow_config_change", [], "With --method: config keys (or dotted prefixes) whose change from the runs recorded "
    "in --workdir is accepted on resume, as python -m compclip_jax.main takes them, e.g. total_steps,optim.lr.")
_DEFINE = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float, str: flags.DEFINE_string}
_OPTIONS = {
    f.name: _DEFINE[type(f.default)](f.name, f.default, f"DemoOptions.{f.name}")
    for f in dataclasses.fields(pretrain.DemoOptions)
}


def _config(name: str, seed: int, overrides: list[str]):
  c = demo.demo_config(name)
  c.seed = seed
  for o in overrides:
    demo.override(c, o)
  return c


def _negative_kinds(workdir: str) -> None:
  rows = os.path.join(workdir, "world", "clic_rows.csv")
  if not os.path.exists(rows):
    raise cli.UserError(f"{rows} not found: --negative_kinds reads the world a demo wrote; run the demo in "
                        f"{workdir} first")
  gate = diagnostics.world_gate(os.path.dirname(rows))
  print("CLIC's negatives by the kinds of the two words traded (exact distribution over 2,000 random pairs):")
  for kind, p in sorted(gate["clic_negatives"].items(), key=lambda kv: -kv[1]):
    print(f"{kind:>40}: {100 * p:6.2f} %")
  print(f"same kind (two content words of one kind): {100 * gate['same_kind_share']:.2f} % of the negatives made")
  print(f"swap twins in a batch of 32: {100 * gate['swap_twin_rate_batch32']:.2f} % of the images")
  print("words: first sentences {}–{}, further sentences {}–{}; further sentences per row {}–{}".format(
      *gate["first_sentence_words"], *gate["extra_sentence_words"], *gate["extra_sentences"]))


def _diagnose(target: str, checked, workdir: str, seed: int) -> None:
  clip_dir = checked[0] if target == "shipped" else target
  if not os.path.isdir(clip_dir):
    raise cli.UserError(f"--diagnose {clip_dir}: not a directory (an HF CLIP directory, or 'shipped')")
  try:
    from compclip_jax.weights import loading  # pylint: disable=import-outside-toplevel
    loading.read_checkpoint(clip_dir)  # read once more by diagnose (a tiny model): a clear error before any work
  except (ValueError, FileNotFoundError, OSError) as e:
    raise cli.UserError(f"--diagnose {clip_dir}: not a CLIP checkpoint this project reads ({e})") from e
  diagnostics.diagnose(clip_dir, workdir, seed)


def _option_problems(opts: pretrain.DemoOptions) -> list[str]:
  """The DemoOptions values that make no sense: a pretraining batch, step count or learning rate ≤ 0 (or NaN), a
  bag_noise that is no probability, a negative collage_negatives weight, an unknown --family or a --model of the
  other family."""
  out = [
      f"--{f.name}={getattr(opts, f.name)}: must be > 0" for f in dataclasses.fields(opts)
      if f.name.endswith(("_batch", "_steps", "_lr")) and not getattr(opts, f.name) > 0
  ]
  if not 0 <= opts.bag_noise <= 1:
    out.append(f"--bag_noise={opts.bag_noise}: a probability, in [0, 1]")
  if not opts.collage_negatives >= 0:
    out.append(f"--collage_negatives={opts.collage_negatives}: a loss weight, ≥ 0")
  if opts.family not in shipped.FAMILIES:
    out.append(f"--family={opts.family}: use one of {', '.join(shipped.FAMILIES)}")
  elif (pretrain.random_model(opts) in state.SIGLIP_SIZES) != (opts.family == "siglip"):
    out.append(f"--model={opts.model} is not of --family={opts.family}: a SigLIP size ("
               f"{', '.join(state.SIGLIP_SIZES)}) goes with --family=siglip, any other with --family=clip")
  return out


def main(argv: list[str], overrides: list[str]) -> None:
  cli.refuse_arguments(argv)
  opts = pretrain.DemoOptions(**{name: flag.value for name, flag in _OPTIONS.items()})
  if _option_problems(opts):
    raise cli.UserError("; ".join(_option_problems(opts)))
  workdir, seed = _WORKDIR.value, _SEED.value
  if _NEGATIVE_KINDS.value:
    return _negative_kinds(workdir)
  logging.getLogger().setLevel(logging.WARNING)
  host_memory.keep_freed_memory()  # before the first jax computation (docs/performance.md, "Host memory")
  checked = None  # the shipped (CLIP, T5) directories, once their hashes are checked
  if _DIAGNOSE.value == "shipped" or not (_DIAGNOSE.value or _PRETRAIN.value or opts.from_scratch):
    try:  # a changed or missing shipped model: say which file and what to do, exit 2
      checked = shipped.check(shipped.root(opts.family))
    except (ValueError, FileNotFoundError) as e:
      raise cli.UserError(str(e)) from e
  if _DIAGNOSE.value:
    return _diagnose(_DIAGNOSE.value, checked, workdir, seed)
  if _PRETRAIN.value:
    c = _config("clic", seed, overrides)
    pretrain.write_pretrained(c, workdir, _PRETRAIN.value, dataclasses.replace(opts, from_scratch=True))
    return None
  if _METHOD.value:
    c = _config(_METHOD.value, seed, overrides)
    allow = tuple(_ALLOW.value)
    if _NO_CONTROL.value:
      demo.run(c, workdir, _METHOD.value, opts, allow)
    else:
      demo.run_with_control(c, workdir, _METHOD.value, opts, tuple(overrides), allow)
    return None
  if overrides:
    raise cli.UserError("--config.KEY=VALUE applies to one demo (--method), not to a sweep")
  bad = [m for m in _METHODS.value if m not in demo.SWEEP_METHODS]
  if bad:
    raise cli.UserError(f"unknown method(s) {bad}: use {', '.join(demo.SWEEP_METHODS)}")
  try:
    seeds = [int(s) for s in _SEEDS.value]
  except ValueError as e:
    raise cli.UserError(f"--seeds={','.join(_SEEDS.value)}: integers, comma-separated") from e
  demo.sweep(list(_METHODS.value), seeds, workdir, opts)
  return None


def run(argv: list[str] | None = None) -> None:
  """`--config.KEY=VALUE` arguments are taken out before absl parses the flags (they are the config's, not flags);
  `--diagnose` alone means `--diagnose=shipped`."""
  argv = ["--diagnose=shipped" if a == "--diagnose" else a for a in (sys.argv if argv is None else argv)]
  overrides = [a[len("--config."):] for a in argv[1:] if a.startswith("--config.")]
  rest = [a for a in argv if not a.startswith("--config.")]
  cli.run(lambda args: main(args, overrides), argv=rest)


if __name__ == "__main__":
  run()
