"""The demo's plots, from metrics.jsonl rows (compclip_jax/train/metrics.py): one run's curves next to its control's,
and a seed sweep's bars. Called by compclip_jax/demo/run.py (`report`, `sweep`); matplotlib (Agg) is imported on
first use.

  plot_report(rows, path, method, control_rows, control)   held-out benchmarks over steps + the method's loss terms
  plot_summary(cols, path)                                  mean ± std over seeds per benchmark row and run

Rows are metrics.jsonl's: {"step": int, ...} with `eval/<benchmark>/<metric>` keys on evaluation rows (names through
`metrics.tag`: recall@5 → recall_at_5) and `loss`, `loss/<step kind>` (each kind's total: clic, clic_clip, read, …)
and `<method>/<term>` (cont, sneg, uni; con, rec, align — the methods' `console_terms`) on log rows.

Chance levels drawn (scored as compclip_jax/evaluators/scorers.py does, for similarities without information):
  * SugarCrepe: a binary choice (positive vs negative caption) → 50 %;
  * SugarCrepe++ ITT: sim(I,P1) > sim(I,N) and sim(I,P2) > sim(I,N), i.e. the negative is the lowest of three
    exchangeable scores → 1/3;
  * retrieval, when the eval rows carry the test set's size (`images`, `texts`): text→image ("image retrieval")
    R@k = k/N over N images; image→text ("text retrieval", a hit when any of the image's c = T/N captions ranks in
    the top k of T) R@k = 1 − C(T−c, k)/C(T, k). Omitted when the sizes are not logged (or T is not a multiple of N).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from compclip_jax.train.metrics import tag

# (metric under eval/, label, chance in 0..1 or None) of the compositional panel; keys through `tag` when read
COMPOSITION = (
    ("sugarcrepe/swap", "SugarCrepe swap (mean)", 0.5),
    ("sugarcrepe/replace", "SugarCrepe replace (mean)", 0.5),
    ("sugarcrepe_pp/swap/itt", "SugarCrepe++ swap ITT", 1 / 3),
)
RETRIEVAL_K = 5
RETRIEVAL = (("coco_retrieval/image_retrieval_recall@5", "retrieval image R@5 (text→image)"),
             ("coco_retrieval/text_retrieval_recall@5", "retrieval text R@5 (image→text)"))
CHANCE_NAMES = {0.5: "chance SugarCrepe (binary choice)", 1 / 3: "chance SugarCrepe++ ITT (1 of 3)"}
SMOOTH = 5  # loss curves: centred running mean over this many log rows (fewer at the ends)
# plot_summary writes the mean above each bar while there are at most this many bars (narrower bars: no labels)
SUMMARY_LABELS_MAX_BARS = 48
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
          "tab:cyan", "tab:gray")


def _pyplot():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")  # files only: no display needed (and none picked up from the environment)
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def _step_ticks():
  """Integer ticks: a lone evaluation at step 0 gets the tick 0, not −0.04 … 0.04."""
  from matplotlib.ticker import MaxNLocator  # pylint: disable=import-outside-toplevel
  return MaxNLocator(nbins="auto", steps=[1, 2, 5, 10], integer=True, min_n_ticks=1)


def _check_rows(rows, what: str) -> list[dict]:
  if not isinstance(rows, (list, tuple)):
    raise TypeError(f"{what}: expected a list of metrics.jsonl row dicts, got {type(rows).__name__}")
  for i, r in enumerate(rows):
    if not isinstance(r, dict) or not isinstance(r.get("step"), (int, float)):
      raise ValueError(f"{what}: row {i} is not a metrics.jsonl row (a dict with a numeric 'step'): {str(r)[:200]}")
  return list(rows)


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
  """(steps, values) of metric `key` (as metrics.jsonl spells it) over the rows that have it, in step order; a step
  logged twice (a resumed run's log) keeps its last value."""
  by_step = {}
  for r in rows:
    if key in r and isinstance(r[key], (int, float)):
      by_step[int(r["step"])] = float(r[key])
  steps = sorted(by_step)
  return steps, [by_step[s] for s in steps]


def default_loss_terms(rows: list[dict]) -> tuple[str, ...]:
  """Each step kind's loss (`loss/<kind>`, sorted) then the methods' loss terms (`<method>/<term>` for the terms of
  any method's `console_terms`, in order of first appearance). Not `loss` itself: on an alternating schedule (CLIC
  and its CLIP steps) it switches between the kinds' losses from one log row to the next."""
  from compclip_jax import methods  # pylint: disable=import-outside-toplevel
  known = {t for m in methods.ALL for t in m.console_terms}
  keys = dict.fromkeys(k for r in rows for k in r)
  kinds = sorted(k for k in keys if k.startswith("loss/"))
  terms = [
      k for k in keys
      if k.count("/") == 1 and k.split("/")[0] not in ("loss", "eval", "data") and k.split("/")[1] in known
  ]
  return tuple(kinds + terms)


def _smooth(values: Sequence[float], window: int = SMOOTH) -> np.ndarray:
  """Centred running mean over `window` points (fewer at the ends, where the window is cut)."""
  v = np.asarray(values, np.float64)
  h = window // 2
  return np.array([v[max(0, i - h):i + h + 1].mean() for i in range(len(v))])


def retrieval_chance(rows: list[dict], k: int = RETRIEVAL_K) -> dict[str, float]:
  """{metric under eval/: chance R@k in 0..1} from the last eval row logging coco_retrieval's `images` / `texts`;
  {} when not logged. See the module docstring for the formulas."""
  n_img = series(rows, "eval/coco_retrieval/images")[1]
  n_txt = series(rows, "eval/coco_retrieval/texts")[1]
  out = {}
  if n_img and n_img[-1] >= 1:
    n = int(n_img[-1])
    out[f"coco_retrieval/image_retrieval_recall@{k}"] = min(1.0, k / n)
    if n_txt and int(n_txt[-1]) % n == 0 and n_txt[-1] >= k:
      t = int(n_txt[-1])
      c = t // n
      out[f"coco_retrieval/text_retrieval_recall@{k}"] = 1 - math.comb(t - c, k) / math.comb(t, k)
  return out


def _label_last_points(ax, points: list[tuple[float, float, str]]) -> None:
  """The value of each curve's last point [(step, value, colour)] written just right of it, labels pushed apart
  vertically (at least 4.5 % of the y range) so that curves ending close together stay readable."""
  lo, hi = ax.get_ylim()
  (x0, x1), gap = ax.get_xlim(), 0.045 * (hi - lo)
  placed = []
  for x, y, color in sorted(points, key=lambda p: p[1]):
    y_text = max(y, placed[-1] + gap) if placed else y
    placed.append(y_text)
    ax.text(x + 0.012 * (x1 - x0), y_text, f"{y:.1f}", color=color, fontsize=8, va="center")


def _curves_panel(ax, runs, metrics, chance, title: str, out: dict) -> None:
  """One panel of eval curves: each run of `runs` [(name, rows, linestyle)] × each metric [(metric under eval/, label,
  chance in 0..1 or None)]; `chance(metric, level)` → (name, level) of its chance line. Fills out["curves"/"chance"]."""
  drawn_chance, last = {}, []
  for j, (metric, label, level) in enumerate(metrics):
    color = COLORS[j % len(COLORS)]
    key = tag(f"eval/{metric}")
    for name, rows, style in runs:
      steps, values = series(rows, key)
      if not steps:
        continue  # this run did not evaluate this metric
      values = [100 * v for v in values]
      ax.plot(steps, values, style, color=color, marker="o", markersize=3, label=f"{name}: {label}")
      last.append((steps[-1], values[-1], color))
      out["curves"][f"{name}: {label}"] = (steps, values)
      if level is not None:
        drawn_chance.setdefault(chance(metric, level), []).append(color)
  for (name, level), colors in drawn_chance.items():
    # one line per chance level; in the metric's colour when only one metric has it, grey when several share it
    color = colors[0] if len(set(colors)) == 1 else "0.4"
    ax.axhline(100 * level, color=color, linestyle=":", linewidth=1.2, label=f"{name}: {100 * level:.1f}")
    out["chance"][name] = 100 * level
  ax.set(title=title, xlabel="training step", ylabel="%")
  ax.margins(x=0.1)  # room for the last points' value labels
  ax.xaxis.set_major_locator(_step_ticks())
  ax.grid(alpha=0.3)
  _label_last_points(ax, last)
  if ax.lines:
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, ncol=1, frameon=False)
  else:
    ax.text(0.5, 0.5, "not evaluated in these rows", ha="center", va="center", transform=ax.transAxes, color="0.4")


