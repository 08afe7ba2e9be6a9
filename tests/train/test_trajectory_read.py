"""A whole READ training run of ours equals the official reference code's (github.com/JiH00nKw0n/READ-CLIP): 50
optimiser steps from the same weights on the same batches, compared step by step and weight by weight.

The fixture (tests/fixtures/reference/trajectory_read/, made by tools/trajectory_read.py `make`; its README says how)
holds the reference's own batches — its collator's captions, spaCy negatives, paraphrases, T5 targets and images, in
our layouts — its per-step loss terms, learning rate, logit scale and gradient norm, the initial weights (an HF CLIP
and an HF T5 directory, read here by our own import code; W as the reference drew it) and its weights at steps 10 and
50. Nothing of the reference, and no torch, runs here.

Ours is `train.loop.run` on configs/read.py's recipe, changed only in size, steps, data path and initial weights, and
in two settings both sides share for the comparison: fp32 throughout (the reference's bf16 off; our frozen decoder
stored fp32, not bf16) and a decoder without dropout (its random config's dropout_rate 0: torch's and JAX's random
streams cannot match). It runs in a subprocess on one CPU device: the reference's epochs end in a partial batch (198
records, batch 8: 6 rows at steps 25 and 50), which 8 devices cannot shard.
"""
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import paths

FIX = os.path.join(paths.FIXTURES, "reference", "trajectory_read")
LOSS_RTOL, LR_RTOL, SCALE_ATOL, GRAD_RTOL, WEIGHT_RATIO = 1e-4, 1e-5, 1e-5, 1e-4, 1e-3
# The attention's key bias gets no gradient in exact arithmetic (q·b_k is the same for every key of a query, and the
# softmax ignores a shift): on both sides its gradient is rounding noise, so its changes are noise in unrelated
# directions, not comparable; the test checks that both sides move it far less than anything else.
NO_GRADIENT = re.compile(r".*self_attn\.k_proj\.bias")
TERMS = {"loss": "loss", "con": "read/con", "rec": "read/rec", "align": "read/align"}  # theirs → our metric names
CHECKPOINTS = (10, 50)

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------------------------------ fixtures
def series() -> tuple[dict, list[dict]]:
  with open(os.path.join(FIX, "series.json")) as f:
    d = json.load(f)
  return d["meta"], d["series"]


def reference_batches() -> list[dict]:
  """The reference's batches in step order, in our READ layout (image uint8, ids, neg_valid, para_ids, t5_target)."""
  with np.load(os.path.join(FIX, "batches.npz")) as d:
    cuts = np.cumsum(d["sizes"])[:-1]
    arrays = {k: np.split(d[k], cuts) for k in d.files if k != "sizes"}
  return [{k: v[i] for k, v in arrays.items()} for i in range(len(cuts) + 1)]


def config(workdir: str):
  """configs/read.py's recipe at the fixture's size (the same data, batch, epochs and warm-up as the reference run)."""
  from compclip_jax import assets
  from configs import read
  meta, _ = series()
  c = read.get_config()
  c.model.init = os.path.join(FIX, "clip")
  c.model.compute_dtype = c.model.frozen_dtype = "float32"  # bf16 autocast off on both sides: fp32 throughout
  c.model.attention = "explicit"  # the parity-tested numerics
  c.read.t5.init = os.path.join(FIX, "t5")
  c.read.t5.tokenizer = assets.SYNTHETIC_SPIECE  # the one the reference's collator used (not copied into the fixture)
  c.read.export_decoder = True  # the frozen decoder written back at the end: bit for bit the initial one
  c.read.overlapping_swaps = True  # the reference's negatives (unused here: the batches are the reference's own)
  c.data.path = os.path.join(FIX, "dataset_coco.json")
  c.data.image_root = os.path.join(workdir, "images")  # never read: the batches are given
  c.batch_size, c.num_epochs, c.total_steps = meta["data"]["batch"], float(meta["data"]["epochs"]), 0
  c.optim.warmup_steps = meta["warmup_steps"]
  c.log_every, c.evals.benchmarks = 1, ()
  c.checkpoint.every_steps, c.checkpoint.keep = 10, 10
  c.export.hf = False
  return c


