"""Flax T5 v1.1 decoder vs transformers' T5ForConditionalGeneration fed encoder_outputs [B, 1, d_model] (METHODS §4)."""
import numpy as np
import pytest
import torch
import transformers
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.t5 import modeling_t5

from compclip_jax.weights.loading import load_t5_decoder
from compclip_jax.models.t5 import relative_position_bucket, shift_right

TOL = 1e-4


def _random_v11(d_model, d_kv, d_ff, heads, layers, vocab, seed=0):
  torch.manual_seed(seed)
  cfg = transformers.T5Config(vocab_size=vocab, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=1,
                              num_decoder_layers=layers, num_heads=heads, feed_forward_proj="gated-gelu",
                              tie_word_embeddings=False, decoder_start_token_id=0)
  model = transformers.T5ForConditionalGeneration(cfg).eval()
  with torch.no_grad():  # v1.1 has an lm_head of its own; make it differ from `shared`, and perturb the norms
    model.lm_head.weight = torch.nn.Parameter(torch.randn(vocab, d_model) * d_model ** -0.5)
    for name, p in model.named_parameters():
      if "layer_norm" in name:
        p.add_(0.1 * torch.randn_like(p))
  return model


def _check(model, tmp_path, batch=3, length=40, seed=0):
  model.save_pretrained(tmp_path)
  ours, _ = load_t5_decoder(str(tmp_path))
  rng = np.random.default_rng(seed)
  cfg = model.config
  ids = rng.integers(0, cfg.vocab_size, (batch, length)).astype(np.int32)
  enc = rng.standard_normal((batch, 1, cfg.d_model)).astype(np.float32)
  with torch.no_grad():
    ref = model(encoder_outputs=BaseModelOutput(last_hidden_state=torch.as_tensor(enc)),
                decoder_input_ids=torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
  got = np.asarray(ours(ids, enc))
  np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)
  return ours, ids, enc, np.abs(got - ref).max()


def test_tiny_decoder_parity(tmp_path):
  # length 150 > max_distance 128, so the log-spaced buckets and their clamp are exercised
  _check(_random_v11(32, 8, 48, 4, 3, 128), tmp_path, length=150)


@pytest.mark.slow
def test_large_width_decoder_parity(tmp_path):
  """v1.1-large width (d_model 1024, 16 heads, d_ff 2816, vocab 32128) with two decoder layers."""
  _, _, _, delta = _check(_random_v11(1024, 64, 2816, 16, 2, 32128), tmp_path, batch=2, length=24)
  print(f"T5 large-width max |Δ| = {delta:.2e}")


def test_relative_buckets_match_transformers():
  rel = np.arange(-300, 300)[None, :]
  ref = modeling_t5.T5Attention._relative_position_bucket(torch.as_tensor(rel), bidirectional=False, num_buckets=32,
                                                          max_distance=128).numpy()
  np.testing.assert_array_equal(np.asarray(relative_position_bucket(rel, 32, 128)), ref)


def test_dropout_only_when_asked(tmp_path):
  import jax
  ours, ids, enc, _ = _check(_random_v11(32, 8, 48, 4, 2, 128), tmp_path)
  det = np.asarray(ours(ids, enc))
  np.testing.assert_array_equal(det, np.asarray(ours(ids, enc)))
  a = np.asarray(ours(ids, enc, dropout_rng=jax.random.key(1)))
  b = np.asarray(ours(ids, enc, dropout_rng=jax.random.key(1)))
  c = np.asarray(ours(ids, enc, dropout_rng=jax.random.key(2)))
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - det).max() > 1e-3 and np.abs(a - c).max() > 1e-3


def test_shift_right_matches_transformers():
  labels = np.array([[5, 6, 7, 1], [8, 1, -100, -100]])
  model = _random_v11(32, 8, 48, 4, 1, 128)
  np.testing.assert_array_equal(np.asarray(shift_right(labels)), model._shift_right(torch.as_tensor(labels)).numpy())


