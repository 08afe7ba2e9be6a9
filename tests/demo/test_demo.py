"""The demo's entry point (python -m compclip_jax.demo) on a tiny world: world → pretraining from scratch (three
stages) → the method (its control first: tests/cli/test_colab.py) → report, the world written once and shared by its
runs; and main.py pointing a `:demo` config at it."""
import json
import os
import subprocess
import sys

import pytest

from tests import paths
from compclip_jax.demo import run as demo

ROOT = paths.ROOT
ENV = {**os.environ, "PYTHONPATH": ROOT}
TINY = [
    "--from_scratch", "--collage_steps=2", "--binding_steps=2", "--text_steps=2", "--pretrain_batch=8",
    "--config.data.synthetic_size=24", "--config.evals.synthetic_size=12", "--config.data.image_size=32",
    "--config.batch_size=8", "--config.total_steps=2", "--config.evals.every_steps=0", "--config.log_every=1",
    "--config.checkpoint.every_steps=2"
]


@pytest.mark.slow
def test_demo_entry_point_runs_one_method_on_a_tiny_world(tmp_path):
  # --no_control: the control-first order is the Colab demo notebook's test (tests/cli/test_colab.py); one run less here
  out = subprocess.run([
      sys.executable, "-m", "compclip_jax.demo", "--method=clic", "--no_control", f"--workdir={tmp_path}", *TINY
  ], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  assert "| clic on the synthetic world" in out.stdout and (tmp_path / "report_clic.md").exists()
  assert (tmp_path / "report_clic.png").stat().st_size > 10_000
  pretrained = tmp_path / "pretrained"
  for stage in ("collages", "binding", "text"):
    assert (pretrained / stage / "export" / "hf" / "model.safetensors").exists(), stage
  # one world for pretraining and fine-tuning, of the config's size and seed (no per-run copies), and its
  # bag-of-words captions (the same images) for the text stage
  assert json.load(open(tmp_path / "world" / "world.json"))["size"] == 24
  assert json.load(open(tmp_path / "world_bag" / "world.json"))["binding_noise"] == 0.5
  assert not (pretrained / "world").exists() and not (tmp_path / "clic" / "world").exists()
  stages = {k: json.load(open(pretrained / k / "config.json")) for k in ("binding", "text")}
  assert stages["binding"]["method"] == "negclip" and stages["binding"]["optim"]["trainable"] == [".*"]
  assert stages["text"]["optim"]["frozen"] == [r"vision_model\..*", r"visual_projection\..*"]
  ran = json.load(open(tmp_path / "clic" / "config.json"))
  assert ran["data"]["source"] == "synthetic" and ran["data"]["path"] == str(tmp_path / "world")
  assert ran["model"]["init"] == str(pretrained / "text" / "export" / "hf") and ran["total_steps"] == 2
  assert not (tmp_path / "clip").exists()  # no control was asked for


def test_demo_cli_rejects_bad_overrides_and_main_points_at_it(tmp_path):
  cli = lambda *a: subprocess.run([sys.executable, "-m", "compclip_jax.demo", f"--workdir={tmp_path}", *a], cwd=ROOT,
                                  env=ENV, capture_output=True, text=True, timeout=300)
  for args, says in ((["--method=clic", "--config.no_such_key=1"], "--config.no_such_key: no such config key"),
                     (["--method=nope"], "no config named 'nope'")):
    out = cli(*args)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr
  c = demo.demo_config("clip_all")
  assert c.method == "clip" and not c.optim.frozen  # the control trains all of CLIP
  demo.override(c, "optim.lr=3e-4")
  demo.override(c, "evals.benchmarks=('sugarcrepe',)")
  assert c.optim.lr == 3e-4 and tuple(c.evals.benchmarks) == ("sugarcrepe",)
  out = subprocess.run([
      sys.executable, "-m", "compclip_jax.main", "--config=configs/read.py:demo", f"--workdir={tmp_path}"
  ], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert out.returncode == 2 and "python -m compclip_jax.demo --method=read" in out.stderr
  assert not os.listdir(tmp_path)  # nothing trained or written


def test_diagnose_refuses_what_is_not_a_clip_checkpoint(tmp_path):
  (tmp_path / "empty").mkdir()
  for target in (tmp_path / "empty", tmp_path / "missing"):
    out = subprocess.run([
        sys.executable, "-m", "compclip_jax.demo", f"--diagnose={target}", f"--workdir={tmp_path / 'w'}"
    ], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and str(target) in out.stderr and "Traceback" not in out.stderr, out.stderr
  assert not (tmp_path / "w").exists()  # nothing written