def run_ours(workdir: str) -> None:
  """Our trainer on the fixture, in this process (`run_ours_on_one_device` runs it in a subprocess). W starts as the
  reference's (its nn.Linear draw): `read.proj_init`'s initialiser replaced by one that returns it."""
  from compclip_jax.methods.read import model
  from compclip_jax.train import loop
  os.makedirs(os.path.join(workdir, "images"), exist_ok=True)
  with np.load(os.path.join(FIX, "weights_ref.npz")) as d:
    w0 = d["proj_init"]  # [out, in], torch's layout (and our stored one)
  model.proj_init = lambda name: (lambda key, shape: w0.T)  # called as [in, out], as every kernel initialiser is
  loop.run(config(workdir), workdir, batches={"read": reference_batches()})


def metrics(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if "loss" in r]


def our_checkpoint(workdir: str, step: int) -> dict[str, np.ndarray]:
  """{our parameter path: array} of the trainable parameters in checkpoint `step`."""
  import orbax.checkpoint as ocp
  tree = ocp.StandardCheckpointer().restore(os.path.join(workdir, "checkpoints", str(step), "default"))
  out = {}

  def walk(prefix, x):
    if isinstance(x, dict) and "value" in x and not isinstance(x["value"], dict):
      out[prefix] = np.asarray(x["value"])
    elif isinstance(x, dict):
      for k, v in x.items():
        walk(f"{prefix}.{k}" if prefix else str(k), v)

  walk("", tree["trainable"])
  return out


def reference_weights(step: int, tmp: str) -> dict[str, np.ndarray]:
  """The reference's trainable weights at `step` in our names and layouts: its HF CLIP tensors (initial + recorded
  difference) written as an HF directory and read back by our import (weights/loading.py), and W."""
  import shutil

  from safetensors.numpy import load_file, save_file

  from compclip_jax.weights import loading
  with np.load(os.path.join(FIX, "weights_ref.npz")) as d:
    deltas = {k.split("/", 1)[1]: d[k] for k in d.files if k.startswith(f"{step}/")}
    w0 = d["proj_init"]
  init = load_file(os.path.join(FIX, "clip", "model.safetensors"))
  directory = os.path.join(tmp, f"reference_{step}")
  os.makedirs(directory, exist_ok=True)
  shutil.copyfile(os.path.join(FIX, "clip", "config.json"), os.path.join(directory, "config.json"))
  save_file({n: np.asarray(v + deltas.get(f"clip.{n}", 0), v.dtype) for n, v in init.items()},
            os.path.join(directory, "model.safetensors"))
  _, flat, _, _, _ = loading.load_clip_params(directory)
  return {**{f"clip.{k}": v for k, v in flat.items()}, "proj.kernel": w0 + deltas["decoder_text_projection.weight"]}


def initial_weights(tmp: str) -> dict[str, np.ndarray]:
  from compclip_jax.weights import loading
  del tmp
  _, flat, _, _, _ = loading.load_clip_params(os.path.join(FIX, "clip"))
  with np.load(os.path.join(FIX, "weights_ref.npz")) as d:
    return {**{f"clip.{k}": v for k, v in flat.items()}, "proj.kernel": d["proj_init"]}


def _norm(x) -> float:
  return float(np.linalg.norm(np.asarray(x, np.float64)))


def weight_ratios(workdir: str, step: int, tmp: str) -> dict[str, dict[str, float]]:
  """Per trainable tensor at `step`: ratio ‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖, and ulps ‖θ_ours − θ_ref‖ / ‖spacing
  of float32 at θ_ref‖ (how many float32 steps apart the two are: a tensor that barely moves, as the logit scale,
  can be a step apart for a ratio over 1e-3), and the norms of both sides' changes."""
  ours, ref, init = our_checkpoint(workdir, step), reference_weights(step, tmp), initial_weights(tmp)
  assert set(ours) == set(ref), (sorted(set(ours) ^ set(ref)))
  return {
      k: {
          "ratio": _norm(ours[k] - ref[k]) / _norm(ref[k] - init[k]),
          "ulps": _norm(ours[k] - ref[k]) / _norm(np.spacing(ref[k].astype(np.float32))),
          "moved_ours": _norm(ours[k] - init[k]), "moved_ref": _norm(ref[k] - init[k])
      } for k in sorted(ours)
  }


