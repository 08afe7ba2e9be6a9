"""The measured tables of docs/tpu.md: each row is one `python -m compclip_jax compile` command whose JSON lies in
docs/tpu_measured/<case>.json; this tool runs the commands and renders the tables from those files, so every number
in the doc comes from a file the compiler wrote (tests/cli/test_tpu_table.py checks the doc against them).

  python tools/tpu_table.py measure [CASE ...]   # compile (one case at a time; minutes each on 2 cores)
  python tools/tpu_table.py render               # the tables, as docs/tpu.md holds them
  python tools/tpu_table.py write                # docs/tpu.md: its tables and its list of cases not measured yet
  python tools/tpu_table.py list                 # the cases and their commands
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = os.path.join(ROOT, "docs", "tpu_measured")

B32 = ("--config.model.random=ViT-B-32-quickgelu",)
L14 = ("--config.model.random=ViT-L-14-quickgelu",)
# a T5 v1.1-large-sized frozen decoder (d_model 1024, 24 layers, d_ff 2816, 16 heads, vocab 32128), random values
T5L = ("--config.read.t5.random=True", "--config.read.t5.random_d_model=1024", "--config.read.t5.random_layers=24",
       "--config.read.t5.random_vocab=32128")

# the speed table's settings, in order: each a name and the flags it adds to the recipe (bf16 mixed precision,
# attention "auto": the fused Pallas kernel on a TPU, the token width padded to 80); the first is fp32 with the
# explicit attention. Each of them runs 77 tokens wide (PAD1), as every case but the recipe grid's did before
# `model.pad_tokens_to` existed; the recipe's own row is the recipe grid's v5e-8 case (render_speed)
FP32 = ("--config.model.compute_dtype=float32",)
XLA = ("--config.model.attention=xla",)
EXPLICIT = ("--config.model.attention=explicit",)
PAD1 = ("--config.model.pad_tokens_to=1",)
SPEED_KNOBS = {
    "clic": {
        "fp32": FP32 + EXPLICIT, "bf16_explicit": EXPLICIT, "bf16_xla": XLA, "bf16": (),
        "bf16_no_remat": ("--config.model.remat_text=False",),
        "bf16_dots_no_batch": ("--config.model.remat_policy=dots_no_batch",)
    },
    "read": {
        "fp32": FP32 + EXPLICIT, "bf16_xla": XLA, "bf16": (), "bf16_no_remat": ("--config.model.remat_text=False",),
        "bf16_shard_optimizer": ("--config.mesh.shard_optimizer=True",)
    },
    "negclip": {"bf16_xla": XLA, "bf16": ()},  # its fp32 step is the grid's negclip_b32_v5e-8
    "clic_read": {"bf16": ()},  # its fp32 step is the grid's clic_read_b32_v5e-8
}

# case → (table, method, model, topology, slices, extra flags); every config as it ships otherwise. The paper table:
# the four methods at their paper batches on the single-host slices and v5e-16, with ViT-B/32 and with
# ViT-L/14 (CLIC's larger model; READ's paper trains B/32 only, so its L/14 rows are what one would need).
SLICES = ("v5e-8", "v4-8", "v5p-8", "v6e-8", "v5e-16")
# the recipe grid adds tpu7x (Ironwood), which the compile command takes as a topology string: 8 chips, 16 devices
RECIPE_SLICES = {**{t: t for t in SLICES}, "tpu7x-8": "tpu7x:2x2x2"}
MODELS = {"b32": ("ViT-B/32", B32), "l14": ("ViT-L/14", L14)}
# The paper grid is compiled at fp32 compute with XLA's attention and the batch's 77 tokens (the recipe grid after it
# compiles the recipes as they ship); its devices are what the slice's VMs list (a v4 or v5p chip: one megacore device)
CASES = {
    **{f"{m}_{size}_{t}": ("paper", m, model, t, 1,
                           flags + (T5L if "read" in m else ()) + FP32 + XLA + PAD1)
       for size, (model, flags) in MODELS.items() for m in ("clic", "clic_read", "read", "negclip") for t in SLICES},
    # the same grid at the recipes' own precision (bf16 mixed precision, the fused attention on a TPU)
    **{f"{m}_{size}_{name}_bf16": ("recipe", m, model, t, 1, flags + (T5L if "read" in m else ()))
       for size, (model, flags) in MODELS.items() for m in ("clic", "clic_read", "read", "negclip")
       for name, t in RECIPE_SLICES.items()},
    # pods: the per-device batch of a v5e-8 at 800 (100), so the global batch grows with the chips; the CLIC step
    # alone (its CLIP step and the encoders hold less: the v5e-8 rows)
    "pod_clic_b32_v5e-16":
        ("pod", "clic", "ViT-B/32", "v5e-16", 1, B32 + XLA + PAD1 + ("--config.batch_size=1600", "--only=clic")),
    "pod_clic_b32_v5e-256":
        ("pod", "clic", "ViT-B/32", "v5e-256", 1, B32 + XLA + PAD1 + ("--config.batch_size=25600", "--only=clic")),
    "pod_clic_b32_2xv5e-256":
        ("pod", "clic", "ViT-B/32", "v5e-256", 2, B32 + XLA + PAD1 + ("--config.batch_size=51200", "--only=clic")),
    # knobs: a grid row that keeps no 10 % margin as it ships, with the switch that buys it (docs/tpu.md)
    # (with scan_layers: the unrolled remat program's compile took more than this host's 24 GB and was killed)
    **{f"knob_read_l14_{t}_remat_vision": ("knob", "read", "ViT-L/14", t, 1, L14 + T5L + FP32 + XLA + PAD1 + (
        "--config.model.remat_vision=True", "--config.model.scan_layers=True", "--only=read"))
       for t in ("v5e-8", "v4-8")},
    # the other switch for it: AdamW's moments split over the devices instead of whole on each
    "knob_read_l14_v5e-8_shard_optimizer": ("knob", "read", "ViT-L/14", "v5e-8", 1, L14 + T5L + FP32 + XLA + PAD1 + (
        "--config.mesh.shard_optimizer=True", "--only=read")),
    # speed: what each knob does to the step's memory traffic, time and MFU at the papers' precision (one step kind,
    # CLIC, NegCLIP and clic_read ViT-B/32 at 800, READ ViT-B/32 + T5-large at 256 on a v5e-8)
    **{f"speed_clic_b32_v5e-8_{name}":
           ("speed", "clic", "ViT-B/32", "v5e-8", 1, B32 + ("--only=clic", *flags) + PAD1)
       for name, flags in SPEED_KNOBS["clic"].items()},
    **{f"speed_read_b32_v5e-8_{name}":
           ("speed", "read", "ViT-B/32", "v5e-8", 1, B32 + T5L + ("--only=read", *flags) + PAD1)
       for name, flags in SPEED_KNOBS["read"].items()},
    **{f"speed_negclip_b32_v5e-8_{name}":
           ("speed", "negclip", "ViT-B/32", "v5e-8", 1, B32 + ("--only=negclip", *flags) + PAD1)
       for name, flags in SPEED_KNOBS["negclip"].items()},
    **{f"speed_clic_read_b32_v5e-8_{name}":
           ("speed", "clic_read", "ViT-B/32", "v5e-8", 1, B32 + T5L + ("--only=clic_read", *flags) + PAD1)
       for name, flags in SPEED_KNOBS["clic_read"].items()},
}


# Cases whose file was compiled before a change to their step's program, with that file's commit: their rows show the
# earlier program and carry a † (re-measuring a case records a new commit, and its mark goes). READ's paraphrase took
# a second pass through the text tower before it joined the captions' pass (methods/read/__init__.py); the HBM and
# the traffic of READ's step are lower since.
EARLIER_PROGRAM = {
    "read_b32_v5e-8": "37cb5b0", "read_b32_v4-8": "790a7a8", "read_b32_v5p-8": "c9e73e8", "read_b32_v6e-8": "c9e73e8",
    "read_b32_v5e-16": "c9e73e8", "read_l14_v5e-8": "a698592", "read_l14_v4-8": "790a7a8",
    "read_l14_v5p-8": "4929a20", "knob_read_l14_v5e-8_remat_vision": "eaf6739",
    "knob_read_l14_v4-8_remat_vision": "65de724", "speed_read_b32_v5e-8_fp32": "6ac54b2",
    "speed_read_b32_v5e-8_bf16_xla": "5503cac", "speed_read_b32_v5e-8_bf16_no_remat": "01dad36"
}


def earlier(case: str, r: dict | None) -> bool:
  """Whether `case`'s file `r` is the one compiled before its step changed (EARLIER_PROGRAM)."""
  return r is not None and EARLIER_PROGRAM.get(case) == r.get("measured", {}).get("commit", "")[:7]


