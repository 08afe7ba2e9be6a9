"""Losses against plain-numpy implementations written here with explicit loops (METHODS §1.3, §1.4, §1.5, §2.3),
and the same losses + gradients on a fake 8-device mesh as on one device."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from compclip_jax.methods import losses
from compclip_jax.methods.clic import losses as clic_losses
from compclip_jax.methods.clip import losses as clip_losses
from compclip_jax.methods.negclip import losses as negclip_losses
from compclip_jax.methods.read import losses as read_losses

jax.config.update("jax_enable_x64", False)


def _unit(rng, *shape):
  x = rng.standard_normal(shape)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _ce(row, label, keep=None):
  """-log softmax(row)[label] over the entries where keep is True (explicit loop)."""
  keep = np.ones_like(row, bool) if keep is None else keep
  m = max(row[j] for j in range(len(row)) if keep[j])
  z = sum(np.exp(row[j] - m) for j in range(len(row)) if keep[j])
  return -(row[label] - m - np.log(z))


def np_clip(img, txt, s):
  b = len(img)
  sim = np.array([[s * img[i] @ txt[j] for j in range(b)] for i in range(b)])
  return 0.5 * (np.mean([_ce(sim[i], i) for i in range(b)]) + np.mean([_ce(sim[:, j], j) for j in range(b)]))


def np_clic(img, txt, valid, s, w=(0.5, 0.5, 1.0)):
  b = len(img)
  sets = [txt[k * b:(k + 1) * b] for k in range(4)]
  n = txt[4 * b:]
  i2t, t2i = [], []
  for p in sets:
    sim = np.array([[s * img[i] @ p[j] for j in range(b)] for i in range(b)])
    i2t.append(np.mean([_ce(sim[i], i) for i in range(b)]))
    t2i.append(np.mean([_ce(sim[:, j], j) for j in range(b)]))
  cont = 0.5 * (np.mean(i2t) + np.mean(t2i))
  terms = [np.log1p(np.exp(s * img[i] @ n[i] - s * img[i] @ p[i])) for p in sets for i in range(b) if valid[i]]
  sneg = np.mean(terms) if terms else 0.0
  uni = np.mean([np.sum((sets[0][i] - sets[1][i]) ** 2) for i in range(b)])
  return w[0] * cont + w[1] * sneg + w[2] * uni


def np_hard_neg(img, pos, negs, valid, s):
  """negs [K, B, D], valid [B, K]: image i's denominator holds all positives and every valid negative."""
  b, k = len(img), len(negs)
  texts = list(pos) + [negs[kk][j] for kk in range(k) for j in range(b)]
  keep = [True] * b + [bool(valid[j, kk]) for kk in range(k) for j in range(b)]
  i2t = np.mean([_ce(np.array([s * img[i] @ t for t in texts]), i, np.array(keep)) for i in range(b)])
  t2i = np.mean([_ce(np.array([s * img[i] @ pos[j] for i in range(b)]), j) for j in range(b)])
  return 0.5 * (i2t + t2i)


def np_token_ce(logits, targets, pad=0):
  vals = [
      _ce(logits[b, t], targets[b, t]) for b in range(targets.shape[0]) for t in range(targets.shape[1])
      if targets[b, t] != pad
  ]
  return np.mean(vals)


def np_align(para, orig, s, direction):
  b = len(para)
  sim = np.array([[s * para[i] @ orig[j] for j in range(b)] for i in range(b)])
  p2o = np.mean([_ce(sim[i], i) for i in range(b)])
  o2p = np.mean([_ce(sim[:, j], j) for j in range(b)])
  return {"para_to_orig": p2o, "orig_to_para": o2p, "both": 0.5 * (p2o + o2p)}[direction]


TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("valid", ["all", "some", "none"])
def test_clic_loss(valid):
  rng = np.random.default_rng(0)
  b, d, s = 6, 16, 14.3
  img, txt = _unit(rng, b, d), _unit(rng, 5 * b, d)
  mask = {"all": np.ones(b, bool), "some": np.array([1, 0, 1, 1, 0, 1], bool), "none": np.zeros(b, bool)}[valid]
  got, m = clic_losses.clic_loss(jnp.asarray(img, jnp.float32), jnp.asarray(txt, jnp.float32), jnp.asarray(mask),
                                 jnp.float32(s))
  np.testing.assert_allclose(float(got), np_clic(img, txt, mask, s), **TOL)
  if valid == "none":
    assert float(m["clic/sneg"]) == 0.0
  got0, _ = clic_losses.clic_loss(jnp.asarray(img, jnp.float32), jnp.asarray(txt, jnp.float32), jnp.asarray(mask),
                                  jnp.float32(s), w_uni=0.0)
  np.testing.assert_allclose(float(got0), np_clic(img, txt, mask, s, (0.5, 0.5, 0.0)), **TOL)


def test_clip_loss():
  rng = np.random.default_rng(1)
  img, txt = _unit(rng, 7, 8), _unit(rng, 7, 8)
  got, _ = clip_losses.clip_loss(jnp.asarray(img, jnp.float32), jnp.asarray(txt, jnp.float32), jnp.float32(100.0))
  np.testing.assert_allclose(float(got), np_clip(img, txt, 100.0), **TOL)