def compare(workdir: str, tmp: str) -> dict:
  """Every comparison the test makes, as figures (the plot mode of tools/trajectory_read.py writes them)."""
  meta, ref = series()
  ours = metrics(workdir)
  out = {"steps": {"ours": len(ours), "theirs": len(ref)}, "loss_rel": {}, "per_step": {}}
  n = min(len(ours), len(ref))
  for theirs_name, our_name in TERMS.items():
    a = np.array([o[our_name] for o in ours[:n]])
    b = np.array([r[theirs_name] for r in ref[:n]])
    out["per_step"][theirs_name] = {"ours": a.tolist(), "theirs": b.tolist()}
    out["loss_rel"][theirs_name] = (np.abs(a - b) / np.abs(b)).tolist()
  lr_a, lr_b = np.array([o["lr"] for o in ours[:n]]), np.array([r["lr"] for r in ref[:n]])
  out["lr_rel"] = (np.abs(lr_a - lr_b) / np.maximum(np.abs(lr_b), 1e-30) * (lr_b != 0) +
                   (lr_b == 0) * np.abs(lr_a)).tolist()
  out["logit_scale_abs"] = [abs(o["read/logit_scale"] - r["logit_scale"]) for o, r in zip(ours, ref)]
  out["grad_norm_rel"] = [abs(o["grad_norm"] - r["grad_norm"]) / r["grad_norm"] for o, r in zip(ours, ref)]
  out["weight_ratio"] = {s: weight_ratios(workdir, s, tmp) for s in CHECKPOINTS}
  out["steps_rule"] = meta["steps"]
  return out


# ---------------------------------------------------------------------------------------------------------- test
def run_ours_on_one_device(workdir: str, prelude: str = "") -> float:
  """`run_ours` in a subprocess on one CPU device (the conftest's 8 cannot shard the reference's partial batches of
  6), after `prelude` (Python, e.g. a patch of this module's `config`). → seconds."""
  env = dict(os.environ, XLA_FLAGS=paths.xla_flags(1), JAX_PLATFORMS="cpu")
  code = f"import sys\nimport tests.train.test_trajectory_read as T\n{prelude}\nT.run_ours(sys.argv[1])"
  start = time.time()
  done = subprocess.run([sys.executable, "-c", code, workdir], cwd=paths.ROOT, env=env, capture_output=True, text=True,
                        timeout=600)
  assert done.returncode == 0, done.stderr[-5000:]
  return time.time() - start


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
  """Our run on the fixture, once for the module. → (workdir, seconds)."""
  workdir = str(tmp_path_factory.mktemp("trajectory_read"))
  return workdir, run_ours_on_one_device(workdir)


