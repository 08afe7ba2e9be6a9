"""metrics.jsonl after a resume (no duplicate steps, nothing lost), the NaN/Inf guard on the norms, and which step's
lr/grad_norm/param_norm a log line shows. Unit tests: no training."""
import json

import numpy as np
import pytest

from compclip_jax.train import loop as train
from compclip_jax.train.metrics import MetricWriter, NonFiniteLoss


def _lines(path):
  return [json.loads(line) for line in path.read_text().splitlines()]


def _write_steps(tmp_path, steps):
  with open(tmp_path / "metrics.jsonl", "w", encoding="utf-8") as f:
    for s in steps:
      f.write(json.dumps({"step": s, "loss": float(s)}) + "\n")
    f.write('{"step": 9, "lo')  # the half-written last line of a killed run


def test_resume_drops_the_lines_past_the_checkpoint_into_a_side_file(tmp_path):
  _write_steps(tmp_path, [0, 2, 4, 6, 8])
  w = MetricWriter(str(tmp_path), 10, 8, start_step=4)
  w.write(6, {"loss": 0.5}, console=False)
  w.close()
  got = _lines(tmp_path / "metrics.jsonl")
  assert [m["step"] for m in got] == [0, 2, 4, 4, 6]
  assert got[3] == {"step": 4, "event": "resumed", "dropped": 3}
  assert got[4]["loss"] == 0.5
  dropped = (tmp_path / "metrics.dropped.jsonl").read_text().splitlines()
  assert [json.loads(x)["step"] for x in dropped[:2]] == [6, 8] and dropped[2] == '{"step": 9, "lo'
  logged = [m["step"] for m in got if "loss" in m]
  assert logged == sorted(set(logged))  # no step twice


def test_a_fresh_start_moves_every_earlier_line_away(tmp_path):
  _write_steps(tmp_path, [0, 2])
  MetricWriter(str(tmp_path), 10, 8, start_step=0).close()
  assert (tmp_path / "metrics.jsonl").read_text() == ""
  assert len((tmp_path / "metrics.dropped.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("name", ["loss", "grad_norm", "param_norm"])
def test_the_guard_checks_the_norms_too(name):
  values = {"loss": 2.0, "grad_norm": 1.0, "param_norm": 10.0, name: np.float32(np.inf)}
  with pytest.raises(NonFiniteLoss, match=f"{name} is inf at step 3"):
    MetricWriter.check_finite(3, values)
  MetricWriter.check_finite(3, {"loss": 2.0, "grad_norm": 1.0, "param_norm": 10.0, "other": float("nan")})


def test_a_log_line_shows_this_steps_lr_whatever_order_the_kinds_were_seen_in():
  """After a resume at a CLIP step of CLIC, `recent` holds clic_clip first; the line at a CLIP step must still show
  that step's lr, grad_norm and param_norm (before: the CLIC step's, one step older)."""
  clip_step = {"loss": 1.0, "lr": 5e-5, "grad_norm": 0.5, "param_norm": 20.0}
  clic_step = {"loss": 2.0, "lr": 6e-5, "grad_norm": 0.7, "param_norm": 19.0}
  log_dict = train._log_dict  # pylint: disable=protected-access
  out = log_dict({"clic_clip": clip_step, "clic": clic_step}, "clic_clip", {})
  assert (out["loss"], out["lr"], out["grad_norm"], out["param_norm"]) == (1.0, 5e-5, 0.5, 20.0)
  assert out["loss/clic"] == 2.0 and out["loss/clic_clip"] == 1.0
  out = log_dict({"clic": clic_step, "clic_clip": clip_step}, "clic", {})
  assert out["lr"] == 6e-5
