"""open_clip / timm SigLIP state dicts in and out (docs/siglip.md): open_clip's CustomTextCLIP with a timm
`vit_*_siglip_*` trunk (`ViT-B-16-SigLIP`, `ViT-SO400M-14-SigLIP2`, …) ↔ our SigLIP (models/siglip/).

Their layout: `text.*` (open_clip's TextTransformer: fused `in_proj`, `c_fc` / `c_proj`, `ln_final`, a
`text_projection` Linear with bias — our `text_model.head`), `visual.trunk.*` (timm: `patch_embed.proj`, `pos_embed`
[1, N, D], `blocks.i.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}`, `norm`, and the pooling head
`attn_pool.{latent, q, kv, proj, norm, mlp}`), `logit_scale` and `logit_bias` as scalars. The pooling head's q and
fused k/v are one [3D, D] `in_proj_weight` in ours (torch's MultiheadAttention, as HF stores it): joined on reading,
split on writing.

What the shapes do not record — heads and activations — comes from `open_clip_config.json` beside the file (its
`model_cfg`: the text tower's heads and `act_kwargs`, the timm trunk's name) or from a model name (`OPEN_CLIP_NAMES`).
The trunks' heads and activations (`TIMM_TRUNKS`) are those of timm 1.0.31's definitions: SigLIP 1 trunks and some
SigLIP 2 ones use exact GELU, where the HF conversions of the same weights use the tanh approximation — a file is
read as open_clip runs it.
"""
from __future__ import annotations

import json
import logging
import os
import re

import numpy as np

from compclip_jax.errors import UserError
from compclip_jax.models.siglip import config as sc
from compclip_jax.weights import files, maps

# timm trunk name → (vision heads, activation); every one pools with `attn_pool` ("map")
TIMM_TRUNKS = {
    "vit_base_patch32_siglip_256": (12, "gelu_pytorch_tanh"),
    **{f"vit_base_patch16_siglip_{s}": (12, "gelu") for s in (224, 256, 384, 512)},
    "vit_large_patch16_siglip_256": (16, "gelu"),
    "vit_large_patch16_siglip_384": (16, "gelu"),
    "vit_large_patch16_siglip_512": (16, "gelu_pytorch_tanh"),
    **{f"vit_so400m_patch14_siglip_{s}": (16, "gelu") for s in (224, 378, 384)},
    **{f"vit_so400m_patch16_siglip_{s}": (16, "gelu_pytorch_tanh") for s in (256, 384, 512)},
    **{f"vit_giantopt_patch16_siglip_{s}": (16, "gelu_pytorch_tanh") for s in (256, 384)},
}
# open_clip model name → (timm trunk, text heads, text activation) of its model config (open_clip 3.3.0)
_V1 = {
    "ViT-B-16-SigLIP": "vit_base_patch16_siglip_224", "ViT-B-16-SigLIP-256": "vit_base_patch16_siglip_256",
    "ViT-B-16-SigLIP-i18n-256": "vit_base_patch16_siglip_256", "ViT-B-16-SigLIP-384": "vit_base_patch16_siglip_384",
    "ViT-B-16-SigLIP-512": "vit_base_patch16_siglip_512", "ViT-L-16-SigLIP-256": "vit_large_patch16_siglip_256",
    "ViT-L-16-SigLIP-384": "vit_large_patch16_siglip_384", "ViT-SO400M-14-SigLIP": "vit_so400m_patch14_siglip_224",
    "ViT-SO400M-14-SigLIP-378": "vit_so400m_patch14_siglip_378",
    "ViT-SO400M-14-SigLIP-384": "vit_so400m_patch14_siglip_384",
    "ViT-SO400M-16-SigLIP-i18n-256": "vit_so400m_patch16_siglip_256"
}
_V2 = {
    "ViT-B-16-SigLIP2": "vit_base_patch16_siglip_224", "ViT-B-16-SigLIP2-256": "vit_base_patch16_siglip_256",
    "ViT-B-16-SigLIP2-384": "vit_base_patch16_siglip_384", "ViT-B-16-SigLIP2-512": "vit_base_patch16_siglip_512",
    "ViT-B-32-SigLIP2-256": "vit_base_patch32_siglip_256", "ViT-L-16-SigLIP2-256": "vit_large_patch16_siglip_256",
    "ViT-L-16-SigLIP2-384": "vit_large_patch16_siglip_384", "ViT-L-16-SigLIP2-512": "vit_large_patch16_siglip_512",
    "ViT-SO400M-14-SigLIP2": "vit_so400m_patch14_siglip_224",
    "ViT-SO400M-14-SigLIP2-378": "vit_so400m_patch14_siglip_378",
    **{f"ViT-SO400M-16-SigLIP2-{s}": f"vit_so400m_patch16_siglip_{s}" for s in (256, 384, 512)},
    **{f"ViT-gopt-16-SigLIP2-{s}": f"vit_giantopt_patch16_siglip_{s}" for s in (256, 384)}
}
# text heads: 12 for the 768-wide text towers, 16 for every wider one; SigLIP 2's text GELU is the tanh one
OPEN_CLIP_NAMES = {
    **{n: (t, 12 if n.startswith("ViT-B") else 16, "gelu") for n, t in _V1.items()},
    **{n: (t, 12 if n.startswith("ViT-B") else 16, "gelu_pytorch_tanh") for n, t in _V2.items()}
}
_TIMM_ACTS = {"gelu_tanh": "gelu_pytorch_tanh", "gelu": "gelu"}  # timm's act_layer names → ours
TRUNK = "visual.trunk."
_POOL_Q, _POOL_KV, _POOL_FUSED = TRUNK + "attn_pool.q.", TRUNK + "attn_pool.kv.", TRUNK + "attn_pool.in_proj_"