def test_our_read_run_equals_the_reference_run_step_by_step(ours, tmp_path):
  """The same number of steps; per step every loss term and the total within 1e-4 relative, the learning rate within
  1e-5, the logit scale within 1e-5, the gradient norm (before clipping) within 1e-4; at steps 10 and 50 every
  trainable tensor within 1e-3 of the reference's change from the start, ‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖ (or within
  one float32 step of it, for a tensor that barely moves), the key biases aside (`NO_GRADIENT`)."""
  workdir, _ = ours
  meta, ref = series()
  got = compare(workdir, str(tmp_path))
  # the same run length, each side deriving it from the data size as it does (N = 198, B = 8, 2 epochs)
  assert got["steps"]["ours"] == got["steps"]["theirs"] == meta["steps"]["theirs"] == 50
  assert meta["steps"]["ours"] == math.ceil(meta["data"]["epochs"] * meta["data"]["images"] / meta["data"]["batch"])
  for term, rel in got["loss_rel"].items():
    worst = int(np.argmax(rel))
    assert rel[worst] <= LOSS_RTOL, f"{term} at step {worst + 1}: relative difference {rel[worst]:.2e}"
  worst = int(np.argmax(got["lr_rel"]))
  assert got["lr_rel"][worst] <= LR_RTOL, f"lr at step {worst + 1}: relative difference {got['lr_rel'][worst]:.2e}"
  worst = int(np.argmax(got["logit_scale_abs"]))
  assert got["logit_scale_abs"][worst] <= SCALE_ATOL, f"logit scale at step {worst + 1}"
  worst = int(np.argmax(got["grad_norm_rel"]))
  assert got["grad_norm_rel"][worst] <= GRAD_RTOL, f"grad norm at step {worst + 1}: {got['grad_norm_rel'][worst]:.2e}"
  for step, ratios in got["weight_ratio"].items():
    bad = {
        k: f"{v['ratio']:.2e} ({v['ulps']:.1f} float32 steps)" for k, v in ratios.items()
        if not NO_GRADIENT.fullmatch(k) and not (v["ratio"] <= WEIGHT_RATIO or v["ulps"] <= 1.0)
    }
    assert not bad, f"step {step}: ‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖ over {WEIGHT_RATIO}: {bad}"
    typical = np.median([v["moved_ref"] for k, v in ratios.items() if not NO_GRADIENT.fullmatch(k)])
    for k, v in ratios.items():  # no gradient: both sides move by rounding noise only, far less than the rest
      if NO_GRADIENT.fullmatch(k):
        assert max(v["moved_ours"], v["moved_ref"]) < 0.01 * typical, (step, k, v, typical)


def test_the_frozen_decoder_is_unchanged_on_both_sides(ours):
  """Theirs: every frozen tensor (the T5 model, encoder included) bit-identical at step 50 (recorded). Ours: the
  decoder has no trainable parameter, and the one the run exports at the end is the initial one, bit for bit."""
  from safetensors.numpy import load_file
  workdir, _ = ours
  meta, _ = series()
  assert meta["frozen_count"] > 0 and not any(n.startswith("decoder.") for n in meta["trainable"])
  assert meta["decoder_loaded_as_saved"], meta["decoder_tensors_differing_from_checkpoint"]
  assert not any(k.startswith("decoder.") for k in our_checkpoint(workdir, 50))
  exported = load_file(os.path.join(workdir, "export", "t5", "model.safetensors"))
  initial = load_file(os.path.join(FIX, "t5", "model.safetensors"))
  assert exported and all(np.array_equal(v, initial[k]) for k, v in exported.items() if k in initial)
  assert {k for k in exported if k not in initial} <= {"decoder.embed_tokens.weight"}


def test_our_tokenizers_give_the_reference_collators_ids():
  """The texts behind the reference's batches, tokenised by ours (the CLIP tokenizer of the HF directory without
  text cleaning, as READ's recipe sets; the T5 SentencePiece tokenizer), give its ids exactly."""
  import gzip

  from compclip_jax import assets
  from compclip_jax.data.tokenizers import T5Tokenizer
  from compclip_jax.weights import loading
  _, tok, _ = loading.load_clip_meta(os.path.join(FIX, "clip"))
  tok = tok.with_cleaning(False)
  t5 = T5Tokenizer(assets.SYNTHETIC_SPIECE)
  with gzip.open(os.path.join(FIX, "texts.json.gz"), "rt") as f:
    texts = json.load(f)
  for b, t in zip(reference_batches(), texts):
    assert (tok(t["T"]) == b["ids"][:, 0]).all()
    for j in range(3):
      assert (tok([n[j] for n in t["negatives"]]) == b["ids"][:, 1 + j]).all()
    assert (tok(t["paraphrase"]) == b["para_ids"]).all()
    assert (t5(t["target"], 77) == b["t5_target"]).all()
