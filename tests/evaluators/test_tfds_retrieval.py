"""COCO retrieval from TFDS `coco_captions` (split test, the Karpathy test set) scores as from the Karpathy JSON and
its image folder: the same images and captions, read through `ImageRef.read`, by the real encoder; the CLI's flags."""
import os
import subprocess
import sys

import pytest

from tests import paths
from tests import tfds_fixtures as tf_fix
from compclip_jax.evaluators.run import run_benchmarks


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("coco")
  data_dir, karpathy, root, _ = tf_fix.write_coco_captions(tmp, n=40, broken=False)
  (tmp / "bench" / "retrieval").mkdir(parents=True)
  (tmp / "bench" / "retrieval" / "coco_test.json").write_text(karpathy.read_text())
  return data_dir, tmp / "bench", root


def test_tfds_retrieval_equals_the_json_path(coco, tmp_path):
  from tests import hf_fixtures as fx
  from compclip_jax.evaluators.encoding import Encoder
  from compclip_jax.weights.loading import load_clip
  fx.random_hf_clip(fx.hf_clip_config(), seed=3).save_pretrained(tmp_path / "model")
  enc = Encoder(*load_clip(str(tmp_path / "model")), batch_size=16)
  data_dir, bench, root = coco
  files = run_benchmarks(enc, ["coco_retrieval"], str(bench), str(root))["coco_retrieval"]
  tfds = run_benchmarks(enc, ["coco_retrieval"], "", "",
                        tfds={"coco_retrieval": (tf_fix.COCO_NAME, str(data_dir))})["coco_retrieval"]
  drop = lambda m: {k: v for k, v in m.items() if k != "seconds"}
  assert drop(tfds["metrics"]) == drop(files["metrics"])
  assert tfds["metrics"]["images"] == 8 and tfds["metrics"]["texts"] == 40  # 41 images, every 5th in test
  assert files["skipped_images"] == tfds["skipped_images"] == []
  assert "tensorflow" not in sys.modules


@pytest.mark.parametrize("flags,expect", [
    (["--coco_tfds=coco_captions/2014:1.1.0"], "--coco_tfds needs --tfds_data_dir"),
    (["--tfds_data_dir=/x"], "no benchmark reads TFDS"),
    (["--coco_tfds=coco_captions/2014", "--tfds_data_dir=DIR"], "give its version too"),
    (["--coco_tfds=coco_captions/2014:2.0.0", "--tfds_data_dir=DIR"], r"holds ['1.1.0']"),
])
def test_cli_mistakes_are_one_line(coco, tmp_path, flags, expect):
  flags = [f.replace("DIR", str(coco[0])) for f in flags]
  proc = subprocess.run([
      sys.executable, "-m", "compclip_jax", "evaluate", "--model=m", f"--output={tmp_path / 'o'}",
      "--benchmark=coco_retrieval"
  ] + flags, cwd=paths.ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": paths.ROOT})
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and expect in lines[0], proc.stderr
  assert not (tmp_path / "o").exists()