def is_siglip_state_dict(sd) -> bool:
  return any(k.startswith(TRUNK + "attn_pool.") for k in sd)


# ---------------------------------------------------------------------------------------------------------- the map
RESHAPE_SCALAR = maps.Transform("scalar", lambda a: a[0].reshape(()), lambda t, n: (np.reshape(t, (1,)),))
UNSQUEEZE = maps.Transform("unsqueeze", lambda a: a[0][None], lambda t, n: (t[0],))  # [N, D] ↔ [1, N, D]
# (our suffix(es) under vision_model.encoder.layers.{i}., timm's under visual.trunk.blocks.{i}., transform)
_TIMM_BLOCK = [
    (("layer_norm1.scale",), "norm1.weight", maps.KEEP),
    (("layer_norm1.bias",), "norm1.bias", maps.KEEP),
    (("self_attn.q_proj.kernel", "self_attn.k_proj.kernel", "self_attn.v_proj.kernel"), "attn.qkv.weight", maps.FUSED),
    (("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"), "attn.qkv.bias", maps.FUSED),
    (("self_attn.out_proj.kernel",), "attn.proj.weight", maps.KEEP),
    (("self_attn.out_proj.bias",), "attn.proj.bias", maps.KEEP),
    (("layer_norm2.scale",), "norm2.weight", maps.KEEP),
    (("layer_norm2.bias",), "norm2.bias", maps.KEEP),
    (("mlp.fc1.kernel",), "mlp.fc1.weight", maps.KEEP),
    (("mlp.fc1.bias",), "mlp.fc1.bias", maps.KEEP),
    (("mlp.fc2.kernel",), "mlp.fc2.weight", maps.KEEP),
    (("mlp.fc2.bias",), "mlp.fc2.bias", maps.KEEP),
]
_TOP = [
    ("logit_scale", "logit_scale", RESHAPE_SCALAR),
    ("logit_bias", "logit_bias", RESHAPE_SCALAR),
    ("text_model.embeddings.token_embedding.embedding", "text.token_embedding.weight", maps.KEEP),
    ("text_model.embeddings.position_embedding.embedding", "text.positional_embedding", maps.KEEP),
    ("text_model.final_layer_norm.scale", "text.ln_final.weight", maps.KEEP),
    ("text_model.final_layer_norm.bias", "text.ln_final.bias", maps.KEEP),
    ("text_model.head.kernel", "text.text_projection.weight", maps.KEEP),
    ("text_model.head.bias", "text.text_projection.bias", maps.KEEP),
    ("vision_model.embeddings.patch_embedding.kernel", TRUNK + "patch_embed.proj.weight", maps.CONV),
    ("vision_model.embeddings.patch_embedding.bias", TRUNK + "patch_embed.proj.bias", maps.KEEP),
    ("vision_model.embeddings.position_embedding.embedding", TRUNK + "pos_embed", UNSQUEEZE),
    ("vision_model.post_layernorm.scale", TRUNK + "norm.weight", maps.KEEP),
    ("vision_model.post_layernorm.bias", TRUNK + "norm.bias", maps.KEEP),
    ("vision_model.head.probe", TRUNK + "attn_pool.latent", maps.KEEP),
    ("vision_model.head.attention.in_proj_weight", _POOL_FUSED + "weight", maps.KEEP),  # q ; kv joined (`join_pool`)
    ("vision_model.head.attention.in_proj_bias", _POOL_FUSED + "bias", maps.KEEP),
    ("vision_model.head.attention.out_proj.kernel", TRUNK + "attn_pool.proj.weight", maps.KEEP),
    ("vision_model.head.attention.out_proj.bias", TRUNK + "attn_pool.proj.bias", maps.KEEP),
    ("vision_model.head.layernorm.scale", TRUNK + "attn_pool.norm.weight", maps.KEEP),
    ("vision_model.head.layernorm.bias", TRUNK + "attn_pool.norm.bias", maps.KEEP),
    ("vision_model.head.mlp.fc1.kernel", TRUNK + "attn_pool.mlp.fc1.weight", maps.KEEP),
    ("vision_model.head.mlp.fc1.bias", TRUNK + "attn_pool.mlp.fc1.bias", maps.KEEP),
    ("vision_model.head.mlp.fc2.kernel", TRUNK + "attn_pool.mlp.fc2.weight", maps.KEEP),
    ("vision_model.head.mlp.fc2.bias", TRUNK + "attn_pool.mlp.fc2.bias", maps.KEEP),
]


