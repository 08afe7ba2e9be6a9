"""The demo's shipped starting point: the tiny CLIP (and READ's tiny T5 v1.1 decoder) pretrained on the synthetic world
in the papers' regime (docs/demo.md), stored in the package with a manifest that records how it was made and the
SHA-256 of every file, so a demo never fine-tunes from a silently different model.

  compclip_jax/assets/demo_pretrained/
    clip/  config.json, model.safetensors (fp16), preprocessor_config.json   — an HF CLIP directory
    t5/    config.json, model.safetensors (fp16), spiece.model                — an HF T5 v1.1 decoder directory
    pretrained.json  {"command", "seed", "options", "world", "files": {relative path: sha256}, ...}

Made by `python -m compclip_jax.demo --pretrain=compclip_jax/assets/demo_pretrained --workdir=runs/pretrain` (the
pretraining from scratch, then `write`). Weights are stored in fp16 (half the size; the models train and run in fp32
from these values), so the shipped model is exactly what the manifest's hashes name.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "demo_pretrained")
MANIFEST = "pretrained.json"
REGENERATE = "python -m compclip_jax.demo --pretrain=compclip_jax/assets/demo_pretrained --workdir=runs/pretrain"
_FILES = {
    "clip": ("config.json", "model.safetensors", "preprocessor_config.json"),
    "t5": ("config.json", "model.safetensors", "spiece.model")
}


def sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def read_manifest(root: str = SHIPPED) -> dict:
  path = os.path.join(root, MANIFEST)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: no shipped demo model there; make one with `{REGENERATE}`, or run "
                            "the demo with --from_scratch")
  with open(path) as f:
    return json.load(f)


def check(root: str = SHIPPED) -> tuple[str, str]:
  """(clip directory, t5 directory) of the shipped models under `root`, after checking every file against the
  manifest's SHA-256; a missing or changed file raises ValueError naming it."""
  record = read_manifest(root)
  bad = []
  for rel, digest in record["files"].items():
    path = os.path.join(root, rel)
    if not os.path.exists(path):
      bad.append(f"{path} is missing")
    elif sha256(path) != digest:
      bad.append(f"{path} does not match its recorded SHA-256")
  if bad:
    raise ValueError("the shipped demo model is not the recorded one: " + "; ".join(bad) +
                     f". Restore the files (git checkout {os.path.relpath(root)}) or regenerate them: `{REGENERATE}`")
  return os.path.join(root, "clip"), os.path.join(root, "t5")


def _copy_fp16(src: str, dst: str) -> None:
  from compclip_jax.weights import files  # pylint: disable=import-outside-toplevel
  tensors = files.read_safetensors(src)
  files.write_safetensors({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in tensors.items()}, dst)


def write(root: str, clip_dir: str, t5_dir: str, record: dict) -> dict:
  """Copies the HF CLIP directory `clip_dir` and HF T5 directory `t5_dir` into `root` (weights as fp16) and writes
  the manifest: `record` (how they were made) + "files" {relative path: sha256}. Returns the manifest.

  A file whose bytes are already there is left untouched (its mtime too: runs that started from it still match
  their recorded `model.init_files`)."""
  files_ = {}
  for part, src_dir in (("clip", clip_dir), ("t5", t5_dir)):
    os.makedirs(os.path.join(root, part), exist_ok=True)
    for name in _FILES[part]:
      src, dst = os.path.join(src_dir, name), os.path.join(root, part, name)
      tmp = dst + ".tmp"
      if name == "model.safetensors":
        _copy_fp16(src, tmp)
      else:
        with open(src, "rb") as f, open(tmp, "wb") as g:
          g.write(f.read())
      digest = sha256(tmp)
      if os.path.exists(dst) and sha256(dst) == digest:
        os.remove(tmp)
      else:
        os.replace(tmp, dst)
      files_[f"{part}/{name}"] = digest
  manifest = {**record, "files": files_}
  with open(os.path.join(root, MANIFEST), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
  return manifest