def _mark(case: str, r: dict | None) -> str:
  return " †" if earlier(case, r) else ""


def command(case: str) -> list[str]:
  _, method, _, topology, slices, extra = CASES[case]
  out = f"docs/tpu_measured/{case}.json"  # relative to the checkout (the command runs there)
  return [
      sys.executable, "-m", "compclip_jax", "compile", f"--config=configs/{method}.py", f"--topology={topology}",
      f"--num_slices={slices}", *extra, f"--output={out}"
  ]


def recorded_command(case: str, r: dict) -> str:
  """The command a case's file records: `command(case)`, less the flags that were the compile command's defaults
  when a file that does not record them was written: `model.pad_tokens_to=1` (the width of the batch) where a file
  does not record its `pad_tokens_to`, fp32 compute where it does not record its `compute_dtype`, and
  `model.attention=xla` where a file does not record its `attention` (written before the fused kernel, when the
  recipes' "auto" compiled XLA's attention on a TPU)."""
  argv = command(case)[1:]
  if "pad_tokens_to" not in r:
    argv = [a for a in argv if a not in PAD1]
  if "compute_dtype" not in r:
    argv = [a for a in argv if a not in FP32]
  if "attention" not in r:
    argv = [a for a in argv if a not in XLA]
  return "python " + " ".join(argv)


