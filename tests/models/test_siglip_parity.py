"""Flax SigLIP vs transformers' PyTorch `SiglipModel`, random init, fp32, CPU: embeddings and logits ≤ 1e-5; every
parameter through the HF map both ways; the parameter shapes of the public checkpoints' sizes (HF models built on
torch's meta device, no memory)."""
import numpy as np
import pytest
import torch
import transformers

from compclip_jax.models.siglip import config as sc
from compclip_jax.models.siglip.model import SigLIP
from compclip_jax.weights import maps, params

TOL = 1e-5


def _hf_model(cfg: sc.SiglipConfig, seed: int = 0) -> transformers.SiglipModel:
  torch.manual_seed(seed)
  model = transformers.SiglipModel(transformers.SiglipConfig(**sc.to_hf(cfg))).eval()
  with torch.no_grad():  # non-trivial LayerNorm affine, biases, scale and bias, so every mapping is exercised
    for name, p in model.named_parameters():
      if "norm" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
    model.logit_scale.fill_(2.3)
    model.logit_bias.fill_(-3.0)
  return model


def _ours_from(hf: transformers.SiglipModel, cfg: sc.SiglipConfig) -> SigLIP:
  abstract = params.abstract(lambda rngs: SigLIP(cfg, rngs=rngs))
  shapes = params.shapes(abstract)
  sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
  flat = maps.import_params(sd, maps.hf_rules(shapes), shapes, "hf SiglipModel")
  return params.fill(abstract, flat)


@pytest.mark.parametrize("act", ["gelu_pytorch_tanh", "gelu"])
def test_tiny_parity(act):
  base = sc.tiny()
  cfg = sc.SiglipConfig(sc.TextConfig(**{**base.text.__dict__, "act": act}),
                        sc.VisionConfig(**{**base.vision.__dict__, "act": act}))
  hf = _hf_model(cfg, seed=1)
  ours = _ours_from(hf, cfg)
  rng = np.random.default_rng(0)
  ids = rng.integers(0, cfg.text.vocab_size, (5, cfg.text.context_length)).astype(np.int32)
  ids[:, -4:] = cfg.text.pad_token_id  # padded as SigLIP is: the pooled last position is padding
  pixels = rng.standard_normal((3, 32, 32, 3)).astype(np.float32)
  with torch.no_grad():
    out = hf(input_ids=torch.from_numpy(ids).long(), pixel_values=torch.from_numpy(pixels).permute(0, 3, 1, 2))
    their_txt = hf.get_text_features(input_ids=torch.from_numpy(ids).long())
    their_img = hf.get_image_features(pixel_values=torch.from_numpy(pixels).permute(0, 3, 1, 2))
  their_txt = getattr(their_txt, "pooler_output", their_txt).numpy()
  their_img = getattr(their_img, "pooler_output", their_img).numpy()
  np.testing.assert_allclose(np.asarray(ours.encode_text(ids)), their_txt, atol=TOL, rtol=TOL)
  np.testing.assert_allclose(np.asarray(ours.encode_image(pixels)), their_img, atol=TOL, rtol=TOL)
  per_image, per_text = ours(ids, pixels)
  np.testing.assert_allclose(np.asarray(per_text), out.logits_per_text.numpy(), atol=TOL, rtol=TOL)
  np.testing.assert_allclose(np.asarray(per_image), out.logits_per_image.numpy(), atol=TOL, rtol=TOL)
  hidden = ours.text_model.hidden_states(ids)  # every position, not only the pooled one
  np.testing.assert_allclose(np.asarray(hidden), out.text_model_output.last_hidden_state.numpy(), atol=TOL, rtol=TOL)


def test_hf_map_round_trips_every_parameter():
  cfg = sc.tiny()
  hf = _hf_model(cfg, seed=2)
  ours = _ours_from(hf, cfg)
  flat = params.flat_params(ours)
  back = maps.export_params(flat, maps.hf_rules(flat))
  sd = hf.state_dict()
  assert sorted(back) == sorted(sd)
  for k, v in back.items():
    np.testing.assert_array_equal(v, sd[k].numpy(), err_msg=k)


# Sizes of the public checkpoints (SigLIP B/16 at 224 and 256, L/16 at 256, So400m/14 at 384; SigLIP 2 with the Gemma
# vocabulary at B/16 and B/32): the parameter shapes must equal transformers' for each.
SIZES = {
    "B-16-224": (dict(), dict()),
    "B-16-256": (dict(), dict(image_size=256)),
    "L-16-256": (dict(width=1024, layers=24, heads=16, mlp_dim=4096,
                      projection_size=1024), dict(image_size=256, width=1024, layers=24, heads=16, mlp_dim=4096)),
    "So400m-14-384":
        (dict(width=1152, layers=27, heads=16, mlp_dim=4304,
              projection_size=1152), dict(image_size=384, patch_size=14, width=1152, layers=27, heads=16,
                                          mlp_dim=4304)),
    "2-B-16-224": (dict(vocab_size=256000), dict()),
    "2-B-32-256": (dict(vocab_size=256000), dict(image_size=256, patch_size=32)),
}


@pytest.mark.parametrize("size", sorted(SIZES))
def test_named_sizes_have_transformers_shapes(size):
  t, v = SIZES[size]
  cfg = sc.SiglipConfig(sc.TextConfig(**t), sc.VisionConfig(**v))
  with torch.device("meta"):
    hf = transformers.SiglipModel(transformers.SiglipConfig(**sc.to_hf(cfg)))
  theirs = {k: tuple(p.shape) for k, p in hf.state_dict().items()}
  ours = params.shapes(params.abstract(lambda rngs: SigLIP(cfg, rngs=rngs)))
  rules = maps.hf_rules(ours)
  assert sorted(r.theirs for r in rules) == sorted(theirs)
  for r in rules:
    (path,) = r.ours
    want = theirs[r.theirs]
    assert (ours[path] if r.transform is maps.KEEP else maps._their_shape(r, [ours[path]])) == want, path  # pylint: disable=protected-access


def test_configs_round_trip_through_hf_and_a_naflex_checkpoint_is_refused():
  cfg = sc.tiny()
  assert sc.from_hf(transformers.SiglipConfig(**sc.to_hf(cfg)).to_dict()) == cfg
  with pytest.raises(ValueError, match="Siglip2Model .NaFlex"):
    sc.from_hf({"model_type": "siglip2", "text_config": {}, "vision_config": {}})
