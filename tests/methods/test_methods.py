"""The methods (compclip_jax/methods/): CLIC's alternation against hand-written sequences, each method's kinds, the
losses of READ and CLIC+READ against hand computations from losses.py's pieces, CLIC+READ's samples against CLIC's,
the console line's loss terms, and no method or kind name in the modules that iterate over methods."""
import io
import os
import tokenize

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from tests import paths
from compclip_jax import methods
from compclip_jax.methods.clic import losses as clic_losses
from compclip_jax.methods.read import losses as read_losses
from compclip_jax.data import pipeline as pl
from compclip_jax.data.images import IMAGENET_MEAN, IMAGENET_STD
from compclip_jax.data.sources import CsvSource
from compclip_jax.train.metrics import MetricWriter
from compclip_jax.models import clip_config
from compclip_jax.models.clip import CLIP
from compclip_jax.methods.read.model import READModel
from compclip_jax.models.t5 import T5Config
from compclip_jax.methods.clic import samples as clic_samples
from tests import data_fixtures as df

PKG = paths.PKG


def _names(method, clip_every, n):
  c = ml_collections.ConfigDict({"clic": {"clip_every": clip_every}})
  return [method.kind_at(c, g).name for g in range(n)]


def test_clic_alternation_by_hand():
  clic = methods.get("clic")
  assert _names(clic, 0, 5) == ["clic"] * 5
  assert _names(clic, 1, 6) == ["clic", "clic_clip", "clic", "clic_clip", "clic", "clic_clip"]
  assert _names(clic, 3, 9) == ["clic", "clic", "clic", "clic_clip", "clic", "clic", "clic", "clic_clip", "clic"]
  for clip_every, period, kinds in ((0, 1, ["clic"]), (1, 2, ["clic", "clic_clip"]), (3, 4, ["clic", "clic_clip"])):
    c = ml_collections.ConfigDict({"clic": {"clip_every": clip_every}})
    assert clic.period(c) == period and [k.name for k in clic.step_kinds(c)] == kinds
  # CLIC+READ alternates the same way, with CLIC's own CLIP step (one "clic_clip" data stream for both)
  assert _names(methods.get("clic_read"), 3, 5) == ["clic_read"] * 3 + ["clic_clip", "clic_read"]
  assert _names(methods.get("clic_read"), 0, 3) == ["clic_read"] * 3
  assert methods.step_kind("clic_clip") is methods.get("clic_read").kinds[1]


@pytest.mark.parametrize("name", ["read", "negclip", "clip"])
def test_single_kind_methods_ignore_clip_every(name):
  assert _names(methods.get(name), 1, 3) == [name] * 3


def test_lookups_name_the_known_ones():
  assert methods.names() == ("clic", "read", "negclip", "clip", "clic_read")
  with pytest.raises(ValueError, match="clic_read"):
    methods.get("clip_read")
  with pytest.raises(ValueError, match="clic_clip"):
    methods.step_kind("clipclip")
  with pytest.raises(TypeError, match="StepKind"):
    pl.PipelineConfig("clic", 4)  # a kind name is not a kind: the pipeline needs its builder


def test_decoder_methods_need_a_decoder():
  from configs import clic, clic_read, read  # pylint: disable=import-outside-toplevel
  c = clic_read.get_config()
  assert any("read.t5.init" in e for e in methods.get("clic_read").problems(c))
  assert any("read.t5.init" in e for e in methods.get("read").problems(read.get_config()))
  assert methods.get("clic").problems(clic.get_config()) == []
  c.read.t5.random = True
  assert methods.get("clic_read").problems(c) == []


def test_no_method_or_kind_names_in_the_generic_modules():
  """train/, the pipeline and the sample helpers iterate over method objects: no string literal names one."""
  names = set(methods.names()) | {k.name for m in methods.ALL for k in m.kinds}
  rels = [os.path.join("train", f) for f in sorted(os.listdir(os.path.join(PKG, "train"))) if f.endswith(".py")]
  for rel in rels + ["data/pipeline.py", "data/samples.py"]:
    with open(os.path.join(PKG, rel), encoding="utf-8") as f:
      toks = tokenize.generate_tokens(io.StringIO(f.read()).readline)
      found = [(rel, t.start[0], t.string) for t in toks if t.type == tokenize.STRING and t.string.strip("'\"") in names
              ]
    assert not found, found


