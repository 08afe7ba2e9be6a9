"""The methods' terms on a sigmoid family (docs/siglip.md, "Methods on SigLIP"), each against a hand computation in
numpy written from the label matrices the docs describe — pair by pair, no shared code — plus the switch: a SigLIP
with siglip.contrastive="softmax", and any CLIP, gets no bias (so the CLIP forms, tested in test_losses.py)."""
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from compclip_jax import recipes
from compclip_jax.methods import base
from compclip_jax.methods.clic import losses as clic_losses
from compclip_jax.methods.clip import losses as clip_losses
from compclip_jax.methods.negclip import losses as negclip_losses
from compclip_jax.methods.read import losses as read_losses
from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP
from compclip_jax.models.siglip import config as siglip_config
from compclip_jax.models.siglip.loss import sigmoid_loss
from compclip_jax.models.siglip.model import SigLIP
from compclip_jax.train import config as config_lib

B, D, SCALE, BIAS = 6, 8, 7.0, -2.5


def _unit(rng, *shape):
  x = rng.normal(size=(*shape, D))
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _nls(z):
  """−log σ(z), float64."""
  return np.log1p(np.exp(-np.asarray(z, np.float64)))


def _logit(a, t, bias=BIAS):
  return SCALE * float(np.dot(a, t)) + bias


def _sigmoid_matrix_loss(img, texts, positive, keep, bias=BIAS):
  """Σ over the pairs (b, j) kept of −log σ(±logit) with +1 where positive(b, j), by loops; / B."""
  total = 0.0
  for b in range(len(img)):
    for j, t in enumerate(texts):
      if keep(b, j):
        total += _nls((1 if positive(b, j) else -1) * _logit(img[b], t, bias))
  return total / len(img)


def _read_inputs(img, txt, seed):
  """read_loss's positional inputs up to the scale (img, the 4B texts, neg_valid [B, 3], paraphrases, decoder
  logits and targets) as jax arrays, and neg_valid as numpy."""
  rng = np.random.default_rng(seed)
  neg_valid = rng.random((B, 3)) > 0.3
  para = _unit(rng, B)
  logits, targets = rng.normal(size=(B, 4, 11)).astype(np.float32), rng.integers(1, 11, (B, 4))
  arrays = (img, txt[:4 * B], neg_valid, para, logits, targets)
  return tuple(jnp.asarray(a) for a in arrays) + (jnp.float32(SCALE),), neg_valid


@pytest.fixture
def data():
  rng = np.random.default_rng(0)
  img, txt = _unit(rng, B), _unit(rng, 5 * B)
  valid = np.array([True, False, True, True, False, True])
  return img, txt, valid


def test_the_clip_step_on_siglip_is_siglips_own_loss(data):
  img, txt, _ = data
  loss, m = clip_losses.clip_loss(jnp.asarray(img), jnp.asarray(txt[:B]), jnp.float32(SCALE), jnp.float32(BIAS))
  hand = _sigmoid_matrix_loss(img, txt[:B], lambda b, j: b == j, lambda b, j: True)
  np.testing.assert_allclose(float(loss), hand, rtol=1e-5)
  # the family's loss (tests/models/test_siglip_loss.py: equal to transformers' SiglipModel)
  np.testing.assert_allclose(float(loss), float(sigmoid_loss(img, txt[:B], np.log(SCALE), BIAS)), rtol=1e-6)
  assert "clip/i2t" not in m and float(m["clip/sigmoid"]) == float(loss)


def test_negclip_on_siglip_negatives_as_extra_columns(data):
  img, txt, valid = data
  loss, m = negclip_losses.negclip_loss(jnp.asarray(img), jnp.asarray(txt[:2 * B]), jnp.asarray(valid),
                                        jnp.float32(SCALE), jnp.float32(BIAS))
  texts = txt[:2 * B]  # B positives, then the B negatives: column B + b' is a column only where b' is valid
  hand = _sigmoid_matrix_loss(img, texts, lambda b, j: b == j, lambda b, j: j < B or valid[j - B])
  np.testing.assert_allclose(float(loss), hand, rtol=1e-5)
  own = [SCALE * img[b] @ txt[B + b] + BIAS for b in range(B)]
  acc = np.mean([_logit(img[b], txt[b]) > own[b] for b in range(B) if valid[b]])
  np.testing.assert_allclose(float(m["con/neg_acc"]), acc, rtol=1e-6)


