"""A whole CLIC training run of ours equals the official reference code's: 50 optimiser steps of configs/clic.py's
recipe from the same starting weights on the same batches, compared step by step and weight by weight.

The reference side is data only (tests/fixtures/reference/trajectory_clic/, made by `tools/trajectory_clic.py make`
from github:AmitPeleg/CLIC's own train.py run; its README says how): the batches its data code built (concatenated
images, four positives, the swap negative; the plain CLIP steps' images and captions), in our layouts; per step its
loss dict, learning rate, logit scale and gradient norms; its weights after steps 1, 10 and 50; its parameter groups.
No reference code and no torch computation runs here.

Ours: `train.loop.run` with those batches (`batches=`), configs/clic.py overridden only in size (the fixture's small
open_clip model, loaded by our own import; batch 8), data path, logging, checkpoints and export — and the frozen
tower stored in fp32, as the reference runs it (the recipe stores it in bf16, a precision choice of ours). The run's
length comes from the fixture's CSV as training derives it (drop_last: ⌊405 / 8⌋ = 50 steps, as their DataLoader).
"""
import importlib.util
import math
import os
import re

import numpy as np
import pytest

from compclip_jax import methods
from tests import paths

_SPEC = importlib.util.spec_from_file_location("trajectory_clic", os.path.join(paths.ROOT, "tools",
                                                                               "trajectory_clic.py"))
trajectory = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(trajectory)

LOSS_RTOL, LR_RTOL, SCALE_ATOL, GRAD_RTOL, WEIGHT_RATIO = 1e-4, 1e-5, 1e-5, 1e-4, 1e-3
CHECKPOINTS = (10, 50)
# The attention key biases: softmax is invariant to a bias added to every key, so their gradient is zero in exact
# arithmetic — on the reference side ~1e-7 of its layer's in_proj_bias gradient, rounding noise — and Adam turns that
# noise into ±lr steps: both sides move them by noise, in unrelated directions (‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖ ≈ 1.4).
# They are checked for exactly that instead (`test_key_biases_get_only_rounding_noise`).
NOISE_ONLY = trajectory.NOISE_ONLY


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  fx = trajectory.load_fixture()
  workdir = str(tmp_path_factory.mktemp("trajectory_clic"))
  c = trajectory.our_config(fx)
  rows = trajectory.run_ours(fx, workdir, c)
  return {"fx": fx, "c": c, "rows": rows, "workdir": workdir}


def _ref(run):
  return run["fx"]["series"]["steps"]


def test_the_same_steps_in_the_same_alternation(run):
  """50 steps on both sides, each run from its own arithmetic (theirs: ⌊405 / 8⌋ per epoch with drop_last; ours:
  `drop_last`), CLIC and CLIP steps alternating in the same phase."""
  ref, rows = _ref(run), run["rows"]
  assert len(rows) == len(ref) == 50, (len(rows), len(ref))
  assert [r["step"] for r in rows] == list(range(1, 51))
  method = methods.get("clic")
  ours = [method.kind_at(run["c"], i).name for i in range(len(rows))]
  assert ours == [s["kind"] for s in ref]
  for i, r in enumerate(rows):  # the step's loss is its kind's (the console's `loss/<kind>`)
    assert r["loss"] == r[f"loss/{ours[i]}"], i + 1


def test_loss_terms_per_step(run):
  """Every loss term and the total of every step within LOSS_RTOL (CLIC steps: L_cont, L_S-Neg, L_Uni and 0.5 / 0.5 / 1
  of them; CLIP steps: CE_i2t, CE_t2i and their mean)."""
  diffs = trajectory.loss_differences(run["fx"], run["rows"])
  assert set(diffs) == {f"{k}:{m}" for k, terms in trajectory.TERMS.items() for m, _ in terms}
  for term, values in diffs.items():
    bad = [v for v in values if not v[3] <= LOSS_RTOL]  # a NaN: our step of that number ran another kind
    step, ours, theirs, rel = max(bad, key=lambda v: -math.inf if math.isnan(v[3]) else v[3]) if bad else values[0]
    assert not bad, f"{term} at step {step}: ours {ours:.6g}, reference {theirs:.6g} (rel {rel:.2e}); {len(bad)} steps"


def test_learning_rate_per_step(run):
  """The rate of every update within LR_RTOL: their cosine_scheduler(…, loader_len + 1) — warm-up np.linspace over
  int(0.2 × 51) = 10 steps, the peak twice, a cosine that stops one step short of 1e-8 —, both parameter groups."""
  for i, (r, s) in enumerate(zip(run["rows"], _ref(run))):
    assert s["lr"][0] == s["lr"][1], i + 1
    assert abs(r["lr"] - s["lr"][0]) <= LR_RTOL * s["lr"][0], f"step {i + 1}: ours {r['lr']}, reference {s['lr'][0]}"