def test_console_line_shows_the_methods_terms(tmp_path):
  values = {
      "loss": 1.0, "loss/clic_read": 1.0, "clic/cont": 2.0, "clic/acc_i2t": 0.5, "read/rec": 3.0, "read/align": 4.0,
      "con/i2t": 5.0
  }
  line = MetricWriter(str(tmp_path / "a"), 10, 8, console_terms=methods.get("clic_read").console_terms).line(1, values)
  assert "clic/cont 2.0000" in line and "read/rec 3.0000" in line and "read/align 4.0000" in line
  assert "acc_i2t" not in line and "con/i2t" not in line
  assert "read/rec" not in MetricWriter(str(tmp_path / "b"), 10, 8, console_terms=("cont",)).line(1, values)
  w = MetricWriter(str(tmp_path / "c"), 10, 8, peak_flops=100.0)
  w.set_flops(10.0)
  w.write(1, {"loss": 1.0}, console=False)
  assert w.write(2, {"loss": 1.0}, console=False)["mfu"] > 0


# ------------------------------------------------------------------------------------------- losses by hand
B, L, T = 4, 12, 9
LOSS_CONFIG = ml_collections.ConfigDict(
    dict(clic=dict(w_cont=0.5, w_sneg=0.5, w_uni=1.0), read=dict(w_con=1.0, w_rec=0.1, w_align=0.5,
                                                                 align_direction="para_to_orig", t5_dropout=False),
         siglip=dict(contrastive="sigmoid", negatives="columns")))  # a CLIP ignores it


@pytest.fixture(scope="module")
def model():
  t5 = T5Config(vocab_size=50, d_model=32, d_kv=16, d_ff=48, num_decoder_layers=1, num_heads=2)
  return READModel(CLIP(clip_config.tiny(vocab_size=100), rngs=nnx.Rngs(0)), t5, rngs=nnx.Rngs(1))


def _ids(rng, k):
  """[B, k, L] caption tokens: SOT 98, words, EOT 99 (the largest id: argmax pooling), pad 0."""
  ids = np.zeros((B, k, L), np.int32)
  for b in range(B):
    for j in range(k):
      n = rng.integers(2, L - 2)
      ids[b, j, 0], ids[b, j, 1:n + 1], ids[b, j, n + 1] = 98, rng.integers(1, 98, n), 99
  return ids


def _targets(rng):
  """[B, T] T5 targets: pieces, EOS 1, pad 0."""
  t = np.zeros((B, T), np.int32)
  for b in range(B):
    n = rng.integers(1, T - 1)
    t[b, :n], t[b, n] = rng.integers(2, 50, n), 1
  return t


