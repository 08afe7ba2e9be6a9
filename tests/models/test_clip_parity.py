"""Flax CLIP vs transformers' PyTorch CLIPModel, random init, fp32, CPU (METHODS §4)."""
import dataclasses

import numpy as np
import pytest

from compclip_jax import load_clip
from tests import hf_fixtures as fx

EMB_TOL, LOGIT_TOL = 1e-4, 1e-3


def _pixels(n, size, seed=0):
  return np.random.default_rng(seed).standard_normal((n, size, size, 3)).astype(np.float32)


# (activation, eos_token_id in config, token placed at the end of each caption, pad, vocab)
CASES = {
    "quickgelu-argmax": ("quick_gelu", 2, 49407, 0, 49408),  # OpenAI / open_clip style
    "gelu-argmax": ("gelu", 2, 49407, 49407, 49408),  # HF pads with EOT; argmax still finds the first
    # First-EOT rule where argmax would pick another token: body ids above the EOS id precede it.
    "quickgelu-first-eos": ("quick_gelu", 500, 500, 500, 1000),
    "gelu-first-eos": ("gelu", 500, 500, 0, 1000),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_parity(tmp_path, case):
  act, eos_cfg, eot, pad, vocab = CASES[case]
  hf = fx.random_hf_clip(fx.hf_clip_config(act, eos_cfg, vocab))
  hf.save_pretrained(tmp_path)
  model, _, _ = load_clip(str(tmp_path))
  ids = fx.varied_ids(6, 77, vocab, eot, pad, seed=1)
  if eos_cfg != 2:  # make sure the two pooling rules really disagree on this batch
    assert (np.argmax(ids, 1) != np.argmax(ids == eot, 1)).any()
  px = _pixels(3, 32)
  np.testing.assert_allclose(np.asarray(model.encode_text(ids)), fx.hf_text(hf, ids), atol=EMB_TOL, rtol=0)
  np.testing.assert_allclose(np.asarray(model.encode_image(px)), fx.hf_image(hf, px), atol=EMB_TOL, rtol=0)
  logits, logits_t = model(ids, px)
  np.testing.assert_allclose(np.asarray(logits), fx.hf_logits(hf, ids, px), atol=LOGIT_TOL, rtol=0)
  np.testing.assert_array_equal(np.asarray(logits_t), np.asarray(logits).T)


def test_pooling_rule_matters(tmp_path):
  """Guard for the test above: the wrong rule gives different text embeddings."""
  act, eos_cfg, eot, pad, vocab = CASES["quickgelu-first-eos"]
  hf = fx.random_hf_clip(fx.hf_clip_config(act, eos_cfg, vocab))
  hf.save_pretrained(tmp_path)
  model, _, _ = load_clip(str(tmp_path))
  ids = fx.varied_ids(6, 77, vocab, eot, pad, seed=1)
  model.text_model.cfg = dataclasses.replace(model.cfg.text, eos_token_id=2)  # the other rule
  assert np.abs(np.asarray(model.encode_text(ids)) - fx.hf_text(hf, ids)).max() > 1e-2


@pytest.mark.slow
def test_vit_b32_parity(tmp_path):
  """The real ViT-B/32 shape (random weights): text + image embeddings and logits_per_image."""
  hf = fx.random_hf_clip(fx.hf_clip_config(real_b32=True))
  hf.save_pretrained(tmp_path)
  model, tokenizer, _ = load_clip(str(tmp_path))
  ids = tokenizer([
      "a photo of a cat", "a photo of a dog", "a red cube to the left of a small blue ball",
      "two men riding gray horses next to a white fence on a sunny day " * 6
  ])  # last one truncated
  px = _pixels(2, 224)
  txt, img = np.asarray(model.encode_text(ids)), np.asarray(model.encode_image(px))
  ref_txt, ref_img = fx.hf_text(hf, ids), fx.hf_image(hf, px)
  np.testing.assert_allclose(txt, ref_txt, atol=EMB_TOL, rtol=0)
  np.testing.assert_allclose(img, ref_img, atol=EMB_TOL, rtol=0)
  np.testing.assert_allclose(np.asarray(model(ids, px)[0]), fx.hf_logits(hf, ids, px), atol=LOGIT_TOL, rtol=0)
  print(f"ViT-B/32 max |Δ|: text {np.abs(txt - ref_txt).max():.2e}, image {np.abs(img - ref_img).max():.2e}")


@pytest.mark.parametrize("case", ["quickgelu-argmax", "gelu-first-eos"])
def test_last_block_at_the_pooled_position_only_is_exact(tmp_path, case):
  """The towers run their last block at the pooled position only (Encoder `rows`, docs/performance.md): every
  position's hidden state (`hidden_states`, the full last block) equals transformers' last_hidden_state, and the
  pooled output and its gradient equal the full path's read at EOT; the vision tower's equal a full last block's."""
  import jax
  import jax.numpy as jnp
  import torch
  from flax import nnx
  from compclip_jax.models.clip import eot_positions
  act, eos_cfg, eot, pad, vocab = CASES[case]
  hf = fx.random_hf_clip(fx.hf_clip_config(act, eos_cfg, vocab))
  hf.save_pretrained(tmp_path)
  model, _, _ = load_clip(str(tmp_path))
  ids = fx.varied_ids(6, 77, vocab, eot, pad, seed=3)
  tm = model.text_model
  with torch.no_grad():
    ref_hidden = hf.text_model(input_ids=torch.as_tensor(ids, dtype=torch.long)).last_hidden_state.numpy()
  hidden = np.asarray(tm.hidden_states(ids))
  np.testing.assert_allclose(hidden, ref_hidden, atol=1e-5, rtol=0)
  eot_at = np.asarray(eot_positions(ids, tm.cfg))
  assert len(set(eot_at.tolist())) > 1  # EOT at several positions, not only the last
  np.testing.assert_allclose(np.asarray(tm(ids)), hidden[np.arange(len(ids)), eot_at], atol=1e-6, rtol=0)
  # gradients of a function of the pooled output, through the short last block and through the full one
  graphdef, params = nnx.split(tm)
  cot = jnp.asarray(np.random.default_rng(0).standard_normal((len(ids), tm.cfg.width)).astype(np.float32))
  short = jax.grad(lambda p: jnp.sum(nnx.merge(graphdef, p)(ids) * cot))(params)
  full = jax.grad(lambda p: jnp.sum(nnx.merge(graphdef, p).hidden_states(ids)[jnp.arange(len(ids)), eot_at] * cot))(
      params)
  for a, b in zip(jax.tree.leaves(short), jax.tree.leaves(full)):  # fp32 summation order; some are 0 ± 1e-7
    a, b = np.asarray(a), np.asarray(b)
    assert np.abs(a - b).max() <= 1e-5 * max(np.abs(b).max(), 0.1), (np.abs(a - b).max(), np.abs(b).max())
  # vision: the full last block, then the class token
  vm, px = model.vision_model, jnp.asarray(_pixels(3, 32))
  full_vision = vm.post_layernorm(vm.encoder(vm.embed(px), causal=False)[:, 0])
  np.testing.assert_allclose(np.asarray(vm(px)), np.asarray(full_vision), atol=1e-6, rtol=0)


@pytest.mark.parametrize("case", ["quickgelu-argmax", "gelu-first-eos"])
def test_trimming_padding_changes_nothing(tmp_path, case):
  """The pipeline's token trimming (data.trim_tokens) is exact: text embeddings of trimmed ids equal the full ones."""
  from compclip_jax.data import pipeline as pl
  act, eos_cfg, eot, pad, vocab = CASES[case]
  hf = fx.random_hf_clip(fx.hf_clip_config(act, eos_cfg, vocab))
  hf.save_pretrained(tmp_path)
  model, _, _ = load_clip(str(tmp_path))
  ids = fx.varied_ids(6, 77, vocab, eot, pad, seed=2)
  ids[0, 20:] = pad  # make the longest caption 20 tokens
  ids[0, 19] = eot
  length = pl.text_length({"ids": ids}, eot)
  assert length == int(max(np.argmax(ids == eot, 1))) + 1
  cut = pl.trim_tokens({"ids": ids, "image": np.zeros(1)}, length)["ids"]
  assert cut.shape[1] == -(-length // 16) * 16 < 77
  np.testing.assert_allclose(np.asarray(model.encode_text(cut)), np.asarray(model.encode_text(ids)), atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", ["quickgelu-argmax", "gelu-first-eos"])
def test_padding_the_token_width_changes_nothing(tmp_path, case):
  """model.pad_tokens_to: 77 tokens run as 80 (pad tokens past the context length, no position embedding) give
  transformers' embeddings at 77, the same gradient as at 77, and hidden states of the batch's own width."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  act, eos_cfg, eot, pad, vocab = CASES[case]
  hf = fx.random_hf_clip(fx.hf_clip_config(act, eos_cfg, vocab))
  hf.save_pretrained(tmp_path)
  model, _, _ = load_clip(str(tmp_path))
  ids = fx.varied_ids(6, 77, vocab, eot, pad, seed=3)
  ids[1, 70:] = vocab - 1  # a caption that runs to the last position
  ids[1, 76] = eot

  def run(pad_to):
    model.text_model.pad_tokens_to = pad_to
    grad = nnx.grad(lambda m: jnp.sum(m.encode_text(ids, normalize=True)[:, :4]))(model)
    return (np.asarray(model.encode_text(ids)), np.asarray(model.text_model.hidden_states(jnp.asarray(ids))),
            jax.tree.leaves(nnx.state(grad, nnx.Param)))

  (emb, hidden, grad), (emb80, hidden80, grad80) = run(1), run(16)
  assert model.text_model._padded(jnp.asarray(ids)).shape == (6, 80) and hidden80.shape == hidden.shape
  np.testing.assert_allclose(emb80, fx.hf_text(hf, ids), atol=EMB_TOL, rtol=0)
  np.testing.assert_allclose(emb80, emb, atol=1e-6, rtol=0)
  np.testing.assert_allclose(hidden80, hidden, atol=1e-5, rtol=0)
  for g, g80 in zip(grad, grad80):
    np.testing.assert_allclose(np.asarray(g80), np.asarray(g), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["ViT-B-32", "ViT-B-16", "ViT-L-14", "ViT-L-14-336"])
def test_named_shapes_match_transformers(name):
  """The built-in open_clip shapes, written as an HF config.json, give transformers' parameter count exactly."""
  import numpy as np_
  import torch
  import transformers
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  from compclip_jax.weights import params
  cfg = clip_config.named(f"{name}-quickgelu")
  assert clip_config.from_hf_dict(clip_config.to_hf_dict(cfg)) == cfg
  with torch.device("meta"):
    ref = transformers.CLIPModel(transformers.CLIPConfig.from_dict(clip_config.to_hf_dict(cfg)))
  ours = params.shapes(params.abstract(lambda rngs: CLIP(cfg, rngs=rngs)))
  assert sum(int(np_.prod(s)) for s in ours.values()) == sum(p.numel() for p in ref.parameters())


def _tiny_pair(attention: str, **kw):
  """An explicit-attention tiny CLIP and one with `attention` (or other options) holding the very same weights."""
  from flax import nnx
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  ref = CLIP(clip_config.tiny(), rngs=nnx.Rngs(0))
  other = CLIP(clip_config.tiny(), rngs=nnx.Rngs(1), attention=attention, **kw)
  nnx.update(other, nnx.state(ref))
  return ref, other


@pytest.mark.parametrize("attention", ["xla", "auto"])
def test_fused_attention_matches_explicit(attention):
  """model.attention = jax.nn.dot_product_attention: causal text (every position's hidden state, so a missing
  mask shows) and non-causal vision within 1e-5 of the explicit formulation, fp32."""
  ref, fused = _tiny_pair(attention)
  ids = fx.varied_ids(6, 77, 49408, 49407, 0, seed=1)
  px = _pixels(3, 32)
  np.testing.assert_allclose(np.asarray(fused.text_model.hidden_states(ids)),
                             np.asarray(ref.text_model.hidden_states(ids)), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(fused.encode_image(px)), np.asarray(ref.encode_image(px)), atol=1e-5, rtol=0)


def test_unknown_attention_or_remat_policy_is_refused():
  from flax import nnx
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  with pytest.raises(ValueError, match="model.attention 'flash'"):
    CLIP(clip_config.tiny(), rngs=nnx.Rngs(0), attention="flash")
  with pytest.raises(ValueError, match="model.remat_policy 'some'"):
    CLIP(clip_config.tiny(), rngs=nnx.Rngs(0), remat_text=True, remat_policy="some")


@pytest.mark.parametrize("policy", ["full", "dots_no_batch", "dots_saveable", "none"])
def test_remat_policies_give_the_same_gradients(policy):
  """Rematerialisation recomputes; it must not change the text tower's gradients."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  ref, remat = _tiny_pair("explicit", remat_text=True, remat_policy=policy)
  ids = fx.varied_ids(4, 20, 49408, 49407, 0, seed=2)
  w = jnp.asarray(np.random.default_rng(3).standard_normal((4, 32)), jnp.float32)

  def grads(model):
    gd, params, rest = nnx.split(model, nnx.Param, ...)
    loss = lambda p: jnp.sum(nnx.merge(gd, p, rest).encode_text(ids, normalize=True) * w)
    return jax.jit(jax.grad(loss))(params)  # one program, as the trainer runs it (not ~150 eager ops)

  g_ref, g = grads(ref), grads(remat)
  assert remat.text_model.encoder.remat == (policy != "none")
  for a, b in zip(jax.tree.leaves(g_ref), jax.tree.leaves(g)):  # two programs, fused differently: fp32 rounding
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(b, a, atol=1e-6 * max(1.0, np.abs(a).max()), rtol=1e-5)


def test_vision_remat_gives_the_same_gradients():
  """model.remat_vision (READ trains the vision tower): the vision tower's blocks recomputed, the same gradients of
  every parameter, and the text tower untouched."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  ref, remat = _tiny_pair("explicit", remat_vision=True)
  px = _pixels(3, 32)
  w = jnp.asarray(np.random.default_rng(4).standard_normal((3, 32)), jnp.float32)

  def grads(model):
    gd, params, rest = nnx.split(model, nnx.Param, ...)
    loss = lambda p: jnp.sum(nnx.merge(gd, p, rest).encode_image(px, normalize=True) * w)
    return jax.jit(jax.grad(loss))(params)  # one program, as the trainer runs it (not ~150 eager ops)

  assert remat.vision_model.encoder.remat and not remat.text_model.encoder.remat
  g_ref, g = grads(ref), grads(remat)
  for a, b in zip(jax.tree.leaves(g_ref), jax.tree.leaves(g)):  # two programs, fused differently: fp32 rounding
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(b, a, atol=1e-6 * max(1.0, np.abs(a).max()), rtol=1e-5)


@pytest.mark.parametrize("remat", [False, True])
def test_scanned_layers_are_the_same_function(remat):
  """model.scan_layers: each tower's blocks before the last as one lax.scan over their stacked parameters. With 4
  layers (a scan of 3): every hidden state of the causal text tower, the image embeddings and the text tower's
  gradients equal the unrolled loop's, with and without remat; the parameters keep their per-layer paths."""
  import dataclasses
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  from compclip_jax.weights import params
  cfg = clip_config.tiny()
  cfg = cfg.replace(text=dataclasses.replace(cfg.text, layers=4), vision=dataclasses.replace(cfg.vision, layers=4))
  ref = CLIP(cfg, rngs=nnx.Rngs(0))
  scanned = CLIP(cfg, rngs=nnx.Rngs(1), scan_layers=True, remat_text=remat)
  assert params.shapes(scanned) == params.shapes(ref)  # same parameters, same paths: checkpoints are unchanged
  nnx.update(scanned, nnx.state(ref))
  ids = fx.varied_ids(4, 20, 49408, 49407, 0, seed=2)
  px = _pixels(3, 32)
  np.testing.assert_allclose(np.asarray(scanned.text_model.hidden_states(ids)),
                             np.asarray(ref.text_model.hidden_states(ids)), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(scanned.encode_image(px)), np.asarray(ref.encode_image(px)), atol=1e-5, rtol=0)
  w = jnp.asarray(np.random.default_rng(3).standard_normal((4, 32)), jnp.float32)

  def grads(model):
    gd, p, rest = nnx.split(model, nnx.Param, ...)
    loss = lambda p: jnp.sum(nnx.merge(gd, p, rest).encode_text(ids, normalize=True) * w)
    return jax.grad(loss)(p)

  g_ref, g = grads(ref), grads(scanned)
  assert jax.tree.structure(g_ref) == jax.tree.structure(g)
  gd, state = nnx.split(scanned)
  assert " scan[" in str(jax.make_jaxpr(lambda s: nnx.merge(gd, s).encode_text(ids))(state))  # it did scan
  scale = max(float(np.abs(a).max()) for a in jax.tree.leaves(g_ref))
  for a, b in zip(jax.tree.leaves(g_ref), jax.tree.leaves(g)):  # fp32 reassociation: ≤ 1e-6 of the largest gradient
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6 * scale, rtol=0)