def annotate(case: str) -> None:
  """Records in the case's JSON the command that wrote it, the commit it ran at and the day."""
  path = os.path.join(MEASURED, f"{case}.json")
  with open(path) as f:
    r = json.load(f)
  git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
  r["measured"] = {
      "command": "python " + " ".join(command(case)[1:]), "commit": git("rev-parse", "--short", "HEAD"),
      "date": time.strftime("%Y-%m-%d"), "host": f"{os.cpu_count()} CPU cores",
      # since 0635fd1 one collective per channel; files without this key counted every HLO line, the pieces of
      # libtpu's async collective fusion included (docs/tpu.md, "Counting collectives")
      "collectives_counted": "per channel"
  }
  with open(path, "w") as f:
    json.dump(r, f, indent=2)


def measure(cases: list[str]) -> None:
  os.makedirs(MEASURED, exist_ok=True)
  for case in cases:
    print(f"== {case}: {' '.join(command(case)[1:])}", flush=True)
    subprocess.run(command(case), cwd=ROOT, check=True)
    annotate(case)


def _gib(x: float) -> str:
  return f"{x / 2 ** 30:.2f}"


def _cell(s: dict) -> str:
  """A program's HBM per device with its margin, or why it did not compile."""
  if "error" in s:
    return "no (out of memory)"
  margin = 100 * (1 - s["hbm_bytes_per_device"] / s["hbm_capacity_bytes_per_device"])
  return f"{_gib(s['hbm_bytes_per_device'])} ({margin:+.0f} %)"


def _gathers(s: dict) -> str:
  c = s.get("collectives", {})
  size = lambda b: f"{b / 1e9:.2f} GB" if b >= 1e7 else f"{b / 1e6:.1f} MB"
  return ", ".join(f"{k} {v['count']} / {size(v['bytes'])}" for k, v in sorted(c.items())) or "none"


