"""The demo's measured results on docs/demo.md and the README: each seed sweep's record lies in
docs/demo_measured/sweep_<family>.json (written by `collect` from the sweep's workdir), and this tool renders every
table, headline and figure of those pages from those files, so each number there comes from a file a sweep wrote
(tests/demo/test_demo_results.py checks the pages against them).

  python -m compclip_jax.demo --workdir=runs/sweep --seeds=0,1,2                     # the sweep (CLIP)
  python tools/demo_results.py collect runs/sweep --seconds=N --command="…"          # → docs/demo_measured/
  python tools/demo_results.py render                                                # the generated blocks
  python tools/demo_results.py write                                                 # the pages and figures

A generated block sits between `<!-- demo_results:NAME -->` and `<!-- /demo_results:NAME -->` on its page.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from compclip_jax.demo import diagnose  # noqa: E402
from compclip_jax.demo import plots  # noqa: E402
from compclip_jax.demo import run as demo  # noqa: E402
from compclip_jax.demo import tables  # noqa: E402

MEASURED = os.path.join(ROOT, "docs", "demo_measured")
FAMILIES = ("clip", "siglip")
METHODS = ("clic", "negclip", "read", "clic_read")  # the headline's rows (the ablations are on docs/demo.md)
SUMMARY_ROWS = ("SugarCrepe swap (mean)", "SugarCrepe++ swap ITT", "SugarCrepe replace (mean)", "retrieval image R@5",
                "retrieval text R@5", demo.COLLAGE_SWAP)
REPORTS = (("clic", "clip"), ("negclip", "clip"), ("read", "clip_all"))  # seed 0's report figures, CLIP family
_DROP = ("/count", "/seconds", "/images", "/texts")


def record_path(family: str) -> str:
  return os.path.join(MEASURED, f"sweep_{family}.json")


def _slim(row: dict) -> dict:
  """A metrics.jsonl row without its bookkeeping (counts, timings, data counters), values to 6 significant digits."""
  keep = {
      k: v for k, v in row.items()
      if not k.endswith(_DROP) and not k.startswith(("data/", "samples_per_s", "steps_per_s", "param_norm"))
  }
  return {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in keep.items()}


def collect(workdir: str, seconds: float, command: str) -> str:
  """The record of the sweep in `workdir` (its summary.json, each run's metrics rows, each seed world's CLIC
  negative kinds) → docs/demo_measured/sweep_<family>.json; returns its path."""
  if not os.path.exists(os.path.join(workdir, "summary.json")):
    _refuse(f"{os.path.join(workdir, 'summary.json')} not found: collect reads a finished sweep's workdir (python -m "
            "compclip_jax.demo --workdir=DIR --seeds=0,1,2 writes it)")
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  runs, kinds = {}, {}
  for seed in summary["seeds"]:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    runs[str(seed)] = {}
    for name in summary["cols"]:
      path = os.path.join(seed_dir, name, "metrics.jsonl")
      if os.path.exists(path):
        with open(path) as f:
          runs[str(seed)][name] = [_slim(json.loads(line)) for line in f]
    gate = diagnose.world_gate(os.path.join(seed_dir, "world"))
    kinds[str(seed)] = {"clic_negatives": gate["clic_negatives"], "same_kind_share": gate["same_kind_share"]}
  commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
  record = {"command": command, "seconds": round(seconds), "git_commit": commit, **summary, "negative_kinds": kinds,
            "runs": runs}
  os.makedirs(MEASURED, exist_ok=True)
  path = record_path(summary["family"])
  with open(path, "w") as f:
    json.dump(record, f, separators=(",", ":"))
    f.write("\n")
  return path


def load(family: str) -> dict | None:
  if not os.path.exists(record_path(family)):
    return None
  with open(record_path(family)) as f:
    return json.load(f)


def _minutes(seconds: float) -> str:
  return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def _kinds_table(kinds: dict) -> str:
  """CLIC's negatives on each seed's world: the share that trades two content words of one kind and the five most
  common kinds."""
  lines = ["| seed's world | same kind | most common kinds of CLIC's negatives (exact distribution, 2,000 pairs) |",
           "|---|---|---|"]
  for seed, k in kinds.items():
    top = sorted(k["clic_negatives"].items(), key=lambda kv: -kv[1])[:5]
    lines.append(f"| {seed} | {100 * k['same_kind_share']:.2f} % | " +
                 ", ".join(f"{name} {100 * p:.1f}" for name, p in top) + " |")
  return "\n".join(lines)


def render_family(family: str) -> str:
  """docs/demo.md's block of one family's sweep: how it was run, the tables, the hypothesis, CLIC's negatives."""
  r = load(family)
  if r is None:
    return f"Not measured: no `docs/demo_measured/sweep_{family}.json`."
  cols, seeds = r["cols"], r["seeds"]
  n_runs = sum(len(v) for v in r["runs"].values())
  parts = [
      f"`{r['command']}`: {n_runs} runs ({len(cols) - 1} per seed, seeds {', '.join(map(str, seeds))}) in "
      f"{_minutes(r['seconds'])} on 2 CPU cores, at commit {r['git_commit'][:7]}. Held-out benchmarks, %, mean ± "
      "std over seeds; \"pretrained\" is the shipped starting point; the last row is the cross-collage swap test "
      "(CLIC's own task, a diagnostic):",
      tables.summary_table(cols, seeds),
      tables.paired_table(cols),
      tables.paired_table(cols, demo.controlled_pairs(cols), "change beyond its control"),
      "The hypothesis, method by method (ahead of its control on every seed on both swap rows; no more than 1 point "
      "of R@5 lost on average):",
      tables.hypothesis_table(cols, demo.controlled_pairs(cols)),
      "What CLIC's hard negatives trade on each seed's world (`python -m compclip_jax.demo --negative_kinds "
      "--workdir=runs/sweep/seed<k>`):",
      _kinds_table(r["negative_kinds"]),
      f"![mean ± std over {len(seeds)} seeds, each seed a dot](demo_summary_{family}.png)",
  ]
  return "\n\n".join(parts)


