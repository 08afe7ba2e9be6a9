"""READ's W starts as torch's nn.Linear default (METHODS §2.1), and READ's data defaults follow its reference."""
import math

import jax
import numpy as np
import pytest

from compclip_jax import methods
from compclip_jax.train import state
from compclip_jax.methods.read.model import proj_init as read_proj_init, torch_linear_init


def test_torch_linear_init_matches_torch_statistics():
  torch = pytest.importorskip("torch")
  fan_in, fan_out = 512, 1024
  ours = np.asarray(torch_linear_init(jax.random.PRNGKey(0), (fan_in, fan_out)))  # kernel [in, out]
  torch.manual_seed(0)
  ref = torch.nn.Linear(fan_in, fan_out, bias=False).weight.detach().numpy().T  # weight [out, in] → [in, out]
  bound = 1 / math.sqrt(fan_in)
  assert ours.shape == ref.shape and ours.dtype == np.float32
  assert np.abs(ours).max() <= bound and np.abs(ours).max() > 0.999 * bound  # uniform in ±1/√fan_in
  assert abs(ours.std() - 1 / math.sqrt(3 * fan_in)) < 2e-4 and abs(ours.mean()) < 2e-4
  assert abs(ours.std() - ref.std()) < 2e-4 and abs(np.abs(ref).max() - np.abs(ours).max()) < 1e-5
  # same distribution: the histograms over [-bound, bound] agree bin by bin (both flat)
  bins = np.linspace(-bound, bound, 11)
  h_ours, h_ref = np.histogram(ours, bins)[0] / ours.size, np.histogram(ref, bins)[0] / ref.size
  np.testing.assert_allclose(h_ours, 0.1, atol=0.004)
  np.testing.assert_allclose(h_ref, h_ours, atol=0.005)


def test_lecun_normal_is_the_old_switch_and_sqrt3_wider():
  w = np.asarray(read_proj_init("lecun_normal")(jax.random.PRNGKey(0), (512, 1024)))
  assert abs(w.std() - 1 / math.sqrt(512)) < 5e-4
  t = np.asarray(read_proj_init("torch_linear")(jax.random.PRNGKey(0), (512, 1024)))
  assert abs(w.std() / t.std() - math.sqrt(3)) < 0.02
  with pytest.raises(ValueError, match="read.proj_init"):
    read_proj_init("xavier")


@pytest.mark.parametrize("init", ["torch_linear", "lecun_normal"])
def test_build_model_initialises_w_by_the_switch(tmp_path, init):
  from configs import read
  c = read.get_config("runlocal")
  c.read.proj_init = init
  c.read.t5.random_d_model = 48  # not the text width (64): W is not square, so its [out, in] layout shows in its shape
  m = state.build_model(c, methods.get(c.method))
  w = m.flat["proj.kernel"]
  fan_in = m.clip_cfg.text.width
  assert w.shape == (m.export_info.d_model, fan_in)  # [out, in], as torch stores nn.Linear.weight
  if init == "torch_linear":
    assert np.abs(w).max() <= 1 / math.sqrt(fan_in)
    assert abs(w.std() * math.sqrt(3 * fan_in) - 1) < 0.1
  else:
    assert np.abs(w).max() > 1 / math.sqrt(fan_in)
    assert abs(w.std() * math.sqrt(fan_in) - 1) < 0.1


def test_read_config_defaults_follow_its_reference():
  from configs import clic, read
  c = read.get_config()
  assert tuple(c.data.splits) == ("train",)  # Karpathy train only (METHODS §2.2)
  assert c.read.proj_init == "torch_linear"
  assert not c.data.clean_text  # transformers' CLIPTokenizerFast: no ftfy / html cleaning
  k = clic.get_config()
  assert k.data.clean_text and k.data.alpha_premultiplied_resize  # open_clip's tokenizer and transform
