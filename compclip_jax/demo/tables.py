"""The sweep's tables: mean ± std over seeds, and same-seed differences (a method against its control)."""
from __future__ import annotations

import numpy as np

from compclip_jax.demo import plots as demo_plots


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


PAIRED_ROWS = ("SugarCrepe swap (mean)", "SugarCrepe++ swap ITT", "SugarCrepe replace (mean)", "retrieval image R@5",
               "retrieval text R@5")


def paired_table(cols: dict, pairs: list[tuple[str, str]] | None = None,
                 title: str = "change from the pretrained model") -> str:
  """Per-seed differences (name − baseline) for each (name, baseline) pair, mean ± std over seeds and then each
  seed's, in percentage points; default pairs: every column against "pretrained"."""
  pairs = pairs or [(n, "pretrained") for n in cols if n != "pretrained"]
  lines = [
      f"| {title} (points), mean ± std over seeds (per seed) | " + " | ".join(PAIRED_ROWS) + " |",
      "|---|" + "---|" * len(PAIRED_ROWS)
  ]
  for name, base in pairs:
    diffs = [np.subtract(cols[name][r], cols[base][r]) for r in PAIRED_ROWS]  # per seed, same-seed pairs
    cells = [
        "{:+.1f} ± {:.1f} ({})".format(*demo_plots.mean_std(d), " / ".join(f"{100 * v:+.1f}" for v in d)) for d in diffs
    ]
    label = name if base == "pretrained" else f"{name} − {base}"
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines)
