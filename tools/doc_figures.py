"""The measured figures of the README and the docs/ pages: each measurement lies in a file, and this tool writes its
figures into the pages, so no measured number on a page is typed by hand (tests/test_doc_figures.py fails when a
page differs from what this tool writes, or when a file it reads is missing).

  python tools/doc_figures.py check    # exit 1 and the differences when a page is not what `write` makes of it
  python tools/doc_figures.py write    # the pages' figures and tables from the measurement files
  python tools/doc_figures.py list     # every measurement file and the pages that read it

A measurement file is docs/measured/<name>.json: what was measured (`what`), the command that measured it
(`command`), the machine (`machine`), the day (`date`), the versions (`versions`), where its figures come from
(`source`) and the figures (`figures`). The pages also read the compile command's own files (docs/tpu_measured/,
written by tools/tpu_table.py) and the demo's records (docs/demo_measured/, written by tools/demo_results.py).

Two kinds of generated text on a page:

  <!-- fig EXPR -->TEXT<!-- /fig -->              a figure in running text: TEXT is EXPR's value
  <!-- fig EXPR:SPEC -->TEXT<!-- /fig -->         … formatted with SPEC
  <!-- doc_figures:NAME -->                       a block (a table, mostly) that a function of this tool renders
  …
  <!-- /doc_figures:NAME -->

EXPR is a small expression over the files. A bare name is docs/measured/<name>.json's `figures`
(`bench_train_clic.clic_step_keep_s`, `pipeline_clic.text_side_cached`); `record("name")` is that whole file,
`tpu("case")` a docs/tpu_measured file, `demo("name")` a docs/demo_measured file; `.key` and `[i]` index them;
+ − × ÷ and `round`, `min`, `max`, `abs`, `sum`, `len`, `mean`, `span` ([min, max]), `gib` / `gb` / `mb` (bytes →
GiB / GB / MB), `margin` (a compiled step → its HBM margin in %) and `part` (1/6 → "a sixth") compute with them.
For docs/tpu_measured: `step(case[, kind])` (a compiled training step, default the method's own), `hbm(case[, kind])`
(its HBM per device, GiB), `parts(case[, kind])` (its arguments, outputs, aliases, temporaries and code, GiB), and
over the cases whose names match glob patterns `hbms(*patterns)` (each case's own step's HBM) and
`margins(*patterns)` (every training step's margin).

SPEC is a Python format spec (`.2f`, `,`, `+.1f`) or `minsec` ("24 min 54 s"), `min` ("17 min"), `sci1` ("3.7e-6"),
`hbm` ([arguments, outputs, aliases, temporaries, code] GiB → "0.89 + 0.71 − 0.71 + 1.98 + 0.22"). A list is
formatted item by item and joined with "–" (a range), or with " / " when SPEC starts with "/".

A figure may not start a line (Markdown would read its comment as an HTML block and end the paragraph there).
"""
from __future__ import annotations

import ast
import difflib
import fnmatch
import glob
import json
import os
import re
import statistics
import sys
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = os.path.join(ROOT, "docs", "measured")
TPU_MEASURED = os.path.join(ROOT, "docs", "tpu_measured")
DEMO_MEASURED = os.path.join(ROOT, "docs", "demo_measured")
PAGES = ("README.md", "docs/*.md")  # the pages this tool writes (relative to ROOT)
REQUIRED = ("what", "command", "machine", "date", "versions", "source", "figures")

FIG = re.compile(r"<!-- fig (.+?) -->(.*?)<!-- /fig -->", re.S)


class MissingMeasurement(Exception):
  """A page reads a measurement file that does not exist."""


# ------------------------------------------------------------------------------------------------ the files


def _read(path: str) -> dict:
  if not os.path.exists(path):
    raise MissingMeasurement(os.path.relpath(path, ROOT))
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def record(name: str) -> dict:
  """docs/measured/<name>.json, whole."""
  return _read(os.path.join(MEASURED, f"{name}.json"))


def figures(name: str) -> dict:
  return record(name)["figures"]


def tpu(case: str) -> dict:
  """docs/tpu_measured/<case>.json, the compile command's own output."""
  return _read(os.path.join(TPU_MEASURED, f"{case}.json"))


def demo(name: str) -> dict:
  """docs/demo_measured/<name>.json, a demo record."""
  return _read(os.path.join(DEMO_MEASURED, f"{name}.json"))


def measurement_names() -> list[str]:
  return sorted(os.path.basename(p)[:-len(".json")] for p in glob.glob(os.path.join(MEASURED, "*.json")))


# ------------------------------------------------------------------------------------------------ formatting

_PARTS = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth", 6: "a sixth", 7: "a seventh", 8: "an eighth"}


def gib(b: float) -> float:
  return b / 2 ** 30


def gb(b: float) -> float:
  return b / 1e9


def mb(b: float) -> float:
  return b / 1e6


def margin(step: dict) -> float:
  """A compiled program's HBM left free on its device, in %."""
  return 100 * (1 - step["hbm_bytes_per_device"] / step["hbm_capacity_bytes_per_device"])


