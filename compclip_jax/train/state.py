"""The trainer's state, built in one place: the model (CLIP, or the method's model around it) and its initial
parameters, the trainable / frozen split (every parameter matched by exactly one rule), the optimiser, the shardings
and the jitted step of each step kind — real (training) or abstract (shapes and shardings only: compile checks and
benchmarks, nothing allocated). `train`, `bench` and `bench_device` all call `build_state`.
"""
from __future__ import annotations

import dataclasses
from typing import Any
import logging

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from compclip_jax import assets
from compclip_jax.data.images import Preprocess
from compclip_jax.data.tokenizers import CLIPTokenizer, SiglipTokenizer
from compclip_jax.errors import UserError
from compclip_jax.methods import Method
from compclip_jax.models import clip_config
from compclip_jax.models.layers import DTypes
from compclip_jax.models.siglip import config as siglip_config
from compclip_jax.train import config as config_lib
from compclip_jax.train import optim, steps
from compclip_jax import sharding
from compclip_jax.weights import loading, params


@dataclasses.dataclass
class Model:
  """What training needs to know about the model it builds (a CLIP, or a SigLIP: `clip_cfg` a SiglipConfig)."""
  abstract: nnx.Module
  # initial parameters (numpy, stored dtype): the frozen ones are exported from here, bit for bit; ShapeDtypeStructs
  # where built `shapes_only`
  flat: dict
  clip_cfg: clip_config.CLIPConfig | siglip_config.SiglipConfig
  tokenizer: CLIPTokenizer | SiglipTokenizer
  target_tokenizer: Any  # the samples' "target" captions' tokenizer (Extension.target_tokenizer), or None
  preprocess_mean: tuple
  preprocess_std: tuple
  export_info: object = None  # the method's (Extension.export_info), handed to its export_parts
  preprocess_squash: bool = False  # SigLIP's square resize instead of CLIP's resize + centre crop
  # model.init's HF config.json (loading.read_source_config): the export writes it back, every field kept; None for a
  # random model or an open_clip checkpoint
  source_config: dict | None = None

  @property
  def preprocess(self) -> Preprocess:
    """The model's eval transform (input size, mean, std, resize): what evaluation, the samples and the export use."""
    return Preprocess(self.clip_cfg.vision.image_size, tuple(self.preprocess_mean), tuple(self.preprocess_std),
                      squash=self.preprocess_squash)


def clip_factory(c: ml_collections.ConfigDict):
  """(cfg, rngs=None) → the two-tower module of its family (a CLIP, or a SigLIP for a SiglipConfig) with the run's
  dtypes, attention, remat and scan settings, drawn from `rngs` (default: the run's seed)."""
  m = c.model
  text_dt = DTypes(compute=m.text_compute_dtype or m.compute_dtype)
  vision_dt = DTypes(compute=m.vision_compute_dtype or m.compute_dtype)

  def make(cfg, rngs: nnx.Rngs | None = None):
    return loading.model_class(cfg)(cfg, rngs=nnx.Rngs(c.seed) if rngs is None else rngs, text_dtypes=text_dt,
                                    vision_dtypes=vision_dt, remat_text=m.remat_text, remat_vision=m.remat_vision,
                                    attention=m.attention, remat_policy=m.remat_policy, scan_layers=m.scan_layers,
                                    pad_tokens_to=m.pad_tokens_to)

  return make


SIGLIP_RANDOM = "siglip_tiny"  # model.random: a tiny random SigLIP (:runlocal smoke runs of the SigLIP family)
SIGLIP_SIZES = {SIGLIP_RANDOM: siglip_config.tiny, "siglip_demo": siglip_config.demo}  # the demo's: --family=siglip


