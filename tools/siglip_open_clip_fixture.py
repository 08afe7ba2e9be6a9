"""Writes tests/fixtures/open_clip_siglip/: a tiny random open_clip SigLIP (open_clip's CustomTextCLIP with a timm
`vit_*_siglip` trunk, the layout of `ViT-B-16-SigLIP`) as a state dict, its open_clip_config.json, and its own
embeddings and logits on fixed ids and pixels — the golden outputs tests/weights/test_siglip_open_clip.py checks our
loader against. Not run by the tests (open_clip and timm are no dependency of the project); run it in a scratch
environment that has them, outside the project's venv:

  pip install --target SCRATCH --no-deps open_clip_torch==3.3.0 timm==1.0.31 torchvision==0.28.0
  PYTHONPATH=SCRATCH python tools/siglip_open_clip_fixture.py tests/fixtures/open_clip_siglip

(the committed fixture was written with open_clip 3.3.0, timm 1.0.31 and torch 2.13.0 on CPU).
"""
import json
import os
import sys

import numpy as np
import torch

WIDTH, HEADS, LAYERS, MLP_RATIO, PATCH, SIZE, CONTEXT, VOCAB = 32, 4, 2, 2.0, 8, 32, 16, 128
CONFIG = {
    "embed_dim": WIDTH, "init_logit_bias": -10, "custom_text": True, "vision_cfg": {
        "image_size": SIZE, "timm_model_name": "vit_base_patch16_siglip_224", "timm_model_pretrained": False,
        "timm_pool": "map", "timm_proj": "none"
    }, "text_cfg": {
        "context_length": CONTEXT, "vocab_size": VOCAB, "width": WIDTH, "heads": HEADS, "layers": LAYERS,
        "mlp_ratio": MLP_RATIO, "no_causal_mask": True, "proj_bias": True, "pool_type": "last",
        "norm_kwargs": {"eps": 1e-6}
    }
}
# what a state dict does not record and the B/16 name would give wrongly at this size: the trunk's shape (timm kwargs)
TRUNK = dict(img_size=SIZE, patch_size=PATCH, embed_dim=WIDTH, depth=LAYERS, num_heads=HEADS, mlp_ratio=MLP_RATIO,
             num_classes=0)


def main(out: str) -> None:
  import open_clip
  import safetensors.torch
  import timm
  torch.manual_seed(0)
  model = open_clip.model.CustomTextCLIP(**{k: v for k, v in CONFIG.items() if k != "custom_text"})
  model.visual.trunk = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, global_pool="map", **TRUNK)
  with torch.no_grad():  # non-trivial norms, biases, scale and bias
    for name, p in model.named_parameters():
      if "norm" in name or "ln_" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
    model.logit_scale.fill_(2.3)
    model.logit_bias.fill_(-3.0)
  model.eval()
  rng = np.random.default_rng(0)
  ids = rng.integers(2, VOCAB, (3, CONTEXT))
  ids[0, 5:] = 1  # EOS-padded rows, as SigLIP's tokenizer makes them
  ids[1, 11:] = 1
  pixels = rng.normal(size=(2, 3, SIZE, SIZE)).astype(np.float32)
  with torch.no_grad():
    txt = model.encode_text(torch.from_numpy(ids))
    img = model.encode_image(torch.from_numpy(pixels))
    tn, im = txt / txt.norm(dim=-1, keepdim=True), img / img.norm(dim=-1, keepdim=True)
    logits = tn @ im.T * model.logit_scale.exp() + model.logit_bias
  os.makedirs(out, exist_ok=True)
  safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                              os.path.join(out, "model.safetensors"))
  with open(os.path.join(out, "open_clip_config.json"), "w") as f:
    json.dump({"model_cfg": CONFIG, "timm_trunk_kwargs": TRUNK}, f, indent=2)
  np.savez(os.path.join(out, "expected.npz"), ids=ids, pixels_nhwc=pixels.transpose(0, 2, 3, 1), text=txt.numpy(),
           image=img.numpy(), logits_per_text=logits.numpy())
  print("wrote", out, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
  main(sys.argv[1])