def render_gate(family: str) -> str:
  """docs/demo.md's block of one family's starting point: `--diagnose`'s record (docs/demo_measured/gate_<family>.json)
  as `--diagnose` prints it."""
  path = os.path.join(MEASURED, f"gate_{family}.json")
  if not os.path.exists(path):
    return f"Not measured: no `docs/demo_measured/gate_{family}.json`."
  with open(path) as f:
    r = json.load(f)
  return f"`{r['command']}` (the starting point `{r['model']}`, seed {r['seed']}'s world):\n\n" + \
      diagnose.diagnose_text(r)


def render_headline() -> str:
  """The README's headline: each method against its control, both families, mean ± std over seeds."""
  rows = ("SugarCrepe swap (mean)", "SugarCrepe++ swap ITT", "retrieval image R@5", "retrieval text R@5")
  lines = ["| tower family | method − control (points, mean ± std over seeds) | held-out swap | SC++ swap ITT | "
           "R@5 image | R@5 text | hypothesis met |", "|---|---|---|---|---|---|---|"]
  for family in FAMILIES:
    r = load(family)
    if r is None:
      continue
    cols = r["cols"]
    for m in METHODS:
      c = demo.CONTROL_OF[m]
      if m not in cols or c not in cols:
        continue
      cells = []
      for row in rows:
        diffs = [a - b for a, b in zip(cols[m][row], cols[c][row])]
        cells.append("{:+.1f} ± {:.1f}".format(*plots.mean_std(diffs)))
      met = "yes" if tables.hypothesis_met(cols, m, c) else "no"
      lines.append(f"| {family} | {m} − {c} | " + " | ".join(cells) + f" | {met} |")
  return "\n".join(lines)


def blocks() -> dict[tuple[str, str], str]:
  """{(page, block name): text} of every generated block."""
  return {
      ("docs/demo.md", "gate_clip"): render_gate("clip"),
      ("docs/demo.md", "gate_siglip"): render_gate("siglip"),
      ("docs/demo.md", "results_clip"): render_family("clip"),
      ("docs/demo.md", "results_siglip"): render_family("siglip"),
      ("README.md", "headline"): render_headline(),
  }


def _pattern(name: str) -> re.Pattern:
  return re.compile(rf"(<!-- demo_results:{name} -->\n)(.*?)(\n<!-- /demo_results:{name} -->)", re.S)


def page_block(text: str, name: str) -> str | None:
  """The text of block `name` on a page (None when the page has no such block)."""
  m = _pattern(name).search(text)
  return m.group(2) if m else None


def figures() -> list[str]:
  """Draws every figure the blocks name (docs/demo_summary_<family>.png, seed 0's report figures) → their paths."""
  out = []
  for family in FAMILIES:
    r = load(family)
    if r is None:
      continue
    path = os.path.join(ROOT, "docs", f"demo_summary_{family}.png")
    plots.plot_summary(r["cols"], path, list(SUMMARY_ROWS),
                       f"{family}: synthetic world, held-out pairings, mean ± std over seeds (%)")
    out.append(path)
    if family != "clip":
      continue
    runs = r["runs"][str(r["seeds"][0])]
    for method, control in REPORTS:
      path = os.path.join(ROOT, "docs", f"demo_report_{method}_seed{r['seeds'][0]}.png")
      plots.plot_report(runs[method], path, method, runs[control], control)
      out.append(path)
  return out


def write() -> None:
  for (page, name), text in blocks().items():
    path = os.path.join(ROOT, page)
    with open(path) as f:
      old = f.read()
    if page_block(old, name) is None:
      _refuse(f"{page}: no block {name} (add <!-- demo_results:{name} --> and <!-- /demo_results:{name} -->)")
    with open(path, "w") as f:
      f.write(_pattern(name).sub(lambda m: m.group(1) + text + m.group(3), old))
  for path in figures():
    print(os.path.relpath(path, ROOT))


def _refuse(message: str) -> None:
  print(f"demo_results: {message}", file=sys.stderr)
  raise SystemExit(2)


def main(argv: list[str]) -> None:
  if argv[:1] == ["collect"]:
    args = dict(a[2:].split("=", 1) for a in argv[2:] if a.startswith("--") and "=" in a)
    if len(argv) < 2 or argv[1].startswith("--") or set(args) != {"seconds", "command"} or len(args) != len(argv) - 2:
      _refuse('usage: collect WORKDIR --seconds=S --command="…" (S: the sweep\'s wall time in seconds)')
    try:
      seconds = float(args["seconds"])
    except ValueError:
      _refuse(f"--seconds={args['seconds']}: a number of seconds")
    print(collect(argv[1], seconds, args["command"]))
  elif argv[:1] == ["render"]:
    for (page, name), text in blocks().items():
      print(f"--- {page}: {name}\n{text}\n")
  elif argv[:1] == ["write"]:
    write()
  else:
    _refuse(__doc__)


if __name__ == "__main__":
  main(sys.argv[1:])