@pytest.mark.parametrize("k", [1, 3])
def test_hard_negative_contrastive(k):
  rng = np.random.default_rng(2)
  b, d, s = 5, 8, 20.0
  img, pos, negs = _unit(rng, b, d), _unit(rng, b, d), _unit(rng, k, b, d)
  valid = rng.random((b, k)) < 0.6
  valid[0] = False  # a sample with no valid negative at all
  got, _ = losses.hard_negative_contrastive(*(jnp.asarray(x, jnp.float32) for x in (img, pos, negs)),
                                            jnp.asarray(valid), jnp.float32(s))
  np.testing.assert_allclose(float(got), np_hard_neg(img, pos, negs, valid, s), **TOL)


def test_negclip_loss_layout():
  rng = np.random.default_rng(3)
  b, d = 4, 8
  img, txt = _unit(rng, b, d), _unit(rng, 2 * b, d)
  valid = np.array([1, 0, 1, 1], bool)
  got, _ = negclip_losses.negclip_loss(jnp.asarray(img, jnp.float32), jnp.asarray(txt, jnp.float32), jnp.asarray(valid),
                                       jnp.float32(30.0))
  np.testing.assert_allclose(float(got), np_hard_neg(img, txt[:b], txt[b:][None], valid[:, None], 30.0), **TOL)


@pytest.mark.parametrize("direction", ["para_to_orig", "orig_to_para", "both"])
def test_read_loss(direction):
  rng = np.random.default_rng(4)
  b, d, t, v, s = 4, 8, 6, 11, 50.0
  img, txt, para = _unit(rng, b, d), _unit(rng, 4 * b, d), _unit(rng, b, d)
  valid = rng.random((b, 3)) < 0.7
  logits = rng.standard_normal((b, t, v)) * 3
  targets = rng.integers(1, v, (b, t))
  targets[0, 4:] = 0  # padding is ignored
  targets[2, 2:] = 0
  got, m = read_losses.read_loss(*(jnp.asarray(x, jnp.float32) for x in (img, txt)), jnp.asarray(valid),
                                 jnp.asarray(para, jnp.float32), jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                                 jnp.float32(s), align_direction=direction)
  negs = np.stack([txt[b * (k + 1):b * (k + 2)] for k in range(3)])
  con = np_hard_neg(img, txt[:b], negs, valid, s)
  rec = np_token_ce(logits, targets)
  align = np_align(para, txt[:b], s, direction)
  for key, want in (("read/con", con), ("read/rec", rec), ("read/align", align)):
    np.testing.assert_allclose(float(m[key]), want, **TOL)
  np.testing.assert_allclose(float(got), con + 0.1 * rec + 0.5 * align, **TOL)
  decoder_only, _ = read_losses.read_loss(*(jnp.asarray(x, jnp.float32) for x in (img, txt)), jnp.asarray(valid),
                                          jnp.asarray(para, jnp.float32), jnp.asarray(logits, jnp.float32),
                                          jnp.asarray(targets), jnp.float32(s), w_rec=1.0, w_align=0.0, w_con=0.0,
                                          align_direction=direction)
  np.testing.assert_allclose(float(decoder_only), rec, **TOL)  # the demo's decoder pretraining objective


def test_extreme_logits_stay_finite():
  img = jnp.eye(4, 8)
  txt = jnp.concatenate([jnp.eye(4, 8)] * 5)
  loss, _ = clic_losses.clic_loss(img, txt, jnp.array([1, 1, 0, 0], bool), jnp.float32(1e4))
  g = jax.grad(lambda x: clic_losses.clic_loss(x, txt, jnp.ones(4, bool), jnp.float32(1e4))[0])(img)
  assert np.isfinite(float(loss)) and np.isfinite(np.asarray(g)).all()


def test_sharded_equals_single_device():
  """The global-batch semantics of METHODS §1.3: on a ('data', 'fsdp') = (4, 2) mesh the loss and its gradients
  equal the single-device ones."""
  rng = np.random.default_rng(5)
  b, d = 16, 32
  img, txt = jnp.asarray(_unit(rng, b, d), jnp.float32), jnp.asarray(_unit(rng, 5 * b, d), jnp.float32)
  valid = jnp.asarray(rng.random(b) < 0.8)
  f = jax.value_and_grad(lambda i, t, v: clic_losses.clic_loss(i, t, v, jnp.float32(30.0))[0], argnums=(0, 1))
  ref_loss, ref_grads = jax.jit(f)(img, txt, valid)
  mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "fsdp"))
  shard = NamedSharding(mesh, P(("data", "fsdp")))
  # texts are [p1; p2; p3; p4; n] stacked: shard each set's batch axis like the step does
  txt_sets = jax.device_put(txt.reshape(5, b, d), NamedSharding(mesh, P(None, ("data", "fsdp"))))
  g = jax.jit(lambda i, t, v: f(i, t.reshape(5 * b, d), v))
  loss, grads = g(jax.device_put(img, shard), txt_sets, jax.device_put(valid, shard))
  assert len(loss.sharding.device_set) == 8 or loss.sharding.is_fully_replicated
  np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5, atol=1e-6)
  for x, y in zip(grads, ref_grads):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