def rules(text_layers: int, vision_layers: int) -> list[maps.Rule]:
  """The map of a SigLIP with these depths (the text blocks as open_clip's CLIP map names them)."""
  out = [maps.Rule((ours,), theirs, t) for ours, theirs, t in _TOP]
  for tower, prefix, block, n in (("text_model", "text.transformer.resblocks.", maps.OPEN_CLIP_BLOCK, text_layers),
                                  ("vision_model", TRUNK + "blocks.", _TIMM_BLOCK, vision_layers)):
    for i in range(n):
      out += [
          maps.Rule(tuple(f"{tower}.encoder.layers.{i}.{s}" for s in ours), f"{prefix}{i}.{theirs}", t)
          for ours, theirs, t in block
      ]
  return out


def join_pool(sd: dict) -> dict:
  """timm's pooling head q [D, D] and kv [2D, D] (weights and biases) → one `in_proj_` [3D, D] entry each."""
  out = {k: v for k, v in sd.items() if not k.startswith((_POOL_Q, _POOL_KV))}
  for leaf in ("weight", "bias"):
    if _POOL_Q + leaf in sd and _POOL_KV + leaf in sd:
      out[_POOL_FUSED + leaf] = np.concatenate([sd[_POOL_Q + leaf], sd[_POOL_KV + leaf]], axis=0)
  return out


def split_pool(sd: dict) -> dict:
  """`join_pool`'s inverse: the layout timm writes."""
  out = {k: v for k, v in sd.items() if not k.startswith(_POOL_FUSED)}
  for leaf in ("weight", "bias"):
    fused = sd[_POOL_FUSED + leaf]
    d = fused.shape[0] // 3
    out[_POOL_Q + leaf], out[_POOL_KV + leaf] = fused[:d], np.ascontiguousarray(fused[d:])
  return out


# ------------------------------------------------------------------------------------------------- architecture
class SiglipArchitectureUnknown(UserError, ValueError):
  """An open_clip SigLIP state dict whose heads and activations are not known (no config, no model name)."""