def test_original_t5_config_is_refused(tmp_path):
  import json
  (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "feed_forward_proj": "relu"}))
  with pytest.raises(ValueError, match="gated-gelu"):
    load_t5_decoder(str(tmp_path))


def test_saved_decoder_dir_loads_back_and_in_transformers(tmp_path):
  """save_t5_decoder_dir (the demo's cached READ decoder): our reader gets the same arrays back, and transformers
  loads it (encoder absent → freshly initialised, unused here) computing the original model's decoder logits."""
  from compclip_jax.weights import hf, params
  model = _random_v11(32, 8, 48, 4, 2, 50, seed=3)
  model.save_pretrained(tmp_path / "orig")
  ours, _ = load_t5_decoder(str(tmp_path / "orig"))
  flat = params.flat_params(ours)
  hf.save_t5_decoder_dir(ours.cfg, flat, str(tmp_path / "saved"))
  back, _ = load_t5_decoder(str(tmp_path / "saved"))
  for k, v in params.flat_params(back).items():
    np.testing.assert_array_equal(v, flat[k], err_msg=k)
  reloaded = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "saved").eval()
  rng = np.random.default_rng(0)
  ids = torch.as_tensor(rng.integers(0, 50, (2, 9)), dtype=torch.long)
  enc = BaseModelOutput(last_hidden_state=torch.as_tensor(rng.standard_normal((2, 1, 32)).astype(np.float32)))
  with torch.no_grad():
    want = model(encoder_outputs=enc, decoder_input_ids=ids).logits.numpy()
    got = reloaded(encoder_outputs=enc, decoder_input_ids=ids).logits.numpy()
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["xla", "auto"])
def test_fused_attention_matches_explicit_and_transformers(tmp_path, attention):
  """`attention` = jax.nn.dot_product_attention (scale 1, relative bias, causal flag) on the same weights: ≤ 1e-5 of
  the explicit formulation, within TOL of transformers; with a dropout key it runs the explicit path (same draws)."""
  import jax
  from flax import nnx
  from compclip_jax.models.t5 import T5Decoder
  ours, ids, enc, _ = _check(_random_v11(32, 8, 48, 4, 3, 128), tmp_path, length=150)
  fused = T5Decoder(ours.cfg, rngs=nnx.Rngs(0), attention=attention)
  nnx.update(fused, nnx.state(ours))
  got, ref = np.asarray(fused(ids, enc)), np.asarray(ours(ids, enc))
  np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
  key = jax.random.key(3)
  np.testing.assert_allclose(np.asarray(fused(ids, enc, key)), np.asarray(ours(ids, enc, key)), atol=1e-5, rtol=0)


@pytest.mark.parametrize("policy", ["full", "dots_no_batch"])
def test_remat_decoder_gives_the_same_logits_and_gradients_with_dropout(tmp_path, policy):
  """`remat` (READ's `model.remat_text`): the same logits and the same gradient with respect to the encoder states
  (what reaches W and CLIP), with dropout on (the same draws) and off."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from compclip_jax.models.t5 import T5Decoder
  ours, ids, enc, _ = _check(_random_v11(32, 8, 48, 4, 3, 128), tmp_path, length=20)
  remat = T5Decoder(ours.cfg, rngs=nnx.Rngs(0), remat=True, remat_policy=policy)
  nnx.update(remat, nnx.state(ours))
  assert remat.remat
  w = jnp.asarray(np.random.default_rng(4).standard_normal((3, 20, 128)), jnp.float32)
  for key in (None, jax.random.key(5)):

    def grad(model):
      gd, state = nnx.split(model)
      f = lambda e: jnp.sum(nnx.merge(gd, state)(ids, e, key) * w)
      return jax.jit(jax.value_and_grad(f))(jnp.asarray(enc))

    (v_ref, g_ref), (v, g) = grad(ours), grad(remat)
    np.testing.assert_allclose(float(v), float(v_ref), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), atol=1e-6 * float(np.abs(g_ref).max()), rtol=0)
