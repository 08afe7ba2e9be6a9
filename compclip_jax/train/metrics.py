"""Metrics: JSONL + TensorBoard events from process 0, a readable console line, and the NaN/Inf guard.

After a resume from step S the log continues cleanly: lines of metrics.jsonl past S (written between the checkpoint
and the interruption, and about to be written again) move to metrics.dropped.jsonl (nothing is lost), the file is
rewritten atomically, and a marker line {"step": S, "event": "resumed", "dropped": n} follows; TensorBoard purges
events past S (tensorboardX `purge_step`). A fresh start (S = 0) moves every earlier line away the same way.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import time

import jax
import numpy as np


class NonFiniteLoss(FloatingPointError):
  """The loss, the gradient norm or the parameter norm is NaN/Inf: the state must not be checkpointed. The command
  exits with `exit_code` 3 (the last good checkpoint is kept)."""
  exit_code = 3


GUARDED = ("loss", "grad_norm", "param_norm")  # checked before every checkpoint and at every log line
_ILLEGAL = re.compile(r"[^-/\w.]")  # what TensorBoard accepts in a tag; it renames others with a warning


def tag(name: str) -> str:
  """A metric name as written to both metrics.jsonl and TensorBoard: `recall@5` → `recall_at_5`, any other character
  TensorBoard calls illegal → `_` (so the two logs use the same names and TensorBoard renames nothing)."""
  return _ILLEGAL.sub("_", name.replace("@", "_at_"))


def flat_hparams(config: dict, prefix: str = "") -> dict[str, int | float | str | bool]:
  """A nested config dict → {dotted.key: value} with the types TensorBoard's hparams take (others as str)."""
  out = {}
  for k, v in config.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(flat_hparams(v, key + "."))
    else:
      out[key] = v if isinstance(v, (int, float, str, bool)) else str(v)
  return out


def _truncate_after(path: str, step: int) -> int:
  """Keeps the lines of the JSONL `path` with "step" ≤ `step` (none when `step` is 0), appending the others to
  `<name>.dropped.jsonl`; atomic (temp file + rename). Returns how many lines were moved."""
  if not os.path.exists(path):
    return 0
  keep, drop = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      if not line.strip():
        continue
      try:
        s = json.loads(line).get("step", 0)
      except ValueError:  # a half-written last line of a killed run
        drop.append(line if line.endswith("\n") else line + "\n")
        continue
      (keep if step > 0 and s <= step else drop).append(line if line.endswith("\n") else line + "\n")
  if drop:
    with open(path.removesuffix(".jsonl") + ".dropped.jsonl", "a", encoding="utf-8") as f:
      f.writelines(drop)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
      f.writelines(keep)
    os.replace(tmp, path)
  return len(drop)


class MetricWriter:
  """Writes {step, metrics} to `workdir/metrics.jsonl` and TensorBoard (`workdir/tb`) on process 0 only.

  `console_terms`: the loss terms the console line shows besides `loss` and `loss/<kind>` — metric `x/<term>` for
  each (the method's `console_terms`, e.g. a term `cont` shows the metric `<prefix>/cont`).
  """
  def __init__(self, workdir: str, total_steps: int, global_batch: int, flops_per_step: float | None = None,
               peak_flops: float | None = None, start_step: int = 0, hparams: dict | None = None,
               console_terms: tuple[str, ...] = ()):
    self.primary = jax.process_index() == 0
    self.total, self.batch = total_steps, global_batch
    self.flops, self.peak = flops_per_step, peak_flops
    self.console_terms = tuple(console_terms)
    self._t0, self._s0 = time.perf_counter(), None
    self._jsonl = self._tb = None
    if self.primary:
      os.makedirs(workdir, exist_ok=True)
      path = os.path.join(workdir, "metrics.jsonl")
      dropped = _truncate_after(path, start_step)
      if dropped:
        logging.warning(
            "metrics.jsonl: %d line(s) past step %d (from before the restart) moved to "
            "metrics.dropped.jsonl", dropped, start_step)
      self._jsonl = open(path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
      if start_step:
        self._jsonl.write(json.dumps({"step": start_step, "event": "resumed", "dropped": dropped}) + "\n")
        self._jsonl.flush()
      try:
        from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
        self._tb = SummaryWriter(os.path.join(workdir, "tb"), purge_step=start_step + 1 if start_step else 0)
      except ImportError:
        logging.warning("tensorboardX not installed: no TensorBoard events (metrics.jsonl is still written)")
      if self._tb and hparams:  # the run's config in TensorBoard's HPARAMS tab, in the run's own event file
        from tensorboardX.summary import hparams as hp_summary  # pylint: disable=import-outside-toplevel
        for summary in hp_summary(flat_hparams(hparams), {"loss": 0.0}):
          self._tb.file_writer.add_summary(summary)

  def set_flops(self, flops_per_step: float | None) -> None:
    """XLA's FLOPs of one training step (known once the steps are compiled; None: no MFU on the console)."""
    self.flops = flops_per_step

  def write(self, step: int, metrics: dict, console: bool = True, rate: bool = True) -> dict:
    """Host values of `metrics` at `step` (raises NonFiniteLoss on a NaN/Inf of GUARDED); returns what was written.

    `rate=False` for writes that are not training progress (evaluations): they do not move the throughput clock.
    """
    values = {tag(k): float(np.asarray(v)) if np.ndim(v) == 0 else np.asarray(v).tolist() for k, v in metrics.items()}
    self.check_finite(step, values)
    now = time.perf_counter()
    if not rate:
      pass
    elif self._s0 is None:
      self._s0, self._t0 = step, now
    elif step > self._s0:
      rate = (step - self._s0) / (now - self._t0)
      values["steps_per_s"] = rate
      values["samples_per_s"] = rate * self.batch
      if self.flops and self.peak:
        values["mfu"] = rate * self.flops / self.peak
    if self.primary:
      self._jsonl.write(json.dumps({"step": step, **values}) + "\n")
      self._jsonl.flush()
      if self._tb:
        for k, v in values.items():
          if isinstance(v, float):
            self._tb.add_scalar(k, v, step)
      if console:
        print(self.line(step, values), flush=True)
    return values

  @staticmethod
  def check_finite(step: int, values: dict) -> None:
    """Raises NonFiniteLoss when any of GUARDED in `values` is NaN/Inf: a finite loss can come with parameters
    that already overflowed (the loss is computed before the update, the parameter norm after it)."""
    for name in GUARDED:
      if name in values and not math.isfinite(v := float(np.asarray(values[name]))):
        raise NonFiniteLoss(f"{name} is {v} at step {step}: stopping. The last good checkpoint is kept; lower the "
                            "learning rate or inspect the data of this step (metrics.jsonl has the last values).")

  def line(self, step: int, v: dict) -> str:
    parts = [f"step {step}/{self.total}"]
    parts += [
        f"{k} {v[k]:.4f}" for k in sorted(v)
        if k == "loss" or k.startswith("loss/") or "/" in k and k.split("/")[1] in self.console_terms
    ]
    if "lr" in v:
      parts.append(f"lr {v['lr']:.2e}")
    if "samples_per_s" in v:
      eta = (self.total - step) / max(v["steps_per_s"], 1e-9)
      parts.append(f"{v['samples_per_s']:.1f} samples/s, ETA {eta / 60:.1f} min")
    if "mfu" in v:
      parts.append(f"MFU {100 * v['mfu']:.1f}%")
    return " | ".join(parts)

  def close(self) -> None:
    if self._jsonl:
      self._jsonl.close()
    if self._tb:
      self._tb.close()