def plot_report(rows: list[dict], path: str, method: str, control_rows: list[dict] | None = None, control: str = "",
                loss_terms: tuple[str, ...] | None = None) -> dict:
  """One run's figure (14 × 8 in, 100 dpi PNG at `path`): its held-out compositional benchmarks (SugarCrepe swap and
  replace means, SugarCrepe++ swap ITT) and retrieval R@5 over training steps, in %, solid, with its control's
  (`control_rows`, called `control`, default "control") dashed in the same colour, a value label at each curve's
  last point and the chance levels (module docstring); and the method's loss terms over its log rows.

  rows / control_rows: metrics.jsonl rows (dicts with "step"); a metric a run did not log is left out.
  loss_terms: metrics.jsonl keys of the loss panel, in order (default `default_loss_terms(rows)`); one not logged is
  left out with a warning. Raw values faint, a centred running mean of SMOOTH log rows on top.

  Returns what was drawn: {"curves": {"<run>: <label>": (steps, values in %)}, "chance": {name: level in %},
  "losses": {key: (steps, raw values)}}.
  """
  rows = _check_rows(rows, f"{method} rows")
  runs = [(method, rows, "-")]
  if control_rows is not None:
    runs.append((control or "control", _check_rows(control_rows, f"{control or 'control'} rows"), "--"))
  if loss_terms is None:
    loss_terms = default_loss_terms(rows)
  out = {"curves": {}, "chance": {}, "losses": {}}
  ret_chance = retrieval_chance(rows)

  plt = _pyplot()
  fig = plt.figure(figsize=(14, 8), dpi=100, layout="constrained")
  grid = fig.add_gridspec(2, 2, width_ratios=(3, 2))
  ax_comp, ax_ret, ax_loss = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
  who = method + (f" (solid) vs {control or 'control'} (dashed)" if control_rows is not None else "")
  comp_chance = lambda metric, level: (CHANCE_NAMES[level], level)
  _curves_panel(ax_comp, runs, COMPOSITION, comp_chance, f"held-out pairings: compositional choices — {who}", out)
  ret = [(m, label, ret_chance.get(m)) for m, label in RETRIEVAL]
  direction = lambda metric: metric.split("/")[1].split("_")[0]  # image / text
  ret_chance_name = lambda metric, level: (f"chance {direction(metric)} R@{RETRIEVAL_K}", level)
  _curves_panel(ax_ret, runs, ret, ret_chance_name, "held-out pairings: retrieval R@5", out)

  for j, key in enumerate(loss_terms):
    steps, values = series(rows, tag(key))
    if not steps:
      logging.warning("plot_report: loss term %r is not in %s's metrics rows; left out", key, method)
      continue
    color = COLORS[j % len(COLORS)]
    ax_loss.plot(steps, values, color=color, alpha=0.25, linewidth=1)
    ax_loss.plot(steps, _smooth(values), color=color, linewidth=1.8, label=key)
    out["losses"][key] = (steps, values)
  ax_loss.set(title=f"{method}: training loss terms", xlabel="training step", ylabel="loss")
  ax_loss.xaxis.set_major_locator(_step_ticks())
  ax_loss.grid(alpha=0.3)
  if out["losses"]:
    ax_loss.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False,
                   title=f"faint: raw\nlines: running mean\nof {SMOOTH} log rows", title_fontsize=8)
  else:
    ax_loss.text(0.5, 0.5, "no loss terms logged", ha="center", va="center", transform=ax_loss.transAxes, color="0.4")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return out