def _unit(x):
  x = np.asarray(x, np.float64)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _by_hand_encoding(model, batch, mean, std, k):
  """Image embeddings [B, D] and, set by set, the pooled outputs [k][B, W] and unit text embeddings [k][B, D]."""
  pixels = (batch["image"].astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
  img = _unit(model.clip.encode_image(jnp.asarray(pixels)))
  pooled = [model.clip.text_model(jnp.asarray(batch["ids"][:, j])) for j in range(k)]
  txt = [_unit(model.clip.text_projection(p)) for p in pooled]
  return img, pooled, txt


def _shifted(t):
  """Decoder inputs by hand: start token 0, then the target without its last position."""
  return np.concatenate([np.zeros((len(t), 1), np.int32), t[:, :-1]], axis=1)


def _f32(x):
  return jnp.asarray(x, jnp.float32)


def _jitted_loss(kind, model, batch, norm):
  """`kind`'s loss and metrics as a step computes them: one jitted program (eagerly, ~300 ops compiled one by one)."""
  options = kind.loss_options(LOSS_CONFIG)
  loss = nnx.jit(lambda m, b: kind.loss(m, b, jax.random.PRNGKey(0), norm, options))
  return loss(model, {k: jnp.asarray(v) for k, v in batch.items()})


def test_clic_read_loss_is_clic_plus_reads_terms_by_hand(model):
  rng = np.random.default_rng(0)
  batch = {
      "image": rng.integers(0, 256, (B, 32, 32, 3), dtype=np.uint8), "ids": _ids(rng, 5),
      "neg_valid": np.array([True, False, True, True]), "t5_target": _targets(rng)
  }
  kind = methods.step_kind("clic_read")
  norm = kind.normalization(clic_samples.Options(), clip_config.OPENAI_MEAN, clip_config.OPENAI_STD)
  assert norm == (IMAGENET_MEAN, IMAGENET_STD)
  loss, m = _jitted_loss(kind, model, batch, norm)

  img, pooled, txt = _by_hand_encoding(model, batch, IMAGENET_MEAN, IMAGENET_STD, 5)
  s = np.exp(float(model.clip.logit_scale[...]))
  l_clic, _ = clic_losses.clic_loss(_f32(img), _f32(np.concatenate(txt)), jnp.asarray(batch["neg_valid"]), s, 0.5, 0.5,
                                    1.0)
  logits = model.reconstruct(pooled[0], jnp.asarray(_shifted(batch["t5_target"])))  # W·pooled(p1) → p2
  l_rec = read_losses.token_reconstruction(logits, jnp.asarray(batch["t5_target"]))
  l_align = read_losses.sentence_alignment(_f32(txt[3]), _f32(txt[2]), s)  # each p4 among the batch's p3
  np.testing.assert_allclose(float(loss), float(l_clic + 0.1 * l_rec + 0.5 * l_align), rtol=1e-5)
  np.testing.assert_allclose(float(m["read/rec"]), float(l_rec), rtol=1e-5)
  np.testing.assert_allclose(float(m["read/align"]), float(l_align), rtol=1e-5)
  np.testing.assert_allclose(float(m["clic/cont"] * 0.5 + m["clic/sneg"] * 0.5 + m["clic/uni"]), float(l_clic),
                             rtol=1e-5)
  assert float(m["loss"]) == float(loss)


def test_read_loss_by_hand(model):
  """READ's step: the decoder input is the target shifted right on device (was built by the pipeline)."""
  rng = np.random.default_rng(1)
  batch = {
      "image": rng.integers(0, 256, (B, 32, 32, 3), dtype=np.uint8), "ids": _ids(rng, 4), "neg_valid": rng.random(
          (B, 3)) < 0.7, "para_ids": _ids(rng, 1)[:, 0], "t5_target": _targets(rng)
  }
  kind = methods.step_kind("read")
  norm = kind.normalization(clic_samples.Options(), clip_config.OPENAI_MEAN, clip_config.OPENAI_STD)
  loss, m = _jitted_loss(kind, model, batch, norm)

  img, pooled, txt = _by_hand_encoding(model, batch, clip_config.OPENAI_MEAN, clip_config.OPENAI_STD, 4)
  para = _unit(model.clip.encode_text(jnp.asarray(batch["para_ids"])))
  s = np.exp(float(model.clip.logit_scale[...]))
  logits = model.reconstruct(pooled[0], jnp.asarray(_shifted(batch["t5_target"])))
  want, _ = read_losses.read_loss(_f32(img), _f32(np.concatenate(txt)), jnp.asarray(batch["neg_valid"]), _f32(para),
                                  logits, jnp.asarray(batch["t5_target"]), s, 0.1, 0.5)
  np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
  assert {"read/con", "read/rec", "read/align"} <= set(m)


# --------------------------------------------------------------------------------------------------- samples
@pytest.mark.parametrize("concat", [True, False])
def test_clic_read_samples_are_clics_plus_p2_as_the_target(tmp_path, tok, tagger, t5tok, concat):
  csv, root, _, _ = df.write_clic_csv(tmp_path, n=12, broken=False)
  src = CsvSource(str(csv), str(root))
  opts = clic_samples.Options(image_size=32, concat=concat)
  clic = pl.SampleTransform(src, pl.PipelineConfig(methods.step_kind("clic"), 1, options=opts), tok, tagger=tagger)
  both = pl.SampleTransform(src, pl.PipelineConfig(methods.step_kind("clic_read"), 1, options=opts), tok, t5tok,
                            tagger=tagger)
  for i in range(len(src)):
    a, b = clic(i, np.random.default_rng([7, i])), both(i, np.random.default_rng([7, i]))
    assert set(b) - set(a) == {"t5_target"} and "t5_input" not in b
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])  # same image, texts, negative: CLIC's random stream unchanged
    rng = np.random.default_rng([7, i])  # the same draws by hand: partner first, then CLIC's sample
    rec = src.materialize(src[i])
    partner = both._partner(i, rng) if concat else None  # pylint: disable=protected-access
    texts = clic_samples.sample(rec, partner, rng, tagger, opts)["texts"]
    np.testing.assert_array_equal(b["t5_target"], t5tok([texts[1]])[0])  # the target is p2
    if not concat:  # single image: p1 = p2, the target is the positive itself
      assert texts[0] == texts[1]
  with pytest.raises(ValueError, match="T5 tokenizer"):
    pl.SampleTransform(src, pl.PipelineConfig(methods.step_kind("clic_read"), 1, options=opts), tok, tagger=tagger)