def _random_model(c: ml_collections.ConfigDict):
  """(config, tokenizer, preprocess) of model.random: "tiny" / "demo" / a named CLIP size, or "siglip_tiny" /
  "siglip_demo" — a small SigLIP whose SentencePiece tokenizer is the bundled one (compclip_jax/assets), no
  download."""
  if c.model.random in SIGLIP_SIZES:
    cfg = SIGLIP_SIZES[c.model.random]()
    tok = SiglipTokenizer(assets.SYNTHETIC_SPIECE, cfg.text.context_length)
    cfg = dataclasses.replace(cfg, text=dataclasses.replace(cfg.text,
                                                            vocab_size=max(cfg.text.vocab_size, tok.vocab_size)))
    cfg = dataclasses.replace(cfg, vision=dataclasses.replace(cfg.vision, image_size=c.data.image_size))
    return cfg, tok, Preprocess(c.data.image_size, siglip_config.MEAN, siglip_config.STD, squash=True)
  small = {"tiny": clip_config.tiny, "demo": clip_config.demo}
  cfg = small[c.model.random]() if c.model.random in small else clip_config.named(c.model.random)
  if cfg.vision.image_size != c.data.image_size:
    cfg = cfg.replace(vision=dataclasses.replace(cfg.vision, image_size=c.data.image_size))
  return cfg, CLIPTokenizer.default(), Preprocess(cfg.vision.image_size, clip_config.OPENAI_MEAN,
                                                  clip_config.OPENAI_STD)


def build_model(c: ml_collections.ConfigDict, method: Method, shapes_only: bool = False) -> Model:
  """CLIP from model.init (or random: model.random), around it the method's model (`Method.extend_model`).

  `shapes_only`: no parameter values at all — the checkpoints' configs and tokenizers are read, never their weights,
  and nothing random is drawn; `Model.flat` holds ShapeDtypeStructs. What a compile check needs (`build_state(…,
  abstract=True)`): a ViT-L/14 + T5-large build costs no host memory and no minutes of random init.
  """
  make_clip = clip_factory(c)
  abstract_clip = lambda cfg: params.abstract(lambda rngs: make_clip(cfg, rngs))
  if c.model.init and shapes_only:
    cfg, tok, pre = loading.load_clip_meta(c.model.init, c.model.model_name or None, c.model.activation or None)
    flat = params.param_structs(abstract_clip(cfg))
  elif c.model.init:
    cfg, flat, tok, pre, _ = loading.load_clip_params(c.model.init, c.model.model_name or None, c.model.activation or
                                                      None, abstract_clip)
  else:
    cfg, tok, pre = _random_model(c)
    flat = params.param_structs(abstract_clip(cfg)) if shapes_only else params.flat_params(make_clip(cfg))
  if tok is None:
    raise UserError(f"{c.model.init}: no tokenizer (non-standard vocabulary without tokenizer files)")
  tok = tok.with_cleaning(c.data.clean_text)  # METHODS §1.2 step 7: open_clip's ftfy / html cleaning
  source = loading.read_source_config(c.model.init) if c.model.init else None
  if method.extend_model is None:
    return Model(abstract_clip(cfg), flat, cfg, tok, None, pre.mean, pre.std, preprocess_squash=pre.squash,
                 source_config=source)
  ext = method.extend_model(c, cfg, flat, make_clip, shapes_only=shapes_only)
  return Model(ext.abstract, ext.flat, cfg, tok, ext.target_tokenizer, pre.mean, pre.std, ext.export_info, pre.squash,
               source_config=source)


@dataclasses.dataclass
class State:
  """The sharded state (`steps.TrainState`), the frozen parameters, their shardings, the optimiser and the graph."""
  graphdef: nnx.GraphDef
  state: steps.TrainState  # real arrays, or jax.ShapeDtypeStruct with shardings (abstract)
  frozen: nnx.State
  state_sh: steps.TrainState  # a TrainState of shardings
  frozen_sh: object
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  trainable_paths: list[str]


def split_parameters(c: ml_collections.ConfigDict, model: Model):
  """(graphdef, trainable, frozen in model.frozen_dtype, {trainable path: decay group}) by the config's rules: each
  parameter matched by exactly one of optim.trainable / optim.frozen, each trainable one by exactly one of
  optim.decay / optim.no_decay (optim.RuleError lists every one that is not)."""
  groups = optim.assign(model.flat, {"trainable": c.optim.trainable, "frozen": c.optim.frozen})
  trainable_paths = [p for p, g in groups.items() if g == "trainable"]
  decay = optim.assign(trainable_paths, {"decay": c.optim.decay, "no_decay": c.optim.no_decay})
  is_trainable = lambda path, _: groups.get(".".join(map(str, path))) == "trainable"
  shapes_only = all(isinstance(v, jax.ShapeDtypeStruct) for v in model.flat.values())
  filled = model.abstract if shapes_only else params.fill(model.abstract, model.flat)
  graphdef, trainable, frozen = nnx.split(filled, is_trainable, ...)
  frozen_dtype = jnp.dtype(c.model.frozen_dtype)
  cast = lambda x: (jax.ShapeDtypeStruct(x.shape, frozen_dtype) if shapes_only else x.astype(frozen_dtype))
  frozen = jax.tree.map(lambda x: cast(x) if jnp.issubdtype(x.dtype, jnp.floating) else x, frozen)
  return graphdef, trainable, frozen, decay


