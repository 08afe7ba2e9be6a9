"""Parameter rules, LR schedules and AdamW against torch.optim.AdamW (METHODS §1.4, §2.4)."""
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
import torch

from compclip_jax.train import optim
from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP
from compclip_jax.weights import params
from configs import clic, read


@pytest.fixture(scope="module")
def clip_shapes():
  return params.shapes(params.abstract(lambda rngs: CLIP(clip_config.tiny(), rngs=rngs)))


def test_rules_must_cover_every_parameter_once():
  pattern = r"(?s)matched by no rule \(1\).*c\.w.*matched by several rules \(1\).*a\.w"
  with pytest.raises(optim.RuleError, match=pattern):
    optim.assign(["a.w", "b.w", "c.w"], {"trainable": [r"a\..*", r"b\..*"], "frozen": [r"a\.w"]})


def test_clic_rules(clip_shapes):
  c = clic.get_config()
  groups = optim.assign(clip_shapes, {"trainable": c.optim.trainable, "frozen": c.optim.frozen})
  for path, group in groups.items():  # METHODS §1.4: everything that is not the vision tower trains
    assert group == ("frozen" if path.startswith(("vision_model.", "visual_projection.")) else "trainable"), path
  trainable = [p for p, g in groups.items() if g == "trainable"]
  decay = optim.assign(trainable, {"decay": c.optim.decay, "no_decay": c.optim.no_decay})
  for path in trainable:  # decay on ≥ 2-D weights only (embeddings and text projection included)
    assert (decay[path] == "decay") == (len(clip_shapes[path]) >= 2), path
  assert decay["text_model.embeddings.position_embedding.embedding"] == "decay"
  assert decay["logit_scale"] == "no_decay"


def test_read_rules(clip_shapes):
  c = read.get_config()
  paths = [f"clip.{p}" for p in clip_shapes] + [
      "proj.kernel", "decoder.shared.embedding", "decoder.decoder.block.0.layer.0.layer_norm.weight",
      "decoder.lm_head.kernel"
  ]
  groups = optim.assign(paths, {"trainable": c.optim.trainable, "frozen": c.optim.frozen})
  assert {p for p, g in groups.items() if g == "frozen"} == {p for p in paths if p.startswith("decoder.")}
  trainable = [p for p, g in groups.items() if g == "trainable"]
  decay = optim.assign(trainable, {"decay": c.optim.decay, "no_decay": c.optim.no_decay})
  for path in trainable:  # METHODS §2.4: everything but biases and LayerNorm weights decays
    is_ln = "norm" in path or "layrnorm" in path
    assert (decay[path] == "no_decay") == (path.endswith(".bias") or is_ln), path
  assert decay["clip.logit_scale"] == decay["proj.kernel"] == decay["clip.vision_model.embeddings.class_embedding"] \
      == "decay"


