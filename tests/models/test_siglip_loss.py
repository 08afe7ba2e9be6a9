"""SigLIP's sigmoid loss against transformers' `SiglipModel(return_loss=True)` on the same model and inputs, and its
sharded form (text blocks round the ring) against the global one on an 8-device CPU mesh: loss and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from compclip_jax.models.siglip import config as sc
from compclip_jax.models.siglip.loss import sharded_sigmoid_loss, sigmoid_loss
from tests.models.test_siglip_parity import _hf_model, _ours_from


def test_the_loss_is_transformers_siglip_loss():
  cfg = sc.tiny()
  hf = _hf_model(cfg, seed=4)
  ours = _ours_from(hf, cfg)
  rng = np.random.default_rng(1)
  ids = rng.integers(0, cfg.text.vocab_size, (6, cfg.text.context_length)).astype(np.int32)
  pixels = rng.standard_normal((6, 32, 32, 3)).astype(np.float32)
  with torch.no_grad():
    want = hf(input_ids=torch.from_numpy(ids).long(), pixel_values=torch.from_numpy(pixels).permute(0, 3, 1, 2),
              return_loss=True).loss.item()
  got = sigmoid_loss(ours.encode_image(pixels, normalize=True), ours.encode_text(ids, normalize=True),
                     ours.logit_scale[...], ours.logit_bias[...])
  np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_the_sharded_loss_equals_the_global_one_with_its_gradients():
  devices = jax.devices()
  assert len(devices) == 8  # tests/conftest.py: 8 CPU devices
  mesh = Mesh(np.array(devices), ("data",))
  rng = np.random.default_rng(0)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  img = jnp.asarray(unit(rng.standard_normal((32, 16))), jnp.float32)
  txt = jnp.asarray(unit(rng.standard_normal((32, 16))), jnp.float32)
  scale, bias = jnp.array([np.log(10.0)], jnp.float32), jnp.array([-10.0 + 9.0], jnp.float32)
  rows = NamedSharding(mesh, P("data"))
  img_s, txt_s = jax.device_put(img, rows), jax.device_put(txt, rows)
  glob = jax.value_and_grad(sigmoid_loss, argnums=(0, 1, 2, 3))
  shard = jax.jit(jax.value_and_grad(lambda *a: sharded_sigmoid_loss(*a, mesh=mesh), argnums=(0, 1, 2, 3)))
  (l0, g0), (l1, g1) = glob(img, txt, scale, bias), shard(img_s, txt_s, scale, bias)
  np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
  for a, b in zip(g1, g0):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # two TPU compiles, 15–40 s on 2 cores
def test_the_sharded_loss_holds_a_block_per_device_on_tpu():
  """libtpu's own memory analysis on a v5e-8 at a global batch of 16,384 (b = 2,048 per device; embeddings 64 wide:
  the pairs' memory does not depend on the width): the global form holds the device's [b, B] rows of logits
  (128 MiB) and gathers every text; the sharded form no more than a [b, b] block (16 MiB) and gathers nothing.
  (Below ~16k XLA fuses the global form's logits into their reduction and holds none: tools/siglip_loss_memory.py.)"""
  pytest.importorskip("libtpu", reason="no TPU compiler here: pip install -r requirements-tpu-compile.txt")
  import importlib.util
  import os
  from tests import paths
  spec = importlib.util.spec_from_file_location("m", os.path.join(paths.ROOT, "tools", "siglip_loss_memory.py"))
  tool = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(tool)
  r = tool.measure(16384, width=64)
  glob, shard = r["global"], r["sharded"]
  assert glob["temp_bytes"] >= 2048 * 16384 * 4 and "all-gather" in glob["collectives"]
  assert shard["temp_bytes"] <= 2048 * 2048 * 4 and "all-gather" not in shard["collectives"]
  assert "collective-permute" in shard["collectives"]
