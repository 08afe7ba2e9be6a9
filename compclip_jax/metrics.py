"""Metrics: JSONL + TensorBoard events from process 0, a readable console line, and the NaN guard."""
from __future__ import annotations

import json
import logging
import math
import os
import time

import jax
import numpy as np


class NonFiniteLoss(FloatingPointError):
  pass


class MetricWriter:
  """Writes {step, metrics} to `workdir/metrics.jsonl` and TensorBoard (`workdir/tb`) on process 0 only."""

  def __init__(self, workdir: str, total_steps: int, global_batch: int, flops_per_step: float | None = None,
               peak_flops: float | None = None):
    self.primary = jax.process_index() == 0
    self.total, self.batch = total_steps, global_batch
    self.flops, self.peak = flops_per_step, peak_flops
    self._t0, self._s0 = time.perf_counter(), None
    self._jsonl = self._tb = None
    if self.primary:
      os.makedirs(workdir, exist_ok=True)
      self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")  # pylint: disable=consider-using-with
      try:
        from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
        self._tb = SummaryWriter(os.path.join(workdir, "tb"))
      except ImportError:
        logging.warning("tensorboardX not installed: no TensorBoard events (metrics.jsonl is still written)")

  def write(self, step: int, metrics: dict, console: bool = True, rate: bool = True) -> dict:
    """Host values of `metrics` at `step` (raises NonFiniteLoss on a NaN/Inf loss); returns what was written.

    `rate=False` for writes that are not training progress (evaluations): they do not move the throughput clock.
    """
    values = {k: float(np.asarray(v)) if np.ndim(v) == 0 else np.asarray(v).tolist() for k, v in metrics.items()}
    if "loss" in values:
      self.check_finite(step, values["loss"])
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
  def check_finite(step: int, loss) -> None:
    loss = float(np.asarray(loss))
    if not math.isfinite(loss):
      raise NonFiniteLoss(f"loss is {loss} at step {step}: stopping. The last good checkpoint is kept; lower the "
                          "learning rate or inspect the data of this step (metrics.jsonl has the last values).")

  def line(self, step: int, v: dict) -> str:
    parts = [f"step {step}/{self.total}"]
    parts += [f"{k} {v[k]:.4f}" for k in sorted(v) if k == "loss" or k.startswith("loss/") or "/" in k and
              k.split("/")[1] in ("cont", "sneg", "uni", "con", "rec", "align")]
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