def _layers(sd, prefix: str) -> int:
  pat = re.compile(re.escape(prefix) + r"(\d+)\.")
  return len({m.group(1) for k in sd if (m := pat.match(k))})


def _facts(path: str, model_name: str | None) -> dict:
  """What the state dict does not record, from a model name or open_clip_config.json: {text_heads, text_act,
  text_eps, vision_heads, vision_act, image_size} (the input size too: a 27 × 27 grid of 14 px patches is 378 or
  384 px)."""
  if model_name:
    if model_name not in OPEN_CLIP_NAMES:
      raise SiglipArchitectureUnknown(f"model_name {model_name!r}: not an open_clip SigLIP name (one of "
                                      f"{sorted(OPEN_CLIP_NAMES)})")
    trunk, heads, act = OPEN_CLIP_NAMES[model_name]
    v_heads, v_act = TIMM_TRUNKS[trunk]
    return dict(text_heads=heads, text_act=act, text_eps=1e-6, vision_heads=v_heads, vision_act=v_act,
                image_size=int(trunk.rsplit("_", 1)[1]))
  side = os.path.join(os.path.dirname(os.path.abspath(path)), "open_clip_config.json")
  if not os.path.exists(side):
    raise SiglipArchitectureUnknown(
        f"{path}: an open_clip SigLIP state dict records neither its heads nor its activations; pass model_name= "
        f"(--model_name; e.g. ViT-B-16-SigLIP) or put the model's open_clip_config.json beside it")
  with open(side) as f:
    full = json.load(f)
  cfg, kwargs = full.get("model_cfg", full), full.get("timm_trunk_kwargs") or {}
  try:
    t, v = cfg["text_cfg"], cfg["vision_cfg"]
    known = TIMM_TRUNKS.get(v["timm_model_name"])
    if known is None and "num_heads" not in kwargs:
      raise KeyError(f"vision_cfg.timm_model_name {v['timm_model_name']!r} is no timm SigLIP trunk this code knows")
    return dict(
        text_heads=t["heads"],
        text_act="gelu_pytorch_tanh" if (t.get("act_kwargs") or {}).get("approximate") == "tanh" else "gelu",
        text_eps=float((t.get("norm_kwargs") or {}).get("eps", 1e-5)),  # open_clip's LayerNorm default
        vision_heads=kwargs.get("num_heads", known[0] if known else 0),
        vision_act=_TIMM_ACTS.get(kwargs.get("act_layer"), known[1] if known else "gelu"),  # timm's default
        image_size=int(v["image_size"]))
  except (KeyError, TypeError, ValueError) as e:
    raise SiglipArchitectureUnknown(f"{side}: not an open_clip SigLIP config ({e})") from None