def test_logit_scale_and_gradient_norm_per_step(run):
  """The stored log-scale each step used within SCALE_ATOL (unclamped on both sides), and the global gradient norm
  over the trainable parameters within GRAD_RTOL."""
  for i, (r, s) in enumerate(zip(run["rows"], _ref(run))):
    scale = r.get(f"{'clic' if s['kind'] == 'clic' else 'clip'}/logit_scale", math.nan)  # absent: another kind ran
    assert abs(scale - s["logit_scale"]) <= SCALE_ATOL, f"step {i + 1}: ours {scale}, reference {s['logit_scale']}"
    assert abs(r["grad_norm"] - s["grad_norm"]) <= GRAD_RTOL * s["grad_norm"], \
        f"gradient norm at step {i + 1}: ours {r['grad_norm']}, reference {s['grad_norm']}"


def _mark(run, names: set) -> dict:
  """{our path: True where the open_clip tensor it comes from is in `names`} (through our own open_clip import)."""
  fx = run["fx"]
  marked = {n: np.full(v.shape, n in names, np.float32) for n, v in fx["weights"][0].items()}
  return {k: bool(v.all()) for k, v in trajectory.to_ours(fx, marked).items() if v.all() or not v.any()}


def test_the_same_trainable_frozen_and_weight_decay_sets(run):
  """Their AdamW groups (get_optim_param_dict: decay on ≥2-D weights without 'bias' / 'ln' in the name) and frozen
  tower (freeze_only_vision) equal ours (optim.trainable / frozen / decay rules), read through our own import."""
  from compclip_jax.train import state  # pylint: disable=import-outside-toplevel
  series = run["fx"]["series"]
  groups = {g["is_wd"]: set(g["params"]) for g in series["param_groups"]}
  assert {g["weight_decay"] for g in series["param_groups"]} == {0.1, 0}
  model = state.build_model(run["c"], methods.get("clic"))
  _, trainable, frozen, decay = state.split_parameters(run["c"], model)
  trained = _mark(run, groups[True] | groups[False])
  assert {p for p, t in trained.items() if t
         } == set(decay) == {".".join(map(str, k)) for k, _ in trainable.flat_state()}
  assert {p for p, t in trained.items() if not t} == {".".join(map(str, k)) for k, _ in frozen.flat_state()}
  decayed = _mark(run, groups[True])
  assert {p for p, d in decayed.items() if d} == {p for p, g in decay.items() if g == "decay"}
  assert set(series["frozen"]) == set(run["fx"]["weights"][0]) - groups[True] - groups[False]
  assert all(n.startswith("visual.") for n in series["frozen"])


@pytest.mark.parametrize("step", CHECKPOINTS)
def test_weights_after_step(run, step):
  """Every trainable tensor after steps 10 and 50: ‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖ ≤ WEIGHT_RATIO (the key biases:
  `NOISE_ONLY`)."""
  ours = trajectory.our_weights(run["workdir"], step)
  ratios = trajectory.weight_ratios(run["fx"], ours, step)
  assert len(ratios) == 38
  checked = {n: r for n, r in ratios.items() if not re.fullmatch(NOISE_ONLY, n)}
  assert len(checked) == 36
  bad = {n: f"{r:.2e}" for n, r in checked.items() if not r <= WEIGHT_RATIO}
  assert not bad, f"step {step}: ‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖ over {WEIGHT_RATIO}: {bad}"


def test_key_biases_get_only_rounding_noise(run):
  """`NOISE_ONLY`: on the reference side their gradient is rounding noise at every step (≤ 1e-5 of the gradient of
  their layer's whole in_proj_bias); on both sides they moved no more than Adam's steps of that noise can."""
  ref = _ref(run)
  for i, s in enumerate(ref):
    for layer in range(2):
      n = f"transformer.resblocks.{layer}.attn.in_proj_bias"
      assert s["grad_norms"][n + "[k]"] <= 1e-5 * s["grad_norms"][n], (i + 1, layer)
  ours, ref0 = trajectory.our_weights(run["workdir"], 50), trajectory.to_ours(run["fx"], {})
  ref50 = trajectory.to_ours(run["fx"], run["fx"]["weights"][50])
  biases = [n for n in ours if re.fullmatch(NOISE_ONLY, n)]
  assert len(biases) == 2
  for n in biases:
    bound = math.sqrt(ours[n].size) * sum(s["lr"][0] for s in ref) * 1.5  # |an Adam step| ≲ lr per element
    assert np.linalg.norm(ours[n] - ref0[n]) <= bound and np.linalg.norm(ref50[n] - ref0[n]) <= bound, n


def test_frozen_tensors_unchanged_on_both_sides(run):
  """The vision tower: bit for bit the starting weights after steps 1, 10, 50 on the reference side, and in our
  export (whose frozen tensors come from the initial checkpoint); our checkpoints hold no frozen tensor."""
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  fx = run["fx"]
  assert all(s["frozen_unchanged"] for s in _ref(run) if "frozen_unchanged" in s)
  assert sum("frozen_unchanged" in s for s in _ref(run)) == 3
  exported = load_file(os.path.join(run["workdir"], "export", "open_clip", "model.safetensors"))
  frozen = fx["series"]["frozen"]
  assert frozen and all(np.array_equal(exported[n], fx["weights"][0][n]) for n in frozen)
  assert not any(
      k.startswith("vision_model.") or k.startswith("visual_projection.")
      for k in trajectory.our_weights(run["workdir"], 50))