def test_read_con_on_siglip_three_negatives_each_a_column(data):
  img, txt, _ = data
  args, neg_valid = _read_inputs(img, txt, 1)
  _, m = read_losses.read_loss(*args, bias=jnp.float32(BIAS))
  # [T (B); n1 (B); n2 (B); n3 (B)]: negative k of sample b' at column (1 + k)·B + b'
  hand_con = _sigmoid_matrix_loss(img, txt[:4 * B], lambda b, j: b == j,
                                  lambda b, j: j < B or neg_valid[j % B, j // B - 1])
  np.testing.assert_allclose(float(m["read/con"]), hand_con, rtol=1e-5)
  # the text-side terms as they are: the same values as on a CLIP with this scale
  _, clip_m = read_losses.read_loss(*args)
  for k in ("read/rec", "read/align"):
    np.testing.assert_allclose(float(m[k]), float(clip_m[k]), rtol=1e-6)


def test_clic_on_siglip_a_plus_one_for_each_of_the_images_four_positives(data):
  img, txt, valid = data
  loss, m = clic_losses.clic_loss(jnp.asarray(img), jnp.asarray(txt), jnp.asarray(valid), jnp.float32(SCALE),
                                  bias=jnp.float32(BIAS))
  # L_cont: one [B, 4B] label matrix, +1 at p^k_b for k = 1..4, −1 elsewhere; Σ / 4B
  cont = _sigmoid_matrix_loss(img, txt[:4 * B], lambda b, j: j % B == b, lambda b, j: True) / 4
  # L_S-Neg: each valid negative a −1 column for every image; Σ / B
  sneg = _sigmoid_matrix_loss(img, txt[4 * B:], lambda b, j: False, lambda b, j: valid[j])
  uni = np.mean(np.sum((txt[:B] - txt[B:2 * B]) ** 2, -1))
  np.testing.assert_allclose(float(m["clic/cont"]), cont, rtol=1e-5)
  np.testing.assert_allclose(float(m["clic/sneg"]), sneg, rtol=1e-5)
  np.testing.assert_allclose(float(m["clic/uni"]), uni, rtol=1e-5)
  np.testing.assert_allclose(float(loss), 0.5 * cont + 0.5 * sneg + uni, rtol=1e-5)


def test_clic_pair_softmax_is_the_references_s_neg_whatever_the_bias(data):
  img, txt, valid = data
  args = (jnp.asarray(img), jnp.asarray(txt), jnp.asarray(valid), jnp.float32(SCALE))
  _, m = clic_losses.clic_loss(*args, bias=jnp.float32(BIAS), negatives="pair_softmax")
  _, m2 = clic_losses.clic_loss(*args, bias=jnp.float32(3.0), negatives="pair_softmax")
  _, ref = clic_losses.clic_loss(*args)  # the reference's form on a CLIP
  hand = np.mean([
      np.log1p(np.exp(SCALE * img[b] @ txt[4 * B + b] - SCALE * img[b] @ txt[k * B + b])) for k in range(4)
      for b in range(B) if valid[b]
  ])
  for got in (m, m2, ref):
    np.testing.assert_allclose(float(got["clic/sneg"]), hand, rtol=1e-5)


def _pair_softmax_hand(img, pos, negs, valid):
  """Mean over the valid (b, k) of −log softmax([s·<i_b, pos_b>, s·<i_b, neg_kb>])[0], by loops (the bias cancels)."""
  terms = [
      np.log1p(np.exp(SCALE * img[b] @ negs[k][b] - SCALE * img[b] @ pos[b])) for b in range(len(img))
      for k in range(len(negs)) if valid[b, k]
  ]
  return np.mean(terms)


def test_negclip_pair_softmax_sigmoid_positives_plus_the_pair_softmax(data):
  img, txt, valid = data
  loss, m = negclip_losses.negclip_loss(jnp.asarray(img), jnp.asarray(txt[:2 * B]), jnp.asarray(valid),
                                        jnp.float32(SCALE), jnp.float32(BIAS), "pair_softmax")
  positives = _sigmoid_matrix_loss(img, txt[:B], lambda b, j: b == j, lambda b, j: True)  # SigLIP's own, B × B
  pairs = _pair_softmax_hand(img, txt[:B], [txt[B:2 * B]], valid[:, None])
  np.testing.assert_allclose(float(m["con/sigmoid"]), positives, rtol=1e-5)
  np.testing.assert_allclose(float(m["con/negatives"]), pairs, rtol=1e-5)
  np.testing.assert_allclose(float(loss), positives + pairs, rtol=1e-5)


def test_read_pair_softmax_each_of_the_three_negatives_against_its_own_positive(data):
  img, txt, _ = data
  args, neg_valid = _read_inputs(img, txt, 2)
  _, m = read_losses.read_loss(*args, bias=jnp.float32(BIAS), negatives="pair_softmax")
  _, m2 = read_losses.read_loss(*args, bias=jnp.float32(4.0), negatives="pair_softmax")
  positives = _sigmoid_matrix_loss(img, txt[:B], lambda b, j: b == j, lambda b, j: True)
  negs = [txt[(1 + k) * B:(2 + k) * B] for k in range(3)]
  np.testing.assert_allclose(float(m["read/con"]), positives + _pair_softmax_hand(img, txt[:B], negs, neg_valid),
                             rtol=1e-5)
  # another bias moves the sigmoid positives only: the pair term is the same whatever the bias
  positives4 = _sigmoid_matrix_loss(img, txt[:B], lambda b, j: b == j, lambda b, j: True, bias=4.0)
  np.testing.assert_allclose(float(m2["read/con"]), positives4 + _pair_softmax_hand(img, txt[:B], negs, neg_valid),
                             rtol=1e-5)


def test_an_unknown_negative_form_is_refused(data):
  img, txt, valid = data
  with pytest.raises(ValueError, match="siglip.negatives 'rows'"):
    clic_losses.clic_loss(jnp.asarray(img), jnp.asarray(txt), jnp.asarray(valid), jnp.float32(SCALE),
                          bias=jnp.float32(BIAS), negatives="rows")


def _c(**siglip):
  return base.sigmoid_forms(ml_collections.ConfigDict({"siglip": {**config_lib.base("clip").siglip, **siglip}}))


def test_the_switch_softmax_gives_the_clip_forms_and_a_clip_never_takes_a_bias():
  sig = SigLIP(siglip_config.tiny(), rngs=nnx.Rngs(0))
  clip = CLIP(clip_config.tiny(), rngs=nnx.Rngs(0))
  assert float(base.logit_bias(sig, _c())) == pytest.approx(-10.0)  # from scratch: b = −10 (SigLIP paper)
  assert base.logit_bias(sig, _c(contrastive="softmax")) is None
  assert base.logit_bias(clip, _c()) is None
  assert _c(negatives="pair_softmax").negatives == "pair_softmax"
  with pytest.raises(ValueError, match="no siglip.contrastive"):  # a config without the section: named, not guessed
    base.sigmoid_forms(ml_collections.ConfigDict({}))
  assert float(base.logit_scale(sig)) == pytest.approx(10.0)  # exp(log 10), the [1]-shaped parameter read as []


def test_bad_siglip_values_are_config_problems():
  c = recipes.load("clic").get_config()
  assert config_lib.problems(c) == []
  c.siglip.contrastive, c.siglip.negatives = "hinge", "rows"
  assert config_lib.problems(c) == [
      "siglip.contrastive 'hinge': must be one of sigmoid, softmax",
      "siglip.negatives 'rows': must be one of columns, pair_softmax"
  ]