def config_of(path: str, sd, model_name: str | None = None) -> sc.SiglipConfig:
  """Our SigLIP's architecture: the shapes of state dict `sd`, plus `_facts`."""
  f = _facts(path, model_name)
  patch = sd[TRUNK + "patch_embed.proj.weight"]
  text = sc.TextConfig(vocab_size=sd["text.token_embedding.weight"].shape[0], width=sd["text.ln_final.weight"].shape[0],
                       layers=_layers(sd, "text.transformer.resblocks."), heads=f["text_heads"],
                       mlp_dim=sd["text.transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
                       context_length=sd["text.positional_embedding"].shape[0], act=f["text_act"], eps=f["text_eps"],
                       projection_size=sd["text.text_projection.weight"].shape[0])
  vision = sc.VisionConfig(image_size=f["image_size"], patch_size=patch.shape[-1], width=patch.shape[0],
                           layers=_layers(sd, TRUNK + "blocks."), heads=f["vision_heads"],
                           mlp_dim=sd[TRUNK + "blocks.0.mlp.fc1.weight"].shape[0], act=f["vision_act"], eps=1e-6)
  return sc.SiglipConfig(text, vision)


def read(path: str, sd, model_name: str | None = None) -> tuple[sc.SiglipConfig, maps.RawCheckpoint]:
  """An open_clip SigLIP state dict (already read from `path`) → (config, tensors + map)."""
  cfg = config_of(path, sd, model_name)
  rule_fn = lambda _: rules(cfg.text.layers, cfg.vision.layers)
  return cfg, maps.RawCheckpoint(path, join_pool(sd), rule_fn,
                                 hint="does the model name / open_clip_config.json match these weights?")


# ------------------------------------------------------------------------------------------------------ writing
def _trunk_name(cfg: sc.SiglipConfig) -> str | None:
  """The timm trunk whose definition has this vision tower's shape (width, patch, input size, heads), if any."""
  v = cfg.vision
  kind = {768: "base", 1024: "large", 1152: "so400m", 1536: "giantopt"}.get(v.width)
  name = f"vit_{kind}_patch{v.patch_size}_siglip_{v.image_size}"
  return name if TIMM_TRUNKS.get(name, (None,))[0] == v.heads else None


def open_clip_config(cfg: sc.SiglipConfig) -> dict:
  """`open_clip_config.json` for an export: open_clip's own keys where a timm trunk definition has this vision tower's
  shape; else (a size timm has no name for) `timm_trunk_kwargs` beside them — this code's key, which open_clip does
  not read: such a file loads here (the tests' tiny models), not in open_clip. No tokenizer name is recorded (this
  code does not know it): with open_clip, pass the model's SigLIP tokenizer."""
  t, v = cfg.text, cfg.vision
  trunk = _trunk_name(cfg)
  text_cfg = {
      "context_length": t.context_length, "vocab_size": t.vocab_size, "width": t.width, "heads": t.heads,
      "layers": t.layers, "mlp_ratio": t.mlp_dim / t.width, "no_causal_mask": True, "proj_bias": True,
      "pool_type": "last", "norm_kwargs": {"eps": t.eps},
      **({"act_kwargs": {"approximate": "tanh"}} if t.act == "gelu_pytorch_tanh" else {})
  }
  out = {
      "model_cfg": {
          "embed_dim": t.projection_size, "init_logit_bias": -10, "custom_text": True, "vision_cfg": {
              "image_size": v.image_size, "timm_model_name": trunk or "vit_base_patch16_siglip_224",
              "timm_model_pretrained": False, "timm_pool": "map", "timm_proj": "none"
          }, "text_cfg": text_cfg
      }, "preprocess_cfg":
          {"mean": list(sc.MEAN), "std": list(sc.STD), "interpolation": "bicubic", "resize_mode": "squash"}
  }
  if trunk is None:
    out["timm_trunk_kwargs"] = {
        "img_size": v.image_size, "patch_size": v.patch_size, "embed_dim": v.width, "depth": v.layers,
        "num_heads": v.heads, "mlp_ratio": v.mlp_dim / v.width,
        "act_layer": {ours: theirs for theirs, ours in _TIMM_ACTS.items()}[v.act]
    }
  return out


def activation_mismatch(cfg: sc.SiglipConfig) -> str | None:
  """What open_clip will compute otherwise than this model (its timm trunk's GELU), or None."""
  trunk = _trunk_name(cfg)
  if trunk is None or TIMM_TRUNKS[trunk][1] == cfg.vision.act:
    return None
  return (f"open_clip builds this vision tower (timm {trunk}) with {TIMM_TRUNKS[trunk][1]}, this model computes "
          f"{cfg.vision.act}: its image embeddings there differ slightly from ours (format='hf' keeps the activation)")


def write(cfg: sc.SiglipConfig, flat: dict[str, np.ndarray], target: str) -> list[str]:
  """The open_clip SigLIP state dict (fp32 safetensors) at `target` and its open_clip_config.json beside it."""
  mismatch = activation_mismatch(cfg)
  if mismatch:  # open_clip's own SigLIP files are such: big_vision's weights, run with exact GELU
    logging.warning("%s: %s", target, mismatch)
  sd = split_pool(
      maps.export_params({k: np.asarray(v, np.float32) for k, v in flat.items()},
                         rules(cfg.text.layers, cfg.vision.layers)))
  os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
  files.write_safetensors(sd, target)
  side = os.path.join(os.path.dirname(os.path.abspath(target)), "open_clip_config.json")
  with open(side, "w") as f:
    json.dump(open_clip_config(cfg), f, indent=2)
  return [target, side]