def _load(case: str) -> dict | None:
  path = os.path.join(MEASURED, f"{case}.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _measured(table: str):
  """(case, its spec without the table, its JSON) of every measured case of `table`, in CASES order."""
  for case, (kind, *spec) in CASES.items():
    r = _load(case) if kind == table else None
    if r is not None:
      yield case, tuple(spec), r


def render_paper() -> str:
  """One line per (case, training step): HBM/device with margin, TFLOP/device, roofline, compile time; the
  evaluation encoders' largest HBM beside it."""
  lines = [
      "| method, model | slice (devices × HBM) | compute | global batch | step | HBM/device GiB (margin) | "
      "TFLOP/device | roofline ms | compile s | eval encoders: HBM/device GiB |", "|" + "---|" * 10
  ]
  for case, (method, model, topology, _, _), r in _measured("paper"):
    steps = r["steps"]
    evals = [s for k, s in steps.items() if k.startswith("eval_")]
    ev = max((s.get("hbm_bytes_per_device", 0) for s in evals), default=0)
    cap = next(iter(steps.values()))["hbm_capacity_bytes_per_device"]
    for kind, s in steps.items():
      if kind.startswith("eval_"):
        continue
      flops = f"{s['flops_per_device'] / 1e12:.2f}" if "flops_per_device" in s else "—"
      roof = f"{1e3 * s['roofline_s']:.0f}" if "roofline_s" in s else "—"
      lines.append(f"| {method}{_mark(case, r)}, {model} | {topology} ({r['devices']} × {_gib(cap)}) | "
                   f"{DTYPE_NAMES[r.get('compute_dtype', 'float32')]} | {r['global_batch']} | {kind} | "
                   f"{_cell(s)} | {flops} | {roof} | {s['compile_s']:.0f} | {_gib(ev) if evals else '—'} |")
  return "\n".join(lines)


def _fp32_case(case: str) -> str:
  """The paper grid's fp32 case of a recipe case (`<case>_bf16` → `<case>`)."""
  return case[:-len("_bf16")]


def render_recipe() -> str:
  """One line per (recipe case, training step), the config as it ships (bf16 mixed precision, the fused attention):
  HBM/device with margin beside the same step's at fp32 with XLA's attention (the paper grid's row), the bytes the
  compiler says it moves, the model's FLOPs beside the compiler's, the roofline and its MFU, the compile time; the
  evaluation encoders' largest HBM."""
  lines = [
      "| method, model | slice (devices × HBM) | global batch | step | HBM/device GiB (margin) | at fp32: HBM/device "
      "GiB (margin) | GB accessed/device | TFLOP/device: model; compiler | roofline ms | roofline MFU | compile s | "
      "eval encoders: HBM/device GiB |", "|" + "---|" * 12
  ]
  for case, (method, model, topology, _, _), r in _measured("recipe"):
    steps, fp32 = r["steps"], (_load(_fp32_case(case)) or {"steps": {}})["steps"]
    ev = max((s.get("hbm_bytes_per_device", 0) for k, s in steps.items() if k.startswith("eval_")), default=0)
    cap = next(iter(steps.values()))["hbm_capacity_bytes_per_device"]
    for kind, s in steps.items():
      if kind.startswith("eval_"):
        continue
      at32 = _cell(fp32[kind]) if kind in fp32 else "—"
      speed = _traffic(s) if "roofline_s" in s else "— | — | — | —"
      lines.append(f"| {method}{_mark(case, r)}, {model} | {topology} ({r['devices']} × {_gib(cap)}) | "
                   f"{r['global_batch']} | {kind} | {_cell(s)} | {at32} | {speed} | {s['compile_s']:.0f} | "
                   f"{_gib(ev) if ev else '—'} |")
  return "\n".join(lines)


def render_pod() -> str:
  """One line per pod case's CLIC step: HBM/device, collectives per device with their bytes."""
  lines = [
      "| slice | slices | chips (hosts) | global batch | clic step HBM/device GiB (margin) | collectives per device "
      "(count / GB) | TFLOP/device | roofline ms | compile s |", "|---|---|---|---|---|---|---|---|---|"
  ]
  for _, (_, _, topology, slices, _), r in _measured("pod"):
    s = r["steps"]["clic"]
    hosts = 1 if r["chips"] <= 8 else r["chips"] // 4  # v5e: a v5e-8 is one host; a pod's hosts hold 4 chips each
    lines.append(f"| {topology} | {slices} | {r['chips']} ({hosts}) | "
                 f"{r['global_batch']} | {_cell(s)} | {_gathers(s)} | {s['flops_per_device'] / 1e12:.2f} | "
                 f"{1e3 * s['roofline_s']:.0f} | {s['compile_s']:.0f} |")
  return "\n".join(lines)


def render_knobs() -> str:
  """One line per knob case's training steps: the switch beside its grid row's numbers and its own."""
  lines = [
      "| method, model | slice | global batch | step | setting | HBM/device GiB (margin) | temporaries GiB | "
      "TFLOP/device | roofline ms | compile s |", "|---|---|---|---|---|---|---|---|---|---|"
  ]
  for case, (method, model, topology, _, extra), r in _measured("knob"):
    base_case = case[len("knob_"):case.index(topology) + len(topology)]  # the grid case it changes: knob_<case>_…
    base = _load(base_case)
    setting = " ".join(f"`{f[len('--config.'):]}`" for f in extra if f.startswith(("--config.model.", "--config.mesh."))
                       and not f.startswith(("--config.model.random", "--config.model.compute_dtype")))
    scanned = "--config.model.scan_layers=True" in extra  # XLA counts a scanned loop's body once: no FLOPs to show
    for label, res, name in ((("the grid's row", base, base_case), (setting, r, case)) if base else
                             ((setting, r, case),)):
      for kind, s in res["steps"].items():
        if kind.startswith("eval_") or kind not in r["steps"]:
          continue
        temp = _gib(s["temp_bytes"]) if "temp_bytes" in s else "—"
        flops, roof = ("—", "—") if scanned and res is r else \
            (f"{s['flops_per_device'] / 1e12:.2f}", f"{1e3 * s['roofline_s']:.0f}")
        lines.append(f"| {method}{_mark(name, res)}, {model} | {topology} | {res['global_batch']} | {kind} | {label} | "
                     f"{_cell(s)} | {temp} | {flops} | {roof} | {s['compile_s']:.0f} |")
  return "\n".join(lines)


# a file's compute dtype (files without one were compiled at fp32 compute)
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _setting(extra: tuple) -> str:
  """A speed case's flags beyond the recipe, as the table names them (bf16 unless they set another dtype)."""
  flags = [f[2:].replace("config.", "") for f in extra if not f.startswith(("--only", "--config.model.random",
                                                                            "--config.read.t5."))]
  if not any(f.startswith("model.compute_dtype") for f in flags):
    flags.insert(0, "bf16")
  return ", ".join(f"`{f}`" if "=" in f else f for f in flags)


def render_speed() -> str:
  """One line per speed case: the step's HBM, the compiler's bytes accessed and FLOPs beside the model's
  (train/flops.py), the roofline and the MFU it implies (model FLOPs ÷ (roofline × peak))."""
  lines = [
      "| method, model | slice | global batch | step | setting | HBM/device GiB (margin) | GB accessed/device | "
      "TFLOP/device: model; compiler | roofline ms | roofline MFU |", "|---|---|---|---|---|---|---|---|---|---|"
  ]
  for case, (method, model, topology, _, extra), r in _measured("speed"):
    head = lambda name, res: f"| {method}{_mark(name, res)}, {model} | {topology} | {res['global_batch']} | {method} |"
    lines.append(f"{head(case, r)} {_setting(extra)} | {_cell(r['steps'][method])} | {_traffic(r['steps'][method])} |")
    recipe_case = f"{method}_b32_{topology}_bf16"
    recipe = _load(recipe_case) if case.endswith("_bf16") else None
    if recipe is not None:  # after its 77-token row, the recipe as it ships: the recipe grid's case, its own step
      s = recipe["steps"][method]
      lines.append(f"{head(recipe_case, recipe)} the recipe (bf16, 80 tokens wide) | {_cell(s)} | {_traffic(s)} |")
  return "\n".join(lines)


def _traffic(s: dict) -> str:
  """A step's GB accessed | model; compiler TFLOP | roofline ms | roofline MFU cells."""
  return (f"{s['bytes_accessed_per_device'] / 1e9:.1f} | {s['model_flops_per_device'] / 1e12:.2f}; "
          f"{s['flops_per_device'] / 1e12:.2f} | {1e3 * s['roofline_s']:.0f} | {100 * s['mfu']:.0f} %")


# A paper run's optimiser steps (docs/methods.md): CLIC ~1M rows at 800, one epoch (METHODS §1.4; clic_read, ours,
# on CLIC's data); READ 82,783 COCO Karpathy-train images at 256, 324 steps an epoch, five epochs (METHODS §2.2, 2.4)
RUN_STEPS = {"clic": 1250, "clic_read": 1250, "read": 5 * 324}


def render_cost() -> str:
  """What a paper run costs on each measured slice, at the roofline (a lower bound: the compiler's time for its
  FLOPs and bytes, nothing else), from the recipe's case (bf16) where it is measured, else the fp32 one: the step
  time (CLIC and clic_read alternate their two step kinds: the mean of the two), samples/s per chip, and the run's
  minutes and chip-hours."""
  lines = [
      "| method, model | slice | compute | global batch | step ms (roofline) | samples/s/chip | paper run: steps | "
      "minutes | chip-hours |", "|---|---|---|---|---|---|---|---|---|"
  ]
  cells = {case: (case, spec, r) for case, spec, r in _measured("paper")}
  for case, spec, r in _measured("recipe"):
    cells[_fp32_case(case)] = (case, spec, r)  # the recipe as it ships where it is measured
  for case, (method, model, topology, _, _), r in cells.values():
    if method not in RUN_STEPS:
      continue
    steps = [s for k, s in r["steps"].items() if not k.startswith("eval_")]
    if any("roofline_s" not in s for s in steps):
      continue  # a step that does not fit has no time
    t = sum(s["roofline_s"] for s in steps) / len(steps)
    hours = RUN_STEPS[method] * t / 3600
    dtype = DTYPE_NAMES[r.get("compute_dtype", "float32")]
    lines.append(f"| {method}{_mark(case, r)}, {model} | {topology} | {dtype} | {r['global_batch']} | "
                 f"{1e3 * t:.0f} | {r['global_batch'] / t / r['chips']:,.0f} | {RUN_STEPS[method]:,} | "
                 f"{60 * hours:.1f} | {hours * r['chips']:.2f} |")
  return "\n".join(lines)


def render() -> str:
  return (f"<!-- recipe -->\n{render_recipe()}\n\n"
          f"<!-- paper -->\n{render_paper()}\n\n<!-- pod -->\n{render_pod()}\n\n<!-- knobs -->\n{render_knobs()}\n"
          f"\n<!-- speed -->\n{render_speed()}\n\n<!-- cost -->\n{render_cost()}\n")


DOC = os.path.join(ROOT, "docs", "tpu.md")
NOT_MEASURED = re.compile(r"(<!-- not measured -->).*?(<!-- /not measured -->)", re.S)


EARLIER = re.compile(r"(<!-- earlier program -->).*?(<!-- /earlier program -->)", re.S)


def not_measured() -> list[str]:
  return [c for c in CASES if not os.path.exists(os.path.join(MEASURED, f"{c}.json"))]


def earlier_program() -> list[str]:
  return [c for c in CASES if earlier(c, _load(c))]


def write_doc(path: str = DOC) -> None:
  """Replaces docs/tpu.md's tables (each from its header row to the blank line after it) with `render`'s, its list
  between the `not measured` marks with the cases that have no JSON, and the one between the `earlier program` marks
  with the cases whose file shows an earlier program of their step (EARLIER_PROGRAM)."""
  with open(path) as f:
    doc = f.read()
  for header, table in (("| method, model | slice (devices × HBM) | global", render_recipe()),
                        ("| method, model | slice (devices × HBM) | compute", render_paper()),
                        ("| slice | slices |", render_pod()),
                        ("| method, model | slice | global batch | step | setting | HBM/device GiB (margin) | temp",
                         render_knobs()), ("| method, model | slice | global batch | step | setting | HBM/device GiB "
                                           "(margin) | GB", render_speed()),
                        ("| method, model | slice | compute | global batch | step ms", render_cost())):
    i = doc.index(header)
    doc = doc[:i] + table + doc[doc.index("\n\n", i):]
  names = ", ".join(f"`{c}`" for c in not_measured()) or "none"
  doc = NOT_MEASURED.sub(lambda m: m.group(1) + names + m.group(2), doc)
  names = ", ".join(f"`{c}`" for c in earlier_program()) or "none"
  doc = EARLIER.sub(lambda m: m.group(1) + names + m.group(2), doc)
  with open(path, "w") as f:
    f.write(doc)


def main(argv: list[str]) -> int:
  if len(argv) < 2 or argv[1] not in ("measure", "render", "write", "list"):
    print(__doc__, file=sys.stderr)
    return 2
  if argv[1] == "list":
    for case in CASES:
      print(f"{case}: {' '.join(command(case)[1:])}")
  elif argv[1] == "render":
    print(render())
  elif argv[1] == "write":
    write_doc()
  else:
    unknown = [c for c in argv[2:] if c not in CASES]
    if unknown:
      print(f"unknown case(s) {unknown}: python tools/tpu_table.py list", file=sys.stderr)
      return 2
    measure(argv[2:] or list(CASES))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