def step(case: str, kind: str | None = None) -> dict:
  """A compiled training step of a docs/tpu_measured case (default: its first, the method's own step)."""
  steps = tpu(case)["steps"]
  return steps[kind] if kind else next(iter(steps.values()))


def hbm(case: str, kind: str | None = None) -> float:
  """A step's HBM per device, GiB."""
  return gib(step(case, kind)["hbm_bytes_per_device"])


def parts(case: str, kind: str | None = None) -> list[float]:
  """A step's [arguments, outputs, aliases, temporaries, code] per device, GiB."""
  s = step(case, kind)
  return [gib(s[k]) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "code_bytes")]


def cases(*patterns: str) -> list[str]:
  """The docs/tpu_measured cases whose names match any of the glob patterns."""
  names = sorted(os.path.basename(p)[:-len(".json")] for p in glob.glob(os.path.join(TPU_MEASURED, "*.json")))
  return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def hbms(*patterns: str) -> list[float]:
  """The HBM per device (GiB) of the method's own step (the first) of each matching case."""
  return [hbm(c) for c in cases(*patterns)]


def margins(*patterns: str) -> list[float]:
  """The HBM margins (%) of every training step of the matching cases."""
  return [margin(s) for c in cases(*patterns) for k, s in tpu(c)["steps"].items() if not k.startswith("eval_")]


def span(xs) -> list:
  return [min(xs), max(xs)]


def part(x: float) -> str:
  """A share as words: 1/6 → "a sixth"."""
  return _PARTS[round(1 / x)]


def mean(xs) -> float:
  return statistics.mean(xs)


def minsec(seconds: float) -> str:
  return f"{int(seconds // 60)} min {int(round(seconds) % 60)} s"


def fmt(value, spec: str = "") -> str:
  """`value` as a page shows it (see the module's docstring for SPEC)."""
  if spec == "hbm":  # [arguments, outputs, aliases, temporaries, code] GiB → "a + o − al + t + c"
    a, o, al, tmp, code = value
    return f"{a:.2f} + {o:.2f} − {al:.2f} + {tmp:.2f} + {code:.2f}"
  if isinstance(value, (list, tuple)):
    joiner = " / " if spec.startswith("/") else "–"
    return joiner.join(fmt(v, spec.lstrip("/")) for v in value)
  if spec == "minsec":
    return minsec(value)
  if spec == "min":
    return f"{round(value / 60)} min"
  if spec.startswith("sci"):
    mantissa, exponent = f"{value:.{int(spec[3:] or 1)}e}".split("e")
    return f"{mantissa}e{int(exponent)}"
  return format(value, spec) if spec else str(value)


# ------------------------------------------------------------------------------------------------ expressions

_FUNCTIONS = {
    "round": round, "min": min, "max": max, "abs": abs, "sum": sum, "len": len, "mean": mean, "gib": gib, "gb": gb,
    "mb": mb, "margin": margin, "part": part, "record": record, "tpu": tpu, "demo": demo, "step": step, "hbm": hbm,
    "parts": parts, "hbms": hbms, "margins": margins, "span": span
}
_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b
}


def evaluate(expr: str):
  """The value of a figure's expression (only the forms the module's docstring lists)."""
  def ev(node):
    if isinstance(node, ast.Expression):
      return ev(node.body)
    if isinstance(node, ast.Constant):
      return node.value
    if isinstance(node, ast.Name):
      if node.id in _FUNCTIONS:
        return _FUNCTIONS[node.id]
      return figures(node.id)
    if isinstance(node, ast.Attribute):
      return ev(node.value)[node.attr]
    if isinstance(node, ast.Subscript):
      return ev(node.value)[ev(node.slice)]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
      return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
      return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
      return [ev(e) for e in node.elts]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
      return _FUNCTIONS[node.func.id](*[ev(a) for a in node.args])
    raise ValueError(f"not a figure expression: {ast.unparse(node)}")

  return ev(ast.parse(expr, mode="eval"))


def split_spec(text: str) -> tuple[str, str]:
  """'EXPR:SPEC' → (EXPR, SPEC): the first colon outside brackets and quotes ('' when there is none)."""
  depth, quote = 0, None
  for i, ch in enumerate(text):
    if quote:
      quote = None if ch == quote else quote
    elif ch in "\"'":
      quote = ch
    elif ch in "([{":
      depth += 1
    elif ch in ")]}":
      depth -= 1
    elif ch == ":" and depth == 0:
      return text[:i].strip(), text[i + 1:].strip()
  return text.strip(), ""


def figure(inside: str) -> str:
  expr, spec = split_spec(inside)
  return fmt(evaluate(expr), spec)


# ------------------------------------------------------------------------------------------------ blocks

BLOCKS: dict[tuple[str, str], Callable[[], str]] = {}


def block(page: str, name: str):
  """Registers a block renderer: the text between `<!-- doc_figures:NAME -->` and its end marker on `page`."""
  def register(fn):
    BLOCKS[(page, name)] = fn
    return fn

  return register


