"""CLIP architecture configuration, read from an HF `config.json`, an open_clip model config, or a state dict's shapes.

The config describes the checkpoint (shapes, activation, pooling rule); dtypes are chosen when a model is built
(`compclip_jax.models.clip.CLIP`), because the same weights may run in fp32 or bf16.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

# OpenAI's preprocessing constants (METHODS §1.2 step 4 names them; CLIC's reference uses ImageNet's instead).
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
ACTIVATIONS = ("quick_gelu", "gelu")
LEGACY_EOS_ID = 2  # HF rule (METHODS §4): eos_token_id == 2 means "pool at argmax(input_ids)"
CLIP_EOT_ID = 49407


@dataclasses.dataclass(frozen=True)
class TextConfig:
  vocab_size: int = 49408
  width: int = 512
  layers: int = 12
  heads: int = 8
  mlp_dim: int = 2048
  context_length: int = 77
  act: str = "quick_gelu"
  eps: float = 1e-5
  # METHODS §4 pooling rule: LEGACY_EOS_ID → argmax(ids) (OpenAI / open_clip); otherwise first occurrence of this id.
  eos_token_id: int = LEGACY_EOS_ID
  bos_token_id: int = 49406
  pad_token_id: int = 1

  @property
  def pools_at_argmax(self) -> bool:
    return self.eos_token_id == LEGACY_EOS_ID


@dataclasses.dataclass(frozen=True)
class VisionConfig:
  image_size: int = 224
  patch_size: int = 32
  width: int = 768
  layers: int = 12
  heads: int = 12
  mlp_dim: int = 3072
  act: str = "quick_gelu"
  eps: float = 1e-5

  @property
  def num_patches(self) -> int:
    return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True)
class CLIPConfig:
  text: TextConfig = TextConfig()
  vision: VisionConfig = VisionConfig()
  embed_dim: int = 512
  logit_scale_init: float = math.log(1 / 0.07)

  def __post_init__(self):
    for tower in (self.text, self.vision):
      if tower.heads < 1 or tower.width < 1:
        raise ValueError(f"width {tower.width} / heads {tower.heads}: both must be positive")
      if tower.act not in ACTIVATIONS:
        raise ValueError(f"activation {tower.act!r} is not supported; use one of {ACTIVATIONS}")
      if tower.width % tower.heads:
        raise ValueError(f"width {tower.width} is not divisible by heads {tower.heads}")
    if self.vision.image_size % self.vision.patch_size:
      raise ValueError(f"image_size {self.vision.image_size} is not a multiple of patch_size {self.vision.patch_size}")

  def replace(self, **kw) -> "CLIPConfig":
    return dataclasses.replace(self, **kw)


# ----------------------------------------------------------------------------------------------- HF config.json
def _hf_act(name: str) -> str:
  if name not in ACTIVATIONS:
    raise ValueError(f"config.json hidden_act {name!r} is not supported; use one of {ACTIVATIONS}")
  return name


def from_hf_dict(d: Mapping[str, Any]) -> CLIPConfig:
  """Reads a transformers `CLIPConfig` dict (the `config.json` of an HF CLIP directory)."""
  if d.get("model_type") not in (None, "clip") or "text_config" not in d or "vision_config" not in d:
    raise ValueError("not an HF CLIP config.json (needs model_type 'clip', text_config and vision_config)")
  t, v = d["text_config"], d["vision_config"]
  text = TextConfig(
      vocab_size=t.get("vocab_size", 49408),
      width=t.get("hidden_size", 512),
      layers=t.get("num_hidden_layers", 12),
      heads=t.get("num_attention_heads", 8),
      mlp_dim=t.get("intermediate_size", 2048),
      context_length=t.get("max_position_embeddings", 77),
      act=_hf_act(t.get("hidden_act", "quick_gelu")),
      eps=t.get("layer_norm_eps", 1e-5),
      # absent keys take transformers' CLIPTextConfig defaults, as CLIPModel.from_pretrained reads the same file
      eos_token_id=t.get("eos_token_id", CLIP_EOT_ID),
      bos_token_id=t.get("bos_token_id", 49406),
      pad_token_id=t.get("pad_token_id", 1))
  vision = VisionConfig(image_size=v.get("image_size", 224), patch_size=v.get("patch_size", 32),
                        width=v.get("hidden_size", 768), layers=v.get("num_hidden_layers", 12),
                        heads=v.get("num_attention_heads", 12), mlp_dim=v.get("intermediate_size", 3072),
                        act=_hf_act(v.get("hidden_act", "quick_gelu")), eps=v.get("layer_norm_eps", 1e-5))
  return CLIPConfig(text=text, vision=vision, embed_dim=d.get("projection_dim", 512),
                    logit_scale_init=d.get("logit_scale_init_value", math.log(1 / 0.07)))


def to_hf_dict(cfg: CLIPConfig) -> dict[str, Any]:
  """The `config.json` that `transformers.CLIPModel.from_pretrained` reads back into the same architecture."""
  t, v = cfg.text, cfg.vision
  return {
      "architectures": ["CLIPModel"],
      "model_type": "clip",
      "projection_dim": cfg.embed_dim,
      "logit_scale_init_value": cfg.logit_scale_init,
      "torch_dtype": "float32",
      "text_config": {
          "model_type": "clip_text_model", "vocab_size": t.vocab_size, "hidden_size": t.width,
          "intermediate_size": t.mlp_dim, "projection_dim": cfg.embed_dim, "num_hidden_layers": t.layers,
          "num_attention_heads": t.heads, "max_position_embeddings": t.context_length, "hidden_act": t.act,
          "layer_norm_eps": t.eps, "bos_token_id": t.bos_token_id, "eos_token_id": t.eos_token_id,
          "pad_token_id": t.pad_token_id
      },
      "vision_config": {
          "model_type": "clip_vision_model", "hidden_size": v.width, "intermediate_size": v.mlp_dim,
          "projection_dim": cfg.embed_dim, "num_hidden_layers": v.layers, "num_attention_heads": v.heads,
          "num_channels": 3, "image_size": v.image_size, "patch_size": v.patch_size, "hidden_act": v.act,
          "layer_norm_eps": v.eps
      },
  }


# ------------------------------------------------------------------------------------------ open_clip model configs
# The open_clip model configs of the shapes this project supports (open_clip's `model_configs/*.json`, abridged to
# the keys our towers read; absent keys take open_clip's defaults: head_width 64, mlp_ratio 4, GELU unless
# `-quickgelu`). ViT-H/g/bigG have vision heads that are not 64 wide.
OPEN_CLIP_MODELS: dict[str, dict[str, Any]] = {
    "ViT-B-32": {
        "embed_dim": 512, "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12}
    },
    "ViT-B-16": {
        "embed_dim": 512, "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12}
    },
    "ViT-L-14": {
        "embed_dim": 768, "vision_cfg": {"image_size": 224, "layers": 24, "width": 1024, "patch_size": 14},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 768, "heads": 12, "layers": 12}
    },
    "ViT-L-14-336": {
        "embed_dim": 768, "vision_cfg": {"image_size": 336, "layers": 24, "width": 1024, "patch_size": 14},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 768, "heads": 12, "layers": 12}
    },
    "ViT-H-14": {
        "embed_dim": 1024,
        "vision_cfg": {"image_size": 224, "layers": 32, "width": 1280, "head_width": 80, "patch_size": 14},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 1024, "heads": 16, "layers": 24}
    },
    "ViT-g-14": {
        "embed_dim": 1024, "vision_cfg":
            {"image_size": 224, "layers": 40, "width": 1408, "head_width": 88, "mlp_ratio": 4.3637, "patch_size": 14},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 1024, "heads": 16, "layers": 24}
    },
    "ViT-bigG-14": {
        "embed_dim": 1280, "vision_cfg":
            {"image_size": 224, "layers": 48, "width": 1664, "head_width": 104, "mlp_ratio": 4.9231, "patch_size": 14},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 1280, "heads": 20, "layers": 32}
    },
}
# open_clip config keys that change the architecture away from the plain CLIP towers we build, with the value that
# keeps it plain; any other value is refused rather than loaded as a different model.
_PLAIN = {
    "text_cfg": {
        "hf_model_name": None, "pool_type": "argmax", "proj_bias": False, "no_causal_mask": False, "embed_cls": False,
        "final_ln_after_pool": False, "ls_init_value": None
    }, "vision_cfg": {
        "timm_model_name": None, "attentional_pool": False, "no_ln_pre": False, "final_ln_after_pool": False,
        "pool_type": "tok", "global_average_pool": False, "ls_init_value": None, "input_patchnorm": False
    }
}


def _heads(width: int, head_width: Any, where: str) -> int:
  if not isinstance(head_width, int) or head_width < 1 or width % head_width:
    raise ValueError(f"open_clip {where}: head_width {head_width!r} does not divide width {width}")
  return width // head_width


def from_open_clip_dict(d: Mapping[str, Any], quick_gelu: bool | None = None) -> CLIPConfig:
  """Reads an open_clip model config (`{"embed_dim", "vision_cfg", "text_cfg", "quick_gelu"?}`).

  open_clip pools text at argmax(ids) (its tokenizer pads with 0), which is the HF legacy rule, so
  eos_token_id is LEGACY_EOS_ID.
  """
  if "model_cfg" in d:  # the `open_clip_config.json` that hub repos ship wraps the model config
    d = d["model_cfg"]
  t, v = d["text_cfg"], d["vision_cfg"]
  for tower, plain in _PLAIN.items():
    odd = {k: d[tower][k] for k, want in plain.items() if d[tower].get(k, want) != want}
    if odd:
      raise ValueError(f"open_clip {tower} {odd}: not a plain CLIP tower, which is all this project builds")
  quick = d.get("quick_gelu", False) if quick_gelu is None else quick_gelu
  act = "quick_gelu" if quick else "gelu"
  tw = t.get("width", 512)
  text = TextConfig(vocab_size=t.get("vocab_size", 49408), width=tw, layers=t.get("layers", 12),
                    heads=t.get("heads", 8), mlp_dim=int(tw * t.get("mlp_ratio", 4.0)),
                    context_length=t.get("context_length", 77), act=act, eos_token_id=LEGACY_EOS_ID)
  vw = v["width"]
  vision = VisionConfig(image_size=v.get("image_size", 224), patch_size=v["patch_size"], width=vw, layers=v["layers"],
                        heads=_heads(vw, v.get("head_width", 64), "vision_cfg"),
                        mlp_dim=int(vw * v.get("mlp_ratio", 4.0)), act=act)
  return CLIPConfig(text=text, vision=vision, embed_dim=d["embed_dim"])


def named(name: str) -> CLIPConfig:
  """A built-in shape by open_clip name: 'ViT-B-32', 'ViT-B-32-quickgelu', 'ViT-L-14-336', …"""
  base, quick = (name[:-len("-quickgelu")], True) if name.endswith("-quickgelu") else (name, False)
  if base not in OPEN_CLIP_MODELS:
    raise ValueError(f"unknown model name {name!r}; known: {sorted(OPEN_CLIP_MODELS)} (optionally '-quickgelu')")
  return from_open_clip_dict(OPEN_CLIP_MODELS[base], quick_gelu=quick)


def demo() -> CLIPConfig:
  """The demo's CLIP (model.random="demo"): `tiny`'s text tower, a vision tower of width 128 and a 128-d joint space.
  The synthetic world has 100 colour–shape bindings: a 32-d image embedding cannot hold them where a linear readout
  finds them (the binding probe read 79 % from one whose text-matched swap accuracy was 98 %; docs/demo.md)."""
  cfg = tiny()
  return cfg.replace(vision=dataclasses.replace(cfg.vision, width=128, mlp_dim=256), embed_dim=128)


def tiny(act: str = "quick_gelu", eos_token_id: int = LEGACY_EOS_ID, vocab_size: int = 49408) -> CLIPConfig:
  """A small config for tests and the synthetic world (width 64, 2 layers, 32 px images)."""
  return CLIPConfig(
      text=TextConfig(vocab_size=vocab_size, width=64, layers=2, heads=4, mlp_dim=128, act=act,
                      eos_token_id=eos_token_id), vision=VisionConfig(image_size=32, patch_size=8, width=64, layers=2,
                                                                      heads=4, mlp_dim=128, act=act), embed_dim=32)