def _abstract(tree, shardings):
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def build_state(c: ml_collections.ConfigDict, model: Model, mesh: jax.sharding.Mesh, total_steps: int,
                abstract: bool = False) -> State:
  """Parameter rules, optimiser and shardings; the state on the devices, or (`abstract`) only its shapes and
  shardings. Optimiser moments get their parameter's sharding (the size rule depends on the shape only), or with
  `mesh.shard_optimizer` one over every device."""
  graphdef, trainable, frozen, decay = split_parameters(c, model)
  if not abstract and any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(trainable)):
    raise ValueError("a model built shapes_only has no values: build_state(…, abstract=True) only")
  logging.info("parameters: %s trainable, %s frozen (%s)", f"{sum(x.size for x in jax.tree.leaves(trainable)):,}",
               f"{sum(x.size for x in jax.tree.leaves(frozen)):,}", c.model.frozen_dtype)
  schedule = optim.make_schedule(c.optim.schedule, total_steps, c.optim, config_lib.passes(c))
  tx = optim.make_optimizer(schedule, optim.decay_mask_tree(trainable, decay), c.optim)
  train_sh = sharding.state_shardings(mesh, trainable, c.mesh.min_fsdp_size)
  frozen_sh = sharding.state_shardings(mesh, frozen, c.mesh.min_fsdp_size)
  opt_shapes = jax.eval_shape(tx.init, trainable)
  # the optimiser's moments over every device (`mesh.shard_optimizer`): each device updates its slice, so the update
  # reads and writes 1/N of the moments and parameters, and XLA all-gathers the new parameters (docs/tpu.md)
  opt_sh = sharding.state_shardings(mesh, opt_shapes, c.mesh.min_fsdp_size, every_device=c.mesh.shard_optimizer)
  rep = sharding.replicated(mesh)
  state_sh = steps.TrainState(rep, train_sh, opt_sh, rep)
  paths = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(trainable)]
  if abstract:
    state = steps.TrainState(jax.ShapeDtypeStruct((), jnp.int32), trainable, opt_shapes,
                             jax.eval_shape(lambda: jax.random.PRNGKey(0)))
    return State(graphdef, _abstract(state, state_sh), _abstract(frozen, frozen_sh), state_sh, frozen_sh, tx, schedule,
                 paths)
  trainable = jax.device_put(trainable, train_sh)
  state = steps.TrainState(jax.device_put(jnp.int32(0), rep), trainable,
                           jax.jit(tx.init, out_shardings=opt_sh)(trainable),
                           jax.device_put(jax.random.PRNGKey(c.seed), rep))
  return State(graphdef, state, jax.device_put(frozen, frozen_sh), state_sh, frozen_sh, tx, schedule, paths)


def jit_steps(c: ml_collections.ConfigDict, method: Method, model: Model, st: State, mesh) -> dict:
  """kind name → jax.jit(step) of every kind the config runs (state donated), compiled on first use. Each kind's
  images are normalised with its own constants (`StepKind.normalization`, METHODS §1.2 step 4)."""
  size = model.clip_cfg.vision.image_size
  batch_sh = sharding.batch_sharding(mesh)
  out = {}
  for k in method.step_kinds(c):
    norm = k.normalization(k.options(c, size), model.preprocess_mean, model.preprocess_std)
    step = steps.under_mesh(
        steps.make_step(k, st.graphdef, st.tx, st.schedule, norm, k.loss_options(c), c.optim.clamp_logit_scale,
                        st.state_sh.trainable if c.mesh.shard_optimizer else None), mesh)
    out[k.name] = jax.jit(step, in_shardings=(st.state_sh, st.frozen_sh, batch_sh), out_shardings=(st.state_sh, None),
                          donate_argnums=(0,))
  return out


def initial_flat(model: Model) -> dict:
  """{path: (shape, dtype)} of every parameter (the run's fingerprint)."""
  return {k: (np.shape(v), np.asarray(v).dtype) for k, v in model.flat.items()}