def _block_pattern(name: str) -> re.Pattern:
  """A block's markers and what lies between them; the start marker's indent (a block inside a list item) is the
  block's."""
  n = re.escape(name)
  return re.compile(rf"^([ \t]*)<!-- doc_figures:{n} -->\n.*?^[ \t]*<!-- /doc_figures:{n} -->", re.S | re.M)


def _block_text(name: str, rendered: str, indent: str = "") -> str:
  lines = [f"<!-- doc_figures:{name} -->", *rendered.split("\n"), f"<!-- /doc_figures:{name} -->"]
  return "\n".join(indent + line if line else line for line in lines)


def _table(header: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  return "\n".join(lines)


def _ratio(a: float, b: float) -> str:
  r = a / b
  return "≈ 0" if r < 0.005 else f"{r:.2f}"


@block("docs/performance.md", "cpu_table")
def _performance_table() -> str:
  """The table at the top of docs/performance.md: one row per measurement, with its command."""
  p, t = figures("parity_clip_hf"), figures("parity_t5_hf")
  load, enc = figures("load_clip"), figures("encode_b32")
  pipe, tfds = figures("pipeline_clic"), figures("pipeline_tfds")
  clic, read = figures("bench_train_clic"), figures("bench_train_read")
  first, pre = figures("demo_first_command"), figures("demo_pretrain")
  speedup = sorted({
      round(enc["ours_captions_per_s"] / enc["transformers_captions_per_s"], 1),
      round(enc["ours_images_per_s"] / enc["transformers_images_per_s"], 1)
  })
  rows = [
      [
          "parity with transformers `CLIPModel`, ViT-B/32",
          f"max \\|Δ\\| text {fmt(p['text_embedding_max_abs_diff'], 'sci1')}, image "
          f"{fmt(p['image_embedding_max_abs_diff'], 'sci1')} (embeddings); logits ≤ "
          f"{fmt(p['logits_tolerance'], 'sci0')}", f"`{record('parity_clip_hf')['command']}`"
      ],
      [
          "parity with `T5ForConditionalGeneration`, v1.1-large width (2 layers)",
          f"max \\|Δ\\| logits {fmt(t['logits_max_abs_diff'], 'sci1')}", f"`{record('parity_t5_hf')['command']}`"
      ],
      [
          "load a ViT-B/32 safetensors checkpoint (`load_clip`)",
          "a warm process (backend up, file in the page cache), timed until every parameter is on the device, medians "
          f"of {load['rounds']} alternated with transformers: **{fmt(load['ours_s'], '.2f')} s** ({load['runs']} runs; "
          f"CPU {fmt(load['ours_cpu_s'], '.2f')} s) vs transformers `from_pretrained` "
          f"{fmt(load['transformers_s'], '.2f')} s, ratio {fmt(load['ratio'], '.2f')}×; the first load in a process "
          f"(it also builds the shape-only template) {fmt(load['first_load_s'], '.2f')} s. Kernels are stored "
          "[out, in] as the checkpoints hold them, so loading copies no transposed 600 MB. 2 cores, load average "
          f"{fmt(load['load_average'])}.", f"`{record('load_clip')['command']}`"
      ],
      [
          "encode ViT-B/32, batch 32",
          f"{enc['ours_captions_per_s']:.1f} captions/s, {enc['ours_images_per_s']:.1f} images/s (transformers in "
          f"torch: {enc['transformers_captions_per_s']:.1f} / {enc['transformers_images_per_s']:.1f}; "
          f"{fmt(speedup, '.1f')}×)", f"`{record('encode_b32')['command']}`"
      ],
      [
          "CLIC text side (negative + joins + tokens), 1 core",
          f"{pipe['text_side_on_the_fly']} samples/s with spaCy on the fly (full pipeline, parser on, as the "
          f"reference: {pipe['text_side_on_the_fly'] / pipe['text_side_parser_off']:.2f}× the parser-off tagger's "
          f"{pipe['text_side_parser_off']}); {pipe['text_side_cached']:,} with the cached analysis "
          f"({pipe['text_side_cached'] / pipe['text_side_on_the_fly']:.0f}×). Medians of {pipe['runs']} runs; the "
          "figures move with the machine's load", f"`{record('pipeline_clic')['command']}`"
      ],
      [
          "full CLIC sample from prepared shards, 1 core",
          f"{pipe['full_sample_prepared']} samples/s (reference: {fmt(pipe['full_sample_jpeg'])} from JPEGs; the "
          f"figure moves with the machine's load). Two PNG decodes (the CLIC halves) are ~"
          f"{100 * pipe['png_decode_share']:.0f} % of the time", "same command"
      ],
      [
          "the same CLIC samples from TFDS (no TensorFlow), 1 core",
          f"four sources of the same {tfds['records']} records, alternating pass by pass, median of {tfds['runs']}: "
          f"prepared shards {tfds['prepared']:.1f}, the same records as `prepare --format=tfds` read by "
          f"`data.source=tfds` {tfds['tfds_of_prepared']:.1f} (**{tfds['tfds_of_prepared'] / tfds['prepared']:.2f}×**: "
          f"TFDS's example parsing, ~{tfds['tfds_parse_us_per_record']} µs a record, in Python), CSV + JPEG files "
          f"{tfds['csv_jpeg']:.1f}, TFDS of the original JPEGs {tfds['tfds_of_jpeg']:.1f} "
          f"(**{tfds['tfds_of_jpeg'] / tfds['csv_jpeg']:.2f}×** the files). A TFDS dataset of full-size images "
          f"decodes them as the files do ({tfds['tfds_of_jpeg'] / tfds['prepared']:.2f}× the pre-resized shards): "
          "`prepare --format=tfds` gives TFDS users the pre-resized images", f"`{record('pipeline_tfds')['command']}`"
      ],
      [
          "CLIC step, ViT-B/32, B=8, fp32, CPU",
          f"{fmt(clic['clic_step_keep_s'], '/.2f')} s at the full 77-token width with `COMPCLIP_HOST_MALLOC=keep`, "
          f"{fmt(clic['clic_step_default_s'], '/.2f')} s without (glibc's defaults, alternated), {clic['clic_gflop']} "
          f"GFLOP per step, peak {clic['clic_peak_gib']:.2f} GiB. With token trimming (the default) the timed batches "
          f"share the first batch's width bucket, {clic['trimmed_width_tokens']} tokens here. The official step, "
          "side by side: \"Against the official CLIC training step\"", f"`{record('bench_train_clic')['command']}`"
      ],
      [
          "CLIC's CLIP step, same setting", f"{fmt(clic['clip_step_keep_s'], '/.2f')} s at 77 tokens with `keep`, "
          f"{fmt(clic['clip_step_default_s'], '/.2f')} s without, {clic['clip_gflop']} GFLOP", "same command"
      ],
      [
          "READ step, ViT-B/32 + T5 decoder at v1.1-large width (2 layers, vocab 32128), B=8, CPU",
          f"{read['step_s']:.2f} s, {read['gflop']} GFLOP per step, peak {read['peak_gib']:.2f} GiB",
          f"`{record('bench_train_read')['command']}`"
      ],
      [
          "synthetic-world demo, README's first command",
          f"{first['seconds']} s from a fresh clone with the requirements installed (16k-scene world written and "
          "tagged once, the shipped starting point, 300 control + 300 CLIC steps, 8 evaluations)",
          f"`{record('demo_first_command')['command']}`"
      ],
      [
          "demo starting point from scratch",
          f"{fmt(pre['clip_seconds'], 'min')} ({pre['clip_seconds']:,} s: 1,000 + 2,500 + 1,500 pretraining steps of "
          f"64, 300 decoder steps); `--family=siglip`: {pre['siglip_seconds']:,} s",
          f"`{record('demo_pretrain')['command']}`"
      ],
  ]
  for family in ("clip", "siglip"):
    r = demo(f"sweep_{family}")
    runs = sum(len(v) for v in r["runs"].values())
    rows.append([
        f"demo sweep, {'CLIP' if family == 'clip' else 'SigLIP'}: 4 methods, 2 controls, 5 ablations × "
        f"{len(r['seeds'])} seeds",
        f"{minsec(r['seconds'])} ({runs} fine-tuning runs of 300 steps from the shipped model, at commit "
        f"{r['git_commit'][:7]}); results in docs/demo.md", f"`{r['command']}`"
    ])
  return _table(["what", "result", "command"], rows)


@block("docs/performance.md", "cpu_parts")
def _cpu_parts() -> str:
  r = figures("cpu_profile_parts")
  rows = [[
      p["part"], f"{p['reference_s']:.2f} s", f"{p['ours_s']:.2f} s" if p["ours_s"] >= 0.01 else f"{p['ours_s']:.3f} s",
      _ratio(p["ours_s"], p["reference_s"])
  ] for p in r["parts"]]
  return _table(["part (B = 8, 77 tokens, fp32)", "reference (torch eager, open_clip)", "ours", "ours / reference"],
                rows)


@block("docs/performance.md", "cpu_variants")
def _cpu_variants() -> str:
  r = figures("cpu_profile_variants")
  ref = r["variants"][0]["median_s"]
  rows = [[v["variant"], f"{v['median_s']:.2f} s", f"{fmt(v['range_s'], '.2f')} s", f"{v['median_s'] / ref:.2f}"]
          for v in r["variants"]]
  return _table(["CLIC step, ViT-B/32 shapes, B = 8, fp32 compute", "median", "range", "/ reference"], rows)


def _side_by_side_rows(setting: dict) -> list[list[str]]:
  cell = lambda t: f"{t[0]:.3f} s ({t[1]:.3f}–{t[2]:.3f})"
  rows = []
  for name, label in (("clic", "CLIC step"), ("clip", "CLIC's CLIP step")):
    s = setting[name]
    rows.append([
        label,
        cell(s["reference_s"]),
        cell(s["ours_77_s"]),
        cell(s["ours_32_s"]), f"{s['ours_77_s'][0] / s['reference_s'][0]:.2f}",
        f"{s['ours_32_s'][0] / s['reference_s'][0]:.2f}"
    ])
  return rows


_SIDE_HEADER = ["step", "reference (official CLIC)", "ours, 77 tokens", "ours, 32 tokens", "77 / ref", "32 / ref"]


@block("docs/performance.md", "side_by_side")
def _side_by_side() -> str:
  """The official step beside ours with the harness's default allocator policy (keep, both sides)."""
  r = record("side_by_side_clic")
  f = r["figures"]["keep"]
  return (f"CLIC @ `{r['versions']['CLIC']}`, torch {r['versions']['torch']} {f['torch_threads']} threads, jax "
          f"{r['versions']['jax']}, at commit {f['commit']}; load {fmt(r['figures']['load_average'])}; {f['rounds']} "
          "alternated rounds, median (min–max):\n\n" + _table(_SIDE_HEADER, _side_by_side_rows(f)))


@block("docs/performance.md", "side_by_side_allocator")
def _side_by_side_allocator() -> str:
  """The same with glibc's defaults on both sides."""
  f = figures("side_by_side_clic")["default"]
  return (f"At commit {f['commit']}, {f['rounds']} alternated rounds, median (min–max):\n\n" +
          _table(_SIDE_HEADER, _side_by_side_rows(f)))


@block("docs/performance.md", "changes")
def _changes() -> str:
  last, clic = figures("last_block_pooled"), figures("bench_train_clic")
  change = lambda a, b: f"{(mean(b) - mean(a)) / mean(a) * 100:+.0f} %".replace("-", "−")
  rows = [
      [
          "last block at the pooled position (text tower forward + backward alone, alternated in one process; "
          f"commits {last['commits'][0]} → {last['commits'][1]})",
          f"{last['text_fwd_bwd_s'][0]:.2f} → {last['text_fwd_bwd_s'][1]:.2f} s "
          f"({change([last['text_fwd_bwd_s'][0]], [last['text_fwd_bwd_s'][1]])})", "—"
      ],
      [
          "host allocator policy (`COMPCLIP_HOST_MALLOC=default` vs `keep`, two alternations)",
          f"{fmt(clic['clic_step_default_s'], '/.2f')} → {fmt(clic['clic_step_keep_s'], '/.2f')} s "
          f"({change(clic['clic_step_default_s'], clic['clic_step_keep_s'])})",
          f"{fmt(clic['clip_step_default_s'], '/.2f')} → {fmt(clic['clip_step_keep_s'], '/.2f')} s "
          f"({change(clic['clip_step_default_s'], clic['clip_step_keep_s'])})"
      ],
  ]
  return _table(["change", "CLIC step, 77 tokens", "CLIC's CLIP step"], rows)


@block("docs/siglip.md", "loss_memory")
def _siglip_loss_memory() -> str:
  rows = []
  for row in figures("siglip_loss_memory")["rows"]:
    coll = ", ".join(f"{k} {c} / {b:.1f} MiB" for k, (c, b) in row["collectives"].items())
    rows.append([f"{row['global_batch']:,}", row["form"], f"{row['temp_mib']:.1f}", f"{row['io_mib']:.1f}", coll])
  return _table(["global batch", "form", "temporaries MiB", "arguments + outputs MiB", "collectives"], rows)


def _hbm(s: dict) -> str:
  return f"{s['hbm_gib']:.2f} ({fmt(s['parts_gib'], 'hbm')})"


@block("docs/siglip.md", "compile_b16")
def _siglip_compile() -> str:
  r = figures("siglip_compile_b16_1024")
  rows = []
  for name, s in r["steps"].items():
    m = 100 * (1 - s["hbm_gib"] / r["capacity_gib"])
    rows.append([
        name, f"{r['global_batch']:,}",
        _hbm(s), f"yes (+{m:.0f} %)" if m > 0 else "no", f"{s['tflop']:.2f}", f"{s['roofline_ms']:.1f}"
    ])
  return _table(["step", "global batch", "HBM/device GiB", "fits", "TFLOP/device", "roofline ms"], rows)


def _gate_row(label: str, g: dict) -> list[str]:
  im, tx, sc = g["probes"]["image"], g["probes"]["text"], g["sugarcrepe"]
  return [
      label, f"{100 * im['binding']:.1f}", f"{100 * im['collage_binding']:.1f}", f"{100 * tx['binding']:.1f}",
      f"{100 * (sc['replace_att'] - sc['swap_att']):+.1f} / {100 * (sc['replace_obj'] - sc['swap_obj']):+.1f}"
  ]


@block("docs/siglip.md", "softmax_diagnostic")
def _siglip_diagnostic() -> str:
  d = figures("siglip_softmax_pretrain")
  rows = [
      _gate_row("CLIP towers, softmax forms (shipped)", demo("gate_clip")),
      [
          "SigLIP towers, softmax forms (diagnostic)", f"{d['vision_binding_singles']:.1f}",
          f"{d['vision_binding_collage_halves']:.1f}", f"{d['text_binding']:.1f}",
          f"{d['sugarcrepe_gap_att']:+.1f} / {d['sugarcrepe_gap_obj']:+.1f}"
      ],
      _gate_row("SigLIP towers, sigmoid forms (shipped)", demo("gate_siglip")),
  ]
  return _table([
      "starting point (seed 0)", "vision binding, singles", "vision binding, collage halves", "text binding",
      "SugarCrepe gaps (att / obj)"
  ], rows)


@block("docs/demo.md", "world_gate")
def _world_gate() -> str:
  w = figures("demo_world_gate")
  first, extra_words, extra = w["first_sentence_words"], w["extra_sentence_words"], w["extra_sentences"]
  yes = lambda ok: "yes" if ok else "no"
  kinds = ", ".join(f"{k} {v:.1f}" for k, v in w["clic_negatives_pct"].items())
  rows = [
      [
          "1. first sentence", "8–34 words, ≥ 2 objects each with ≥ 2 attributes, a relation, a scene word",
          (f"{first[0]} words, always" if first[0] == first[1] else f"{fmt(first)} words") +
          " (two objects with size + colour, a shape word, a texture in the further sentences; relation; scene)",
          yes(8 <= first[0] and first[1] <= 34)
      ],
      [
          "1. further sentences", "≥ 3 per row, 4–34 words, ≥ 20 templates",
          f"{fmt(extra)} per row, {fmt(extra_words)} words, {w['templates']} templates",
          yes(extra[0] >= 3 and 4 <= extra_words[0] and extra_words[1] <= 34 and w["templates"] >= 20)
      ],
      [
          "2. swap twins in a batch of 32", "< 1 %",
          f"{w['swap_twin_pct_batch32']:.2f} % (10 colours × 10 shapes × 3 textures × 2 sizes)",
          yes(w["swap_twin_pct_batch32"] < 1)
      ],
      [
          "3. CLIC's negatives trading two content words of one kind (the reference's exact choice distribution, "
          f"{w['pairs']:,} random pairs)", "≥ 90 %",
          f"{w['same_kind_pct']:.2f} %: {kinds}; {w['fallback_pct']:.2f} % fall back to a swap inside one sentence",
          yes(w["same_kind_pct"] >= 90)
      ],
  ]
  return _table(["rule", "required", "measured on seed 0's world", "met"], rows)


@block("docs/tpu.md", "remat")
def _tpu_remat() -> str:
  """CLIC ViT-B/32 at 800 on a v5e-8 in five settings: the shipped one is the paper table's file, the others
  docs/measured/tpu_remat_clic_b32.json."""
  shipped = tpu("clic_b32_v5e-8")["steps"]["clic"]
  r = figures("tpu_remat_clic_b32")
  parts = lambda s: " + ".join(f"{gib(s[k]):.2f}" for k in ("argument_bytes", "output_bytes")) + \
      f" − {gib(s['alias_bytes']):.2f} + {gib(s['temp_bytes']):.2f} + {gib(s['code_bytes']):.2f}"
  rows = []
  for row in r["settings"]:
    if row.get("shipped"):
      rows.append([
          row["setting"], f"{gib(shipped['hbm_bytes_per_device']):.2f} ({parts(shipped)}), "
          f"+{margin(shipped):.0f} %", f"{shipped['flops_per_device'] / 1e12:.2f}", f"{1e3 * shipped['roofline_s']:.0f}"
      ])
      continue
    p = row["parts_gib"]
    m = 100 * (1 - row["hbm_gib"] / r["capacity_gib"])
    flops = f"{row['tflop']:.2f}" if not row.get("scanned") else f"({row['tflop']:.2f}: one block counted)"
    rows.append([
        row["setting"], f"{row['hbm_gib']:.2f} ({p[0]:.2f} + {p[1]:.2f} − {p[2]:.2f} + {p[3]:.2f} + "
        f"{p[4]:.2f}), +{m:.0f} %", flops, f"{row['roofline_ms']:.0f}" if "roofline_ms" in row else "—"
    ])
  return _table([
      "setting", "clic step: HBM/device GiB (args + out − alias + temp + code)", "TFLOP/device", "roofline ms"
  ], rows)


@block("docs/training.md", "precision")
def _precision() -> str:
  """The demo's CLIC and READ runs in fp32 and bf16 (docs/measured/precision_demo.json): per method the loss curves'
  largest and mean relative difference after warm-up, and per held-out row the fp32 mean ± seed std, the bf16 mean
  and the largest per-seed difference."""
  f = figures("precision_demo")
  rows = []
  for method, m in f["summary"].items():
    loss = f"{100 * m['max_rel_loss_diff']:.2f} % (mean {100 * m['mean_rel_loss_diff']:.2f} %)"
    for i, (label, r) in enumerate(m["rows"].items()):
      rows.append([
          method if i == 0 else "", loss if i == 0 else "", label, f"{r['fp32_mean']:.1f} ± {r['fp32_std']:.1f}",
          f"{r['bf16_mean']:.1f}", f"{r['max_seed_diff']:.1f}", "yes" if r["max_seed_diff"] <= r["fp32_std"] else "no"
      ])
  return _table([
      "method", "training loss, bf16 vs fp32: largest relative difference after warm-up", "held-out row (%)",
      "fp32, mean ± std over seeds", "bf16, mean", "bf16 − fp32, largest on one seed (points)", "within one seed std"
  ], rows)


@block("docs/tpu.md", "clic_traffic")
def _clic_traffic() -> str:
  """The recipe's CLIC step's HBM traffic by group (docs/measured/tpu_clic_traffic.json, tools/hlo_traffic.py)."""
  return _traffic(figures("tpu_clic_traffic"))


@block("docs/tpu.md", "read_traffic")
def _read_traffic() -> str:
  """The recipe's READ step's HBM traffic by group (docs/measured/tpu_read_traffic.json, tools/hlo_traffic.py)."""
  return _traffic(figures("tpu_read_traffic"))


def _traffic(f: dict) -> str:
  """A step's traffic figures (tools/hlo_traffic.py's record) as a table: each group's GB and share, their sum."""
  rows = [[g, f"{b:.1f}", f"{100 * b / f['total_gb']:.0f} %"] for g, b in f["groups_gb"].items() if b >= 0.05]
  rows.append(["sum (the compiler's own figure)", f"{f['total_gb']:.1f} ({f['compiler_gb']:.1f})", "100 %"])
  return _table(["what the instructions compute", "GB per device per step", "share"], rows)


@block("docs/architecture.md", "developing")
def _developing() -> str:
  measured = lambda r: f"{r['figures']['passed']} passed in {minsec(r['figures']['seconds'])} " \
      f"({r['figures']['conditions']})"
  fast, cold = record("test_suite_fast"), record("test_suite_cold")
  return _table(["command", "what", "measured (2 CPU cores)"], [
      [
          f"`{fast['command']}`", "the fast loop: everything but training runs and other tests over ~15 s",
          measured(fast)
      ],
      [f"`{cold['command']}`", "the whole suite, what CI runs (`slow` included; `manual` skipped)",
       measured(cold)],
      [
          "`COMPCLIP_MANUAL_TESTS=1 python -m pytest tests/demo/test_demo_effect.py -s`",
          "the manual tier: the demo's effect", ""
      ],
      ["`.ci/lint`", "`ruff check` + `yapf --diff` (configured in `pyproject.toml`); CI runs it first", ""],
      ["`yapf -i -r -p compclip_jax configs tests launch && ruff check --fix .`", "format and fix", ""],
  ])


# ------------------------------------------------------------------------------------------------ pages

TRAJECTORIES = os.path.join(ROOT, "tests", "fixtures", "reference")


def _whole_run(name: str) -> dict:
  """tests/fixtures/reference/trajectory_<name>/'s worst figures (written by tools/trajectory_<name>.py plot), in
  one shape: steps per side, worst relative loss difference (term, step), lr, logit scale, gradient norm, worst
  weight ratio at steps 10 and 50 (tensor)."""
  folder = os.path.join(TRAJECTORIES, f"trajectory_{name}")
  path = next(
      os.path.join(folder, f) for f in (f"trajectory_{name}_worst.json", "worst.json")
      if os.path.exists(os.path.join(folder, f)))
  w = _read(path)
  steps = w["steps"]
  out = {"ours": steps["ours"], "theirs": steps.get("theirs", steps.get("reference"))}
  if "loss_rel_step" in w:  # {term: value}, {term: step}
    term = max(w["loss_rel"], key=w["loss_rel"].get)
    out["loss"] = (w["loss_rel"][term], term, w["loss_rel_step"][term])
    out["lr"], out["scale"], out["grad"] = w["lr_rel"], w["logit_scale_abs"], w["grad_norm_rel"]
    out["w10"] = (w["weight_ratio_step10"], w["weight_ratio_step10_tensor"])
    out["w50"] = (w["weight_ratio_step50"], w["weight_ratio_step50_tensor"])
  else:  # {term: {value, step}}
    term = max(w["loss_rel"], key=lambda k: w["loss_rel"][k]["value"])
    out["loss"] = (w["loss_rel"][term]["value"], term, w["loss_rel"][term]["step"])
    out["lr"], out["scale"] = w["lr_rel"]["value"], w["logit_scale_abs"]["value"]
    out["grad"] = w["grad_norm_rel"]["value"]
    out["w10"] = (w["weight_ratio"]["10"]["ratio"], w["weight_ratio"]["10"]["tensor"])
    out["w50"] = (w["weight_ratio"]["50"]["ratio"], w["weight_ratio"]["50"]["tensor"])
  return out


@block("docs/fidelity.md", "whole_runs")
def _whole_runs() -> str:
  runs = {"CLIC": _whole_run("clic"), "READ": _whole_run("read")}
  e = lambda x: f"{x:.1e}"
  rows = [
      ["optimiser steps (ours / theirs)", *(f"{r['ours']} / {r['theirs']}" for r in runs.values()), "equal"],
      [
          "worst loss term, relative (term, step)",
          *(f"{e(r['loss'][0])} ({r['loss'][1]}, step {r['loss'][2]})" for r in runs.values()), "1e-4"
      ],
      ["learning rate, relative", *(e(r["lr"]) for r in runs.values()), "1e-5"],
      ["logit scale, absolute", *(e(r["scale"]) for r in runs.values()), "1e-5"],
      ["gradient norm, relative", *(e(r["grad"]) for r in runs.values()), ""],
      [
          "‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖, step 10", *(f"{e(r['w10'][0])} (`{r['w10'][1]}`)" for r in runs.values()),
          "1e-3"
      ],
      [
          "‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖, step 50", *(f"{e(r['w50'][0])} (`{r['w50'][1]}`)" for r in runs.values()),
          "1e-3"
      ],
  ]
  return _table(["worst over the run", *runs, "tolerance"], rows)


def render_page(text: str) -> str:
  """A page's text with every figure as the files give it (raises MissingMeasurement). A figure may not start a
  line: there Markdown reads its comment as an HTML block, which ends the paragraph."""
  for m in FIG.finditer(text):
    if not text[text.rfind("\n", 0, m.start()) + 1:m.start()].strip():
      line = text.count("\n", 0, m.start()) + 1
      raise ValueError(f"line {line}: a figure starts the line (Markdown ends the paragraph there): {m.group(0)[:60]}")
  return FIG.sub(lambda m: f"<!-- fig {m.group(1)} -->{figure(m.group(1))}<!-- /fig -->", text)


def render_blocks(page: str, text: str) -> str:
  for (p, name), fn in BLOCKS.items():
    if p != page:
      continue
    pattern = _block_pattern(name)
    if not pattern.search(text):
      raise ValueError(f"{page}: no block {name} (add <!-- doc_figures:{name} --> and <!-- /doc_figures:{name} -->)")
    rendered = fn()
    text = pattern.sub(lambda m, r=rendered, n=name: _block_text(n, r, m.group(1)), text)
  return text


def render(page: str, text: str) -> str:
  """What `write` makes of `text`, the content of `page` (relative to the repository)."""
  return render_blocks(page, render_page(text))


def pages() -> list[str]:
  return sorted(os.path.relpath(p, ROOT) for pattern in PAGES for p in glob.glob(os.path.join(ROOT, pattern)))


def _text(page: str) -> str:
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    return f.read()


def check() -> list[str]:
  """The problems: each page that differs from what `write` makes of it (with the diff), each file a page reads
  that is missing, each measurement file without its required keys."""
  problems = []
  for page in pages():
    text = _text(page)
    try:
      want = render(page, text)
    except (MissingMeasurement, KeyError, ValueError) as e:
      problems.append(f"{page}: {type(e).__name__}: {e}")
      continue
    if want != text:
      diff = difflib.unified_diff(text.splitlines(), want.splitlines(), page, "python tools/doc_figures.py write",
                                  lineterm="", n=0)
      problems.append("\n".join(diff))
  for name in measurement_names():
    missing = [k for k in REQUIRED if k not in record(name)]
    if missing:
      problems.append(f"docs/measured/{name}.json: no {', '.join(missing)}")
  return problems


def write() -> list[str]:
  """Writes every page that differs → their paths."""
  wanted = {page: render(page, _text(page)) for page in pages()}  # all rendered before any is written
  changed = [page for page, want in wanted.items() if want != _text(page)]
  for page in changed:
    with open(os.path.join(ROOT, page), "w", encoding="utf-8") as f:
      f.write(wanted[page])
  return changed


def uses() -> dict[str, list[str]]:
  """{measurement file name: the pages that read it}, from the pages' figure expressions and the blocks' code."""
  out: dict[str, list[str]] = {name: [] for name in measurement_names()}
  for page in pages():
    text = _text(page)
    names = set()
    for m in FIG.finditer(text):
      expr = split_spec(m.group(1))[0]
      tree = ast.parse(expr, mode="eval")
      names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCTIONS}
      names |= {
          c.args[0].value for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and
          c.func.id == "record" and c.args and isinstance(c.args[0], ast.Constant)
      }
    for (p, _), fn in BLOCKS.items():
      if p == page:
        names |= set(re.findall(r"(?:figures|record)\(\"(\w+)\"\)", _source(fn)))
    for name in names:
      out.setdefault(name, []).append(page)
  return out


def _source(fn) -> str:
  import inspect  # pylint: disable=import-outside-toplevel
  return inspect.getsource(fn)


def main(argv: list[str]) -> int:
  if argv[1:] == ["check"]:
    problems = check()
    for p in problems:
      print(p, file=sys.stderr)
    return 1 if problems else 0
  if argv[1:] == ["write"]:
    for page in write():
      print(page)
    return 0
  if argv[1:] == ["list"]:
    for name, where in sorted(uses().items()):
      print(f"docs/measured/{name}.json: {', '.join(where) or 'no page'}")
    return 0
  print(__doc__, file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main(sys.argv))
