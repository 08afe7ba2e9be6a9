"""bf16 mixed precision against fp32 on the synthetic-world demo: the demo's CLIC and READ fine-tuning runs (their
`:demo` configs, the shipped starting point, seeds 0, 1, 2) once with `model.compute_dtype=float32` (the demo's
precision) and once with `bfloat16` (the recipes' precision), the same data, steps and starting point; each run's
loss curve and final held-out evaluation → docs/measured/precision_demo.json, which docs/training.md's precision table
and docs/precision_demo.png are drawn from (tools/doc_figures.py).

  python tools/precision_demo.py run runs/precision [--seeds=0,1,2]   # the 12 runs, then `collect`
  python tools/precision_demo.py collect runs/precision --seconds=N   # the record from a finished workdir
  python tools/precision_demo.py plot                                 # docs/precision_demo.png from the record
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RECORD = os.path.join(ROOT, "docs", "measured", "precision_demo.json")
FIGURE = os.path.join(ROOT, "docs", "precision_demo.png")
METHODS = ("clic", "read")
DTYPES = ("float32", "bfloat16")
ROWS = ("SugarCrepe swap (mean)", "SugarCrepe++ swap ITT", "retrieval image R@5", "retrieval text R@5")


def _runs(workdir: str, seeds: list[int]) -> None:
  from compclip_jax.demo import run as demo  # pylint: disable=import-outside-toplevel
  for seed in seeds:
    for method in METHODS:
      for dtype in DTYPES:
        c = demo.demo_config(method)
        c.seed, c.model.compute_dtype = seed, dtype
        demo.run(c, os.path.join(workdir, f"seed{seed}"), f"{method}_{dtype}")


def _rows(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f]


def collect(workdir: str, seeds: list[int], seconds: float, command: str) -> dict:
  """Each run's loss at its log points and its final evaluation (tables.before_after's rows in ROWS) → the record."""
  import jax  # pylint: disable=import-outside-toplevel
  from compclip_jax.demo import tables  # pylint: disable=import-outside-toplevel
  runs = {}
  for seed in seeds:
    for method in METHODS:
      for dtype in DTYPES:
        path = os.path.join(workdir, f"seed{seed}", f"{method}_{dtype}", "metrics.jsonl")
        if not os.path.exists(path):
          sys.exit(f"{path} not found: run `python tools/precision_demo.py run {workdir}` first")
        rows = _rows(path)
        final = tables.before_after(rows)
        runs.setdefault(method, {}).setdefault(dtype, {})[str(seed)] = {
            "loss": [[m["step"], m["loss"]] for m in rows if "lr" in m],
            "final": {k: final[k][1] for k in ROWS},
        }
  record = {
      "what": "the demo's CLIC and READ runs in fp32 and in bf16 mixed precision: loss curves, final held-out results",
      "command": command, "machine": f"{os.cpu_count()} CPU cores ({platform.machine()})",
      "date": datetime.date.today().isoformat(),
      "versions": {"jax": jax.__version__, "python": platform.python_version()},
      "source": "tools/precision_demo.py", "figures": {"seconds": round(seconds), "seeds": seeds, "runs": runs,
                                                       "summary": summary(runs)}
  }
  with open(RECORD, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  return record


def summary(runs: dict) -> dict:
  """Per method: the largest relative loss difference after warm-up (log points past the first), and per ROWS row
  the fp32 mean and seed standard deviation, the bf16 mean, and the largest per-seed |bf16 − fp32| (points, %)."""
  out = {}
  for method, by_dtype in runs.items():
    fp32, bf16 = by_dtype["float32"], by_dtype["bfloat16"]
    rel = [abs(b - a) / abs(a) for s in fp32 for (_, a), (_, b) in zip(fp32[s]["loss"][1:], bf16[s]["loss"][1:])]
    rows = {}
    for k in ROWS:
      a = [100 * fp32[s]["final"][k] for s in sorted(fp32)]
      b = [100 * bf16[s]["final"][k] for s in sorted(fp32)]
      rows[k] = {"fp32_mean": statistics.mean(a), "fp32_std": statistics.stdev(a) if len(a) > 1 else 0.0,
                 "bf16_mean": statistics.mean(b), "max_seed_diff": max(abs(x - y) for x, y in zip(a, b))}
    out[method] = {"max_rel_loss_diff": max(rel), "mean_rel_loss_diff": statistics.mean(rel), "rows": rows}
  return out


def plot() -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  with open(RECORD) as f:
    runs = json.load(f)["figures"]["runs"]
  fig, axes = plt.subplots(1, len(METHODS), figsize=(5 * len(METHODS), 3.4))
  for ax, method in zip(axes, METHODS):
    for dtype, style in zip(DTYPES, ("-", "--")):
      for seed, run in sorted(runs[method][dtype].items()):
        steps, losses = zip(*run["loss"])
        ax.plot(steps, losses, style, color=f"C{seed}", label=f"{dtype}, seed {seed}")
    ax.set(title=f"{method} (:demo)", xlabel="step", ylabel="training loss")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(FIGURE, dpi=110)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("action", choices=("run", "collect", "plot"))
  p.add_argument("workdir", nargs="?")
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--seconds", type=float, default=0.0)
  a = p.parse_args()
  seeds = [int(s) for s in a.seeds.split(",")]
  if a.action != "plot" and not a.workdir:
    p.error(f"{a.action} needs the workdir")
  command = f"python tools/precision_demo.py run {a.workdir} --seeds={a.seeds}"
  if a.action == "run":
    t = time.time()
    _runs(a.workdir, seeds)
    collect(a.workdir, seeds, time.time() - t, command)
    plot()
  elif a.action == "collect":
    collect(a.workdir, seeds, a.seconds, command)
    plot()
  else:
    plot()


if __name__ == "__main__":
  main()
