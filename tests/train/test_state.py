"""train/state.py's shapes-only build (what the TPU compile check uses): the same abstract state as the build from
real values — shapes, dtypes, shardings, trainable / frozen split — with no checkpoint weights read and nothing
random drawn."""
import jax
import numpy as np
import pytest

from compclip_jax import methods
from compclip_jax.train import state
from compclip_jax import sharding
from configs import clic, clic_read


def _abstract_state(c, shapes_only):
  model = state.build_model(c, methods.get(c.method), shapes_only=shapes_only)
  mesh = sharding.make_mesh(c.mesh.data, c.mesh.fsdp, jax.devices()[:4])
  st = state.build_state(c, model, mesh, 10, abstract=True)
  leaves = lambda t: [(jax.tree_util.keystr(p), x.shape, x.dtype, x.sharding)
                      for p, x in jax.tree_util.tree_flatten_with_path(t)[0]]
  return model, st, leaves(st.state) + leaves(st.frozen)


@pytest.mark.parametrize("module", [clic, clic_read], ids=["clic", "clic_read"])
def test_shapes_only_is_the_abstract_state_of_the_real_build(module):
  """Random CLIP (and, for clic_read, READ's random decoder + W): one build draws every parameter, the other none;
  the abstract states agree leaf for leaf (FSDP over 4 devices, so the shardings depend on the shapes)."""
  c = module.get_config("runlocal")
  c.mesh.data, c.mesh.fsdp, c.mesh.min_fsdp_size = 1, -1, 0
  c.model.frozen_dtype = "bfloat16"  # the frozen tower cast, as the paper configs do
  real_model, real, real_leaves = _abstract_state(c, shapes_only=False)
  model, st, leaves = _abstract_state(c, shapes_only=True)
  assert all(isinstance(v, jax.ShapeDtypeStruct) for v in model.flat.values())
  assert sorted(model.flat) == sorted(real_model.flat) and st.trainable_paths == real.trainable_paths
  assert leaves == real_leaves and len(leaves) > 10
  assert model.clip_cfg == real_model.clip_cfg and model.preprocess_mean == real_model.preprocess_mean


def test_shard_optimizer_puts_a_slice_of_each_moment_on_every_device():
  """mesh.shard_optimizer on a data-parallel mesh of 4: AdamW's two moments of each parameter ≥ min_fsdp_size are
  split 4 ways, on the axis a data-parallel run would replicate; the parameters stay whole on every device."""
  c = clic.get_config("runlocal")
  c.mesh.data, c.mesh.fsdp, c.mesh.min_fsdp_size, c.mesh.shard_optimizer = 4, 1, 1024, True
  _, st, _ = _abstract_state(c, shapes_only=True)
  params = jax.tree.leaves(st.state.trainable)
  big = [x for x in params if x.size >= 1024 and any(d % 4 == 0 for d in x.shape)]
  assert len(big) > 10 and all(x.sharding.is_fully_replicated for x in params)
  moments = [x for x in jax.tree.leaves(st.state.opt_state) if x.size >= 1024 and any(d % 4 == 0 for d in x.shape)]
  assert len(moments) == 2 * len(big)
  for x in moments:
    shard = x.sharding.shard_shape(x.shape)
    assert np.prod(shard) * 4 == x.size, (x.shape, shard)


def _checkpoints_without_weights(tmp_path):
  """An HF CLIP and an HF T5 v1.1 directory whose weight files hold no tensors: only their configs can be read."""
  import sentencepiece as spm
  import transformers
  from tests import hf_fixtures as fx
  fx.random_hf_clip(fx.hf_clip_config()).save_pretrained(tmp_path / "clip")
  t5_dir = tmp_path / "t5"
  t5_dir.mkdir()
  corpus = [f"a {c} {s} left of a {d}" for c in ("red", "blue", "green") for s in ("square", "disc") for d in "xyz"]
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(t5_dir / "spiece"), vocab_size=30,
                                 hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
  transformers.T5ForConditionalGeneration(
      transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=1, num_decoder_layers=2, num_heads=4,
                            feed_forward_proj="gated-gelu", tie_word_embeddings=False)).save_pretrained(t5_dir)
  for d in (tmp_path / "clip", t5_dir):
    (d / "model.safetensors").write_bytes(b"")
  return tmp_path / "clip", t5_dir


def test_shapes_only_reads_the_checkpoints_configs_not_their_weights(tmp_path):
  clip_dir, t5_dir = _checkpoints_without_weights(tmp_path)
  c = clic_read.get_config("runlocal")
  c.model.random, c.model.init, c.read.t5.init = "", str(clip_dir), str(t5_dir)
  with pytest.raises(Exception):  # training needs the weights: an empty file is refused
    state.build_model(c, methods.get(c.method))
  model, st, _ = _abstract_state(c, shapes_only=True)
  assert model.clip_cfg.text.width == 64 and model.export_info.d_model == 32  # hf_clip_config's and the T5's
  assert model.flat["decoder.lm_head.kernel"].shape == (64, 32)
  assert any(p.startswith("proj.") for p in st.trainable_paths)


@pytest.mark.parametrize("key", ["remat_text", "remat_vision"])
def test_the_config_rematerialises_the_tower_it_names(key):
  """model.remat_text / model.remat_vision reach the model the trainer builds (the text and vision tower's encoder),
  each alone; the parameters are the same either way."""
  from configs import read
  c = read.get_config("runlocal")
  c.model.remat_text = c.model.remat_vision = False
  c.model[key] = True
  model = state.build_model(c, methods.get(c.method), shapes_only=True)
  clip = model.abstract.clip
  assert clip.text_model.encoder.remat == (key == "remat_text")
  assert clip.vision_model.encoder.remat == (key == "remat_vision")
  c.model[key] = False
  assert sorted(state.build_model(c, methods.get(c.method), shapes_only=True).flat) == sorted(model.flat)


def test_the_demo_model_is_the_tiny_text_tower_with_a_wider_vision_tower_and_joint_space():
  """model.random="demo" (the demo's pretraining, demo/run.py DemoOptions.model): 100 colour–shape bindings need a
  joint space wider than tiny's 32 to be linearly readable; the text tower (and its token table: the shipped size) is
  tiny's."""
  from compclip_jax.models import clip_config
  from compclip_jax.train import trainer
  c = clic.get_config("runlocal")
  c.model.random = "demo"
  assert trainer._model_problems(c.model) == []  # pylint: disable=protected-access
  c.model.random = "huge"
  assert "use 'tiny', 'demo', 'siglip_tiny', 'siglip_demo' or one of" in trainer._model_problems(c.model)[0]  # pylint: disable=protected-access
  c.model.random = "demo"
  cfg = state.build_model(c, methods.get(c.method), shapes_only=True).clip_cfg
  assert cfg.text == clip_config.tiny().text and cfg.vision.width == 128 and cfg.embed_dim == 128
  assert cfg.vision.image_size == c.data.image_size