def mean_std(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (ddof 1; 0 for one value) of `values` in 0..1, in %."""
  v = 100 * np.asarray(values, np.float64)
  return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def summary_chance(label: str) -> float | None:
  """The chance level (0..1) of a report row by its label (tables.REPORT_ROWS): 50 % for SugarCrepe's binary choices,
  1/3 for SugarCrepe++ ITT; None otherwise (TOT's three similarities share captions: no simple chance; retrieval:
  the test set's size is not in the summary)."""
  if label.startswith("SugarCrepe++"):
    return 1 / 3 if label.endswith("ITT") else None
  return 0.5 if label.startswith("SugarCrepe ") else None


def plot_summary(cols: dict[str, dict[str, list[float]]], path: str, labels: list[str] | None = None,
                 title: str = "") -> dict:
  """A seed sweep's bars (PNG at `path`, 14 × 6 in, 100 dpi): for each row label (x; `labels` picks and orders
  them, default every label in order of first appearance) one bar per column of `cols` (as `demo.sweep` returns it:
  {column: {label: [value per seed in 0..1]}}) at the mean over seeds with ± std error bars (ddof 1; none for one
  seed), each seed's value a dot on its bar, the mean written above the bar while there are at most
  SUMMARY_LABELS_MAX_BARS bars, and the chance level (`summary_chance`) across each row's group. A column without
  the label (or with no values) has no bar there.

  Returns {"bars": {(column, label): (mean %, std %, [value per seed in %])}, "chance": {label: level in %}}.
  """
  if not isinstance(cols, dict) or not all(isinstance(v, dict) for v in cols.values()):
    raise TypeError("plot_summary: cols must be {column: {row label: [value per seed]}} (as demo.sweep returns it)")
  names = list(cols)
  if labels is None:
    labels = list(dict.fromkeys(lab for n in names for lab in cols[n]))
  else:
    missing = [lab for lab in labels if not any(lab in cols[n] for n in names)]
    if missing:
      raise ValueError(f"plot_summary: no column has row(s) {missing}; known rows: "
                       f"{list(dict.fromkeys(lab for n in names for lab in cols[n]))}")
  out = {"bars": {}, "chance": {}}
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(14, 6), dpi=100, layout="constrained")
  width = 0.8 / max(1, len(names))
  n_bars = sum(1 for n in names for lab in labels if cols[n].get(lab))
  for i, n in enumerate(names):
    color = COLORS[i % len(COLORS)]
    first = True
    for j, lab in enumerate(labels):
      values = cols[n].get(lab)
      if not values:
        continue
      mean, std = mean_std(values)
      x = j + (i - (len(names) - 1) / 2) * width
      ax.bar(x, mean, width, yerr=std if len(values) > 1 else None, capsize=2, color=color, alpha=0.85,
             label=n if first else None, error_kw={"linewidth": 1})
      first = False
      seeds = 100 * np.asarray(values, np.float64)
      # dots spread across the bar (not stacked on one x) so equal seeds stay countable
      dx = np.linspace(-0.25, 0.25, len(seeds)) * width if len(seeds) > 1 else np.zeros(1)
      ax.scatter(x + dx, seeds, s=9, color="black", zorder=3, linewidths=0)
      if n_bars <= SUMMARY_LABELS_MAX_BARS:
        top = max(mean + std, float(seeds.max()))
        ax.annotate(f"{mean:.1f}", (x, top), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=6.5, rotation=90)
      out["bars"][(n, lab)] = (mean, std, seeds.tolist())
  for j, lab in enumerate(labels):
    level = summary_chance(lab)
    if level is not None:
      ax.hlines(100 * level, j - 0.45, j + 0.45, colors="0.25", linestyles=":", linewidth=1.2)
      out["chance"][lab] = 100 * level
  if out["chance"]:
    ax.plot([], [], color="0.25", linestyle=":", label="chance (SugarCrepe 50 %,\nSugarCrepe++ ITT 33.3 %)")
  ax.plot([], [], "o", color="black", markersize=3, label="one seed")
  ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
  ax.set_xlim(-0.6, len(labels) - 0.4)
  ax.set_ylim(0, 105)
  ax.set_ylabel("% (mean ± std over seeds)")
  ax.set_title(title or "synthetic world, held-out pairings: mean ± std over seeds (%)")
  ax.grid(axis="y", alpha=0.3)
  ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return out