def test_clic_schedule_values():
  total, warm = 1250, 250
  s = optim.warmup_frac_cosine(total)
  assert math.isclose(float(s(0)), 1e-7, rel_tol=1e-6)
  assert math.isclose(float(s(warm // 2)), 1e-7 + 0.5 * (1e-6 - 1e-7), rel_tol=1e-5)
  assert math.isclose(float(s(warm)), 1e-6, rel_tol=1e-5)
  mid = warm + (total - warm) // 2
  assert math.isclose(float(s(mid)), 1e-8 + 0.5 * (1e-6 - 1e-8), rel_tol=1e-4)
  assert math.isclose(float(s(total)), 1e-8, rel_tol=1e-4)


def test_reference_warmup_cosine_values():
  """optim.reference_warmup_cosine: the reference's cosine_scheduler(1e-6, 1e-8, epochs, loader_len + 1, 0.2 ×
  epochs, 1e-7) read at the run's steps — one epoch of 50 steps: a 51-step schedule, np.linspace warm-up over
  int(0.2 × 51) = 10 steps (the peak at steps 9 and 10), a cosine over 41 of which the run takes 40."""
  s = optim.reference_warmup_cosine(50)
  got = [float(s(k)) for k in range(50)]
  want = [1e-7 + k * 0.9e-6 / 9 for k in range(10)]
  want += [1e-8 + 0.5 * (1e-6 - 1e-8) * (1 + math.cos(math.pi * i / 41)) for i in range(40)]
  assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, want)), (got, want)
  assert got[9] == got[10] and got[-1] > 1.5e-8
  two = optim.reference_warmup_cosine(50, epochs=2)  # 2 × (25 + 1) steps, warm-up int(0.4 × 26) = 10
  assert math.isclose(float(two(10)), 1e-6, rel_tol=1e-6) and float(two(49)) > float(s(49))


def test_read_schedule_values():
  total = 1620
  s = optim.warmup_steps_cosine(total)
  assert float(s(0)) == 0.0 and math.isclose(float(s(25)), 0.5e-5, rel_tol=1e-5)
  assert math.isclose(float(s(50)), 1e-5, rel_tol=1e-5)
  for t in (300, 800, 1500):  # transformers' get_cosine_schedule_with_warmup
    want = 1e-5 * 0.5 * (1 + math.cos(math.pi * (t - 50) / (total - 50)))
    assert math.isclose(float(s(t)), want, rel_tol=1e-4, abs_tol=1e-12)
  assert abs(float(s(total))) < 1e-12


@pytest.mark.parametrize("clip", [0.0, 1.0])
@pytest.mark.parametrize("fp32_decay_factor", [False, True])
def test_adamw_matches_torch(clip, fp32_decay_factor):
  """Our masked AdamW (decoupled decay on the 'decay' group only, optional global-norm clipping; optax's decay or
  torch's, `optim.fp32_decay_factor`) against torch.optim.AdamW (+ clip_grad_norm_) over a few steps with gradients of
  varying size."""
  rng = np.random.default_rng(0)
  w = {"kernel": rng.standard_normal((4, 3)).astype(np.float32), "bias": rng.standard_normal(3).astype(np.float32)}
  noise = lambda v, i: (rng.standard_normal(v.shape) * 10 ** (i - 2)).astype(np.float32)
  grads = [{k: noise(v, i) for k, v in w.items()} for i in range(5)]
  cfg = ml_collections.ConfigDict(
      dict(b1=0.9, b2=0.98, eps=1e-8, weight_decay=0.1, grad_clip=clip, fp32_decay_factor=fp32_decay_factor))
  tx = optim.make_optimizer(lambda _: 1e-2, {"kernel": True, "bias": False}, cfg)
  p = jax.tree.map(jnp.asarray, w)
  state = tx.init(p)
  tk, tb = (torch.nn.Parameter(torch.tensor(w[k])) for k in ("kernel", "bias"))
  topt = torch.optim.AdamW([{"params": [tk], "weight_decay": 0.1}, {"params": [tb], "weight_decay": 0.0}], lr=1e-2,
                           betas=(0.9, 0.98), eps=1e-8)
  for g in grads:
    updates, state = tx.update(jax.tree.map(jnp.asarray, g), state, p)
    p = jax.tree.map(lambda a, u: a + u, p, updates)
    tk.grad, tb.grad = torch.tensor(g["kernel"]), torch.tensor(g["bias"])
    if clip:
      torch.nn.utils.clip_grad_norm_([tk, tb], clip)
    topt.step()
  np.testing.assert_allclose(np.asarray(p["kernel"]), tk.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(p["bias"]), tb.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lr", [1e-6, 5e-7, 3e-7, 2e-7, 1e-8])
def test_fp32_decay_factor_decays_as_torch_rounds_it(lr):
  """optim.fp32_decay_factor: torch.optim.AdamW multiplies fp32 parameters by 1 − lr·wd rounded to float32 (steps of
  2⁻²⁴ below 1: at lr 1e-6, wd 0.1 a decay of 1.19e-7, none below lr 3e-7), then adds the Adam step to that rounded
  value. Jitted, over two steps, to the last unit (optax's own decay, lr·wd·θ, moves > 10 % of the values off)."""
  rng = np.random.default_rng(1)
  w = (rng.standard_normal(4096) * 0.1).astype(np.float32)
  grads = [(rng.standard_normal(4096) * 1e-3).astype(np.float32) for _ in range(2)]
  out = {}
  for on in (True, False):
    cfg = ml_collections.ConfigDict(
        dict(b1=0.9, b2=0.98, eps=1e-8, weight_decay=0.1, grad_clip=0.0, fp32_decay_factor=on))
    tx = optim.make_optimizer(lambda _: lr, {"w": True}, cfg)
    step = jax.jit(lambda p, s, g: (lambda u, s: (optax.apply_updates(p, u), s))(*tx.update(g, s, p)))
    p = {"w": jnp.asarray(w)}
    s = tx.init(p)
    for g in grads:
      p, s = step(p, s, {"w": jnp.asarray(g)})
    out[on] = np.asarray(p["w"])
  t = torch.nn.Parameter(torch.tensor(w))
  topt = torch.optim.AdamW([t], lr=lr, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
  for g in grads:
    t.grad = torch.tensor(g)
    topt.step()
  ref = t.detach().numpy()
  assert np.mean(out[True] != ref) < 1e-2  # ties of the last rounding, the Adam step's own rounding differing
  assert np.all(np.abs(out[True] - ref) <= 2 * np.spacing(np.abs(ref)))  # by a unit or two in the last place
  assert lr < 3e-7 or np.mean(out[False] != ref) > 0.1


def test_clamp_logit_scale_clips_the_parameter_after_the_update_only_when_asked():
  """optim.clamp_logit_scale (docs/fidelity.md row 13): one step of the real step function with a learning rate that
  drives logit_scale past ln 100 — clamped with the switch, unclamped without (the references' behaviour); every
  other parameter is the same either way."""
  from compclip_jax import methods
  from compclip_jax.train import state, steps
  from compclip_jax import sharding
  from configs import clip as clip_config_file
  out = {}
  for on in (False, True):
    c = clip_config_file.get_config("runlocal")
    c.optim.schedule, c.optim.lr, c.optim.weight_decay = "constant", 100.0, 0.0
    # Adam's first step is lr·g/(|g| + ε): ε = 1 keeps a gradient that is rounding noise (k_proj's bias: softmax
    # ignores it) a step of noise size, which two differently fused programs may round differently; with the
    # default ε, Adam turns that noise into ±lr
    c.optim.eps = 1.0
    c.optim.clamp_logit_scale = on
    method = methods.get(c.method)
    model = state.build_model(c, method)
    st = state.build_state(c, model, sharding.make_mesh(-1, 1), 10)
    kind = method.step_kinds(c)[0]
    size = model.clip_cfg.vision.image_size
    batch = {k: np.zeros(shape, dtype) for k, (shape, dtype) in kind.batch_shapes(8, size, 8).items()}
    batch["ids"][..., 0], batch["ids"][..., 1] = 49406, 49407  # start and end tokens
    batch["image"] = np.random.default_rng(0).integers(0, 256, batch["image"].shape, dtype=np.uint8)
    step = steps.make_step(kind, st.graphdef, st.tx, st.schedule, ((0.5,) * 3, (0.25,) * 3), kind.loss_options(c),
                           c.optim.clamp_logit_scale)
    new, _ = jax.jit(step)(st.state, st.frozen, batch)
    out[on] = {params.tree_path_str(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(new.trainable)}
  assert abs(out[False]["logit_scale"]) > 10  # far outside [0, ln 100]
  assert 0.0 <= out[True]["logit_scale"] <= math.log(100) and out[True]["logit_scale"] in (0.0, np.float32(
      math.log(100)))
  # every other parameter as without the clamp, up to the gradient's rounding in two programs XLA fuses differently
  # (~1e-6 of it, times lr = 100); a clamp reaching them would move them into [0, ln 100]
  for k in out[False]:
    if k != "logit_scale":
      np.testing.assert_allclose(out[True][k], out[False][k], rtol=0, atol=1e-5 * 100.0, err_msg=k)
