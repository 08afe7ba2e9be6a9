"""The demo's tables: one method's report (before and after, beside its control's run), and the sweep's: mean ± std
over seeds, and same-seed differences (a method against its control)."""
from __future__ import annotations

import numpy as np

from compclip_jax.demo import plots as demo_plots
from compclip_jax.train.metrics import tag as metric_tag

# (benchmark, metric, label) rows of the report
REPORT_ROWS = ([("sugarcrepe", s, f"SugarCrepe {s}")
                for s in ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj", "add_att", "add_obj")] +
               [("sugarcrepe", "replace", "SugarCrepe replace (mean)"),
                ("sugarcrepe", "swap", "SugarCrepe swap (mean)")] +
               [("sugarcrepe_pp", f"{g}/itt", f"SugarCrepe++ {g} ITT") for g in ("replace", "swap")] +
               [("coco_retrieval", f"{d}_retrieval_recall@{k}", f"retrieval {d} R@{k}") for d in ("image", "text")
                for k in (1, 5)])


def before_after(rows: list[dict]) -> dict[str, tuple[float, float]]:
  """{report label: (before, after)} of a run's metrics.jsonl `rows`: its first evaluation (step 0) and its last."""
  evals = [m for m in rows if any(k.startswith("eval/") for k in m)]
  table = {}
  for bench, metric, label in REPORT_ROWS:
    key = metric_tag(f"eval/{bench}/{metric}")  # as metrics.jsonl spells it (recall@1 as recall_at_1)
    if evals and key in evals[0] and key in evals[-1]:
      table[label] = (evals[0][key], evals[-1][key])
  return table


def report_table(method: str, table: dict, control: str = "", control_table: dict | None = None) -> str:
  """The markdown report of `method` (`before_after`'s table, in %): before, after and the change; with its control's
  run (`control`, `control_table`) also the control's after and change, and the method's lead over it, same rows."""
  title = f"| {method} on the synthetic world (held-out pairings, %) | before |"
  if not control_table:
    lines = [title + " after | Δ |", "|---|---|---|---|"]
    return "\n".join(lines +
                     [f"| {k} | {100 * b:.1f} | {100 * a:.1f} | {100 * (a - b):+.1f} |" for k, (b, a) in table.items()])
  lines = [title + f" {method} | Δ | {control} (control) | Δ | {method} − {control} |", "|---|" + "---|" * 6]
  for k, (b, a) in table.items():
    if k not in control_table:
      continue
    ctl = control_table[k][1]
    lines.append(f"| {k} | {100 * b:.1f} | {100 * a:.1f} | {100 * (a - b):+.1f} | {100 * ctl:.1f} | "
                 f"{100 * (ctl - b):+.1f} | {100 * (a - ctl):+.1f} |")
  return "\n".join(lines)


def summary_table(cols: dict, seeds: list[int]) -> str:
  names = list(cols)
  seeds_ = ", ".join(map(str, seeds))
  lines = [
      f"| held-out benchmark (%), mean ± std over seeds {seeds_} | " + " | ".join(names) + " |",
      "|---|" + "---|" * len(names)
  ]
  for label in cols[names[0]]:
    cells = ["{:.1f} ± {:.1f}".format(*demo_plots.mean_std(cols[n][label])) if label in cols[n] else "–" for n in names]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


COLLAGE_SWAP = "cross-collage swap (CLIC's task)"  # the sweep's diagnostic row (diagnose.collage_swap)
PAIRED_ROWS = ("SugarCrepe swap (mean)", "SugarCrepe++ swap ITT", "SugarCrepe replace (mean)", "retrieval image R@5",
               "retrieval text R@5", COLLAGE_SWAP)

# The sweep's pre-registered hypothesis, from the papers: each method beats its control (same seed) on held-out swap
# and SugarCrepe++ swap ITT — ahead on every seed — without losing more than 1 point of R@5 (image or text, mean).
HYPOTHESIS_SWAP = ("SugarCrepe swap (mean)", "SugarCrepe++ swap ITT")
HYPOTHESIS_R5 = ("retrieval image R@5", "retrieval text R@5")
HYPOTHESIS_R5_LOSS_MAX = 0.01


def hypothesis_met(cols: dict, name: str, control: str) -> bool:
  """Whether `name` beats `control` as the hypothesis asks (`HYPOTHESIS_SWAP`: ahead on every seed; `HYPOTHESIS_R5`:
  the mean change over seeds no lower than −1 point)."""
  d = lambda r: np.subtract(cols[name][r], cols[control][r])
  return bool(
      all((d(r) > 0).all() for r in HYPOTHESIS_SWAP) and
      all(d(r).mean() >= -HYPOTHESIS_R5_LOSS_MAX - 1e-9 for r in HYPOTHESIS_R5))


def hypothesis_table(cols: dict, pairs: list[tuple[str, str]]) -> str:
  """The hypothesis row by row: for each (method, control), the same-seed changes on the swap rows (per seed), the
  mean R@5 changes, and whether it is met (`hypothesis_met`)."""
  lines = [
      "| method − control | " + " | ".join(f"{r}, per seed" for r in HYPOTHESIS_SWAP) +
      " | R@5 image / text (mean) | met |", "|---|" + "---|" * (len(HYPOTHESIS_SWAP) + 2)
  ]
  for name, base in pairs:
    d = lambda r: 100 * np.subtract(cols[name][r], cols[base][r])
    swaps = [" / ".join(f"{v:+.1f}" for v in d(r)) for r in HYPOTHESIS_SWAP]
    r5 = " / ".join(f"{d(r).mean():+.1f}" for r in HYPOTHESIS_R5)
    met = "yes" if hypothesis_met(cols, name, base) else "**no**"
    lines.append(f"| {name} − {base} | " + " | ".join(swaps) + f" | {r5} | {met} |")
  return "\n".join(lines)


def paired_table(cols: dict, pairs: list[tuple[str, str]] | None = None,
                 title: str = "change from the pretrained model") -> str:
  """Per-seed differences (name − baseline) for each (name, baseline) pair, mean ± std over seeds and then each
  seed's, in percentage points; default pairs: every column against "pretrained". The rows of PAIRED_ROWS that
  every column involved has."""
  pairs = pairs or [(n, "pretrained") for n in cols if n != "pretrained"]
  rows = [r for r in PAIRED_ROWS if all(r in cols[n] for pair in pairs for n in pair)]
  lines = [
      f"| {title} (points), mean ± std over seeds (per seed) | " + " | ".join(rows) + " |", "|---|" + "---|" * len(rows)
  ]
  for name, base in pairs:
    diffs = [np.subtract(cols[name][r], cols[base][r]) for r in rows]  # per seed, same-seed pairs
    cells = [
        "{:+.1f} ± {:.1f} ({})".format(*demo_plots.mean_std(d), " / ".join(f"{100 * v:+.1f}" for v in d)) for d in diffs
    ]
    label = name if base == "pretrained" else f"{name} − {base}"
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines)
