"""The demo's shipped starting points, one per tower family: the tiny CLIP or SigLIP (and READ's tiny T5 v1.1 decoder
trained on it) pretrained on the synthetic world in the papers' regime (docs/demo.md), stored in the package with a
manifest that records how it was made and the SHA-256 of every file, so a demo never fine-tunes from a silently
different model.

  compclip_jax/assets/demo_pretrained/          (--family=clip; demo_pretrained_siglip/: --family=siglip)
    clip/  config.json, model.safetensors (fp16), preprocessor_config.json   — an HF CLIP (or SiglipModel) directory;
           a SigLIP's also spiece.model, tokenizer_config.json, special_tokens_map.json (its tokenizer)
    t5/    config.json, model.safetensors (fp16), spiece.model                — an HF T5 v1.1 decoder directory
    pretrained.json  {"command", "seed", "options", "world", "files": {relative path: sha256}, ...}

Made by `regenerate(family)` (the pretraining from scratch, then `write`). Weights are stored in fp16 (half the size;
the models train and run in fp32 from these values), so the shipped model is exactly what the manifest's hashes name.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

_ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
FAMILIES = ("clip", "siglip")
SHIPPED = os.path.join(_ASSETS, "demo_pretrained")  # the CLIP family's (the README's demo)
MANIFEST = "pretrained.json"
REGENERATE = "python -m compclip_jax.demo --pretrain=compclip_jax/assets/demo_pretrained --workdir=runs/pretrain"
_FILES = {
    "clip": ("config.json", "model.safetensors", "preprocessor_config.json"),
    "t5": ("config.json", "model.safetensors", "spiece.model")
}
_SIGLIP_TOKENIZER = ("spiece.model", "tokenizer_config.json", "special_tokens_map.json")


def root(family: str = "clip") -> str:
  """The folder of the shipped starting point of tower family `family` ("clip" or "siglip")."""
  return SHIPPED if family == "clip" else os.path.join(_ASSETS, f"demo_pretrained_{family}")


def regenerate(family: str = "clip") -> str:
  """The command that makes `root(family)` again (its seed and options follow it in the manifest's record)."""
  if family == "clip":
    return REGENERATE
  return (f"python -m compclip_jax.demo --family={family} --pretrain=compclip_jax/assets/demo_pretrained_{family} "
          f"--workdir=runs/pretrain_{family}")


def _regenerate_for(root_: str) -> str:
  return next((regenerate(f) for f in FAMILIES if os.path.abspath(root(f)) == os.path.abspath(root_)), REGENERATE)


def sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def read_manifest(root_: str = SHIPPED) -> dict:
  path = os.path.join(root_, MANIFEST)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: no shipped demo model there; make one with "
                            f"`{_regenerate_for(root_)}`, or run the demo with --from_scratch")
  with open(path) as f:
    return json.load(f)


def check(root_: str = SHIPPED) -> tuple[str, str]:
  """(clip directory, t5 directory) of the shipped models under `root_`, after checking every file against the
  manifest's SHA-256; a missing or changed file raises ValueError naming it."""
  record = read_manifest(root_)
  bad = []
  for rel, digest in record["files"].items():
    path = os.path.join(root_, rel)
    if not os.path.exists(path):
      bad.append(f"{path} is missing")
    elif sha256(path) != digest:
      bad.append(f"{path} does not match its recorded SHA-256")
  if bad:
    raise ValueError("the shipped demo model is not the recorded one: " + "; ".join(bad) +
                     f". Restore the files (git checkout {os.path.relpath(root_)}) or regenerate them: "
                     f"`{_regenerate_for(root_)}`")
  return os.path.join(root_, "clip"), os.path.join(root_, "t5")


def _copy_fp16(src: str, dst: str) -> None:
  from compclip_jax.weights import files  # pylint: disable=import-outside-toplevel
  tensors = files.read_safetensors(src)
  files.write_safetensors({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in tensors.items()}, dst)


def _files(part: str, src_dir: str) -> tuple[str, ...]:
  """The files of `part` copied from `src_dir`: a SigLIP's directory also carries its tokenizer (a CLIP's is the
  built-in BPE)."""
  from compclip_jax.weights import loading  # pylint: disable=import-outside-toplevel
  siglip = part == "clip" and loading.is_siglip(src_dir)
  return _FILES[part] + (_SIGLIP_TOKENIZER if siglip else ())


def write(root_: str, clip_dir: str, t5_dir: str, record: dict) -> dict:
  """Copies the HF CLIP (or SiglipModel) directory `clip_dir` and HF T5 directory `t5_dir` into `root_` (weights as
  fp16) and writes the manifest: `record` (how they were made) + "files" {relative path: sha256}. Returns the
  manifest.

  A file whose bytes are already there is left untouched (its mtime too: runs that started from it still match
  their recorded `model.init_files`)."""
  files_ = {}
  for part, src_dir in (("clip", clip_dir), ("t5", t5_dir)):
    os.makedirs(os.path.join(root_, part), exist_ok=True)
    for name in _files(part, src_dir):
      src, dst = os.path.join(src_dir, name), os.path.join(root_, part, name)
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
  with open(os.path.join(root_, MANIFEST), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
  return manifest