def test_clic_read_target_is_p2(tmp_path, tagger):
  csv, root, _, _ = df.write_clic_csv(tmp_path, n=6, broken=False)
  src = CsvSource(str(csv), str(root))
  opts = clic_samples.Options(image_size=32)
  rec, partner = src.materialize(src[0]), src.materialize(src[1])
  s = methods.step_kind("clic_read").sample(rec, partner, np.random.default_rng(3), tagger, opts)
  ref = clic_samples.sample(rec, partner, np.random.default_rng(3), tagger, opts)
  assert s["texts"] == ref["texts"] and s["target"] == ref["texts"][1]
  assert s["target"].startswith(partner["sentences"][0].strip().rstrip("."))  # p2 = j.first + i.first


def test_per_set_is_the_tower_on_the_stacked_sets():
  """base.per_set runs the captions sample-major and reorders the outputs: the rows of fn(stacked(ids)), set by set."""
  from compclip_jax.methods import base  # pylint: disable=import-outside-toplevel
  from compclip_jax.models import clip_config  # pylint: disable=import-outside-toplevel
  from compclip_jax.models.clip import CLIP  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel
  clip = CLIP(clip_config.tiny(), rngs=nnx.Rngs(0))
  ids = np.random.default_rng(0).integers(1, 400, (3, 5, 12)).astype(np.int32)
  ids[..., -1] = clip_config.tiny().text.vocab_size - 1  # EOT
  want = clip.text_model(base.stacked(jnp.asarray(ids)))
  got = base.per_set(clip.text_model, jnp.asarray(ids))
  assert got.shape == (15, clip_config.tiny().text.width)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-6)
  assert not np.allclose(np.asarray(got[:3]), np.asarray(got[3:6]))  # sets differ: the order is checked
  by_sample = base.per_sample(clip.text_model, jnp.asarray(ids))  # [B, K, width]: what READ's decoder reads
  for k in range(5):
    np.testing.assert_array_equal(np.asarray(by_sample[:, k]), np.asarray(got[3 * k:3 * (k + 1)]))


@pytest.mark.parametrize("name", ["clic", "negclip", "read", "clic_read", "clip"])
def test_each_config_switch_reaches_the_sample_options(name):
  """Every sample switch of a method's config section arrives in the options its samples get, each under its own
  name: flip one and exactly that field changes (a positional construction that shifted the fields — concat landing
  in another switch — made CLIC's single-image ablation train as CLIC itself)."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from compclip_jax import recipes  # pylint: disable=import-outside-toplevel
  c = recipes.load(name).get_config("runlocal")
  for kind in methods.get(name).step_kinds(c):
    base = kind.options(c, 48)
    assert base.image_size == 48
    fields = {f.name for f in dataclasses.fields(base) if isinstance(getattr(base, f.name), bool)} - {"squash"}
    sections = [k for k in ("data", *c.keys()) if isinstance(c[k], ml_collections.ConfigDict)]
    switches = [(section, f) for f in sorted(fields) for section in sections
                if f in c[section] and isinstance(c[section][f], bool)]
    if kind.name == "read":  # READ drops alpha before resizing whatever data.alpha_premultiplied_resize says
      switches = [s for s in switches if s[1] != "alpha_premultiplied_resize"]
    assert {f for _, f in switches} >= fields - {"alpha_premultiplied_resize"}, (kind.name, fields, switches)
    for section, field in switches:
      flipped = c.copy_and_resolve_references()
      flipped[section][field] = not c[section][field]
      got = kind.options(flipped, 48)
      changed = {f for f in fields if getattr(got, f) != getattr(base, f)}
      assert changed == {field} and getattr(got, field) == flipped[section][field], (kind.name, section, field)
      if kind.name == "clic":  # and the defaults are the config's own
        assert getattr(base, field) == c[section][field], field


def test_sample_options_take_keywords_only():
  with pytest.raises(TypeError):
    clic_samples.Options(64, True, False)  # pylint: disable=too-many-function-args
