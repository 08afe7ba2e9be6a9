"""The official CLIC reference's train step vs compclip_jax's CLIC step and CLIC's CLIP step, side by side in one
process (its results: docs/measured/side_by_side_clic.json, rendered into docs/performance.md): fp32, torch 2
threads, random weights in the real ViT-B/32 shapes, B=8, rounds alternated (ours at 77 tokens, ours at 32, the
reference), medians.

Nothing of the reference is in this repository: this harness imports it at run time from a checkout of
github:AmitPeleg/CLIC (measured at dc845c7) named by $CLIC_DIR, and open_clip (+ ftfy) from $OPEN_CLIP_PATH, a folder
made with `pip install --target DIR --no-deps open_clip_torch ftfy wcwidth` (torch comes from requirements-dev.txt).

  CLIC_DIR=... OPEN_CLIP_PATH=... python tools/side_by_side_clic.py RUNS [attention=explicit] [B=8] [check=1]

Of theirs it calls: utils.train_args.get_args_parser + general_utils.NewParser (their argv = trigger_train.sh's CLIC
args, + --disable-amp --batch-size B), general_utils.init_distributed_mode, models.get_model_clip, losses.CLIPLoss,
train_utils.get_optim_param_dict / get_scheduler_dict / create_normal_clip_loss_pattern / set_data_type /
backward_and_update, model_utils.get_model, torch.optim.AdamW + torch.cuda.amp.GradScaler(enabled=False); the step is
the body of their train.py train() loop, minus logging / wandb / CUDA memory tracking.
Patched / stubbed: models.MODELKEYS["ViT-B-32"] = None (open_clip pretrained=None: random init, no download); the
modules torchvision (its transforms only build the unused PIL pipeline), wandb, clip (OpenAI's package, unused for
ViT-B-32) and data_loading (its import loads spaCy's en_core_web_sm; only the dataset loader uses it) are stubs.
Finding: their logit-scale clamp (`get_model(model).logit_scale.data.clamp_(0, 4.6052)`) hits the wrapper's attribute
`self.logit_scale = self.model.logit_scale.exp()` (a copy made in __init__), not the parameter: a no-op on training
(ours has no clamp either). It costs ~nothing and is kept as theirs.
"""
import importlib.machinery
import math
import statistics
import sys
import time
import types

# ------------------------------------------------------------------------------------------------ stubs + paths
import os  # noqa: E402

_need = {"CLIC_DIR": "train.py", "OPEN_CLIP_PATH": "open_clip"}  # what each folder must hold
for _var, _inside in _need.items():
  if not os.path.exists(os.path.join(os.environ.get(_var, "/nonexistent"), _inside)):
    print(
        f"{_var}={os.environ.get(_var, '')!r} has no {_inside}: set CLIC_DIR to a checkout of "
        "github:AmitPeleg/CLIC and OPEN_CLIP_PATH to a `pip install --target DIR --no-deps open_clip_torch ftfy "
        "wcwidth` folder (see this file's docstring)", file=sys.stderr)
    sys.exit(2)
if len(sys.argv) < 2 or not sys.argv[1].isdigit():
  print(__doc__, file=sys.stderr)
  sys.exit(2)

# Both sides run under the opt-in host allocator policy (compclip_jax/cli/host_memory.py: freed memory kept for the next
# step instead of page-faulted in again), set before torch or jax start a thread: this harness's default is
# COMPCLIP_HOST_MALLOC=keep; COMPCLIP_HOST_MALLOC=default measures both under glibc's defaults.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ours: after theirs (no name clash)
from compclip_jax.cli import host_memory  # noqa: E402

HOST_MALLOC = host_memory.keep_freed_memory({host_memory.ENV: os.environ.get(host_memory.ENV, "keep")})
sys.path.insert(0, os.environ["OPEN_CLIP_PATH"])  # open_clip_torch (measured: 3.3.0; the reference pins 2.31), ftfy
_stubs = {
    n: types.ModuleType(n)
    for n in ("torchvision", "torchvision.ops", "torchvision.ops.misc", "torchvision.transforms",
              "torchvision.transforms.functional", "torchvision.datasets", "wandb", "clip", "data_loading")
}
_stubs["torchvision.ops.misc"].FrozenBatchNorm2d = object


class _Any:
  BICUBIC = BILINEAR = NEAREST = None

  def __init__(self, *a, **k):
    pass

  def __call__(self, *a, **k):
    raise RuntimeError("stubbed torchvision transform called")


for _n in ("Normalize", "Compose", "RandomResizedCrop", "InterpolationMode", "ToTensor", "Resize", "CenterCrop",
           "ColorJitter", "Grayscale", "RandomGrayscale"):
  setattr(_stubs["torchvision.transforms"], _n, _Any)
_stubs["torchvision.transforms"].functional = _stubs["torchvision.transforms.functional"]
_stubs["torchvision"].transforms = _stubs["torchvision.transforms"]
_stubs["torchvision"].datasets = _stubs["torchvision.datasets"]
for _n, _mod in _stubs.items():
  _mod.__spec__ = importlib.machinery.ModuleSpec(_n, None)
sys.modules.update(_stubs)
sys.path.insert(0, os.environ["CLIC_DIR"])  # their top-level modules: models, losses, utils, local_setting

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.cuda.amp as amp  # noqa: E402  (as their train.py)

import losses as ref_losses  # noqa: E402
import models as ref_models  # noqa: E402
import utils.model_utils  # noqa: E402
from utils import general_utils  # noqa: E402
from utils.train_args import get_args_parser  # noqa: E402
from utils.train_utils import backward_and_update, create_normal_clip_loss_pattern  # noqa: E402
from utils.train_utils import get_optim_param_dict, get_scheduler_dict, set_data_type  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from compclip_jax.bench import device as bd  # noqa: E402
from compclip_jax.train import config as common  # noqa: E402
from compclip_jax import sharding  # noqa: E402

RUNS = int(sys.argv[1])
OPTS = dict(a.split("=", 1) for a in sys.argv[2:])
B = int(OPTS.get("B", 8))
ATTN = OPTS.get("attention", "explicit")
torch.set_num_threads(2)

# ------------------------------------------------------------------------------------------------ reference
# trigger_train.sh's CLIC command (torchrun flags dropped), + CPU: --disable-amp, per-process batch B
REF_ARGV = ("--dataset laion_cogvlm --model ViT-B-32 --architecture ViT-B-32 --workers 12 --batch-size 200 --epochs 1 "
            "--expname laion_cogvlm_2pos --freeze_only_vision --hard_negatives --uni_modal_loss --shuffled_positive "
            "--hard_negatives_separate --hard_negative_freq 1 --additional_positives 2 --clip_loss_iterate "
            f"--no_eval --disable-amp --batch-size {B}").split()
args = general_utils.NewParser("CLIC", parents=[get_args_parser()]).parse_args(REF_ARGV)
args.warmup_epochs *= args.epochs  # as train.py's __main__
general_utils.init_distributed_mode(args)  # no RANK/WORLD_SIZE in env → args.distributed = False
torch.manual_seed(args.seed)
np.random.seed(args.seed)
ref_models.MODELKEYS[args.model] = None  # PATCH: open_clip pretrained=None → random init in the real shapes
model, train_transform, val_transform, tokenizer = ref_models.get_model_clip(args)  # freezes 'visual' params
optimizer = torch.optim.AdamW(get_optim_param_dict(model, args), lr=args.lr, betas=args.betas, eps=args.eps,
                              weight_decay=args.wd)
scaler = amp.GradScaler(enabled=not args.disable_amp)
LOADER_LEN = 1000
lr_scheduler_dict = get_scheduler_dict(args=args, loader_len=LOADER_LEN)
criterion = ref_losses.CLIPLoss(args)
data_pattern = create_normal_clip_loss_pattern(args.hard_negative_freq)
model.train()

# Their dataloader's tuple for this config (data_loading.CombineCsvDataset.__getitem__, "Case 2" with
# clip_loss_iterate): concatenated_img [3,224,224] (two 224×112 / 112×224 halves concatenated, never resized
# again, ImageNet-normalised), p1, p2, *additional_pos (2), neg — each tokenizer(...) = [77] int64 —, then
# single_image [3,224,224] (train_transform of the first image) and single_text [77]; default collate → [B, ...].
tok = tokenizer("a photo of a dog. a red car next to a tree.")
assert tuple(tok.shape) == (77,) and tok.dtype == torch.int64, (tok.shape, tok.dtype)
rng = np.random.default_rng(0)
size = model.model.visual.image_size
size = size[0] if isinstance(size, (tuple, list)) else size


def _ids():  # full width, the reference's padding: random ids, EOT (49407) at the last position, [B, 77] int64
  x = rng.integers(1, 49406, (B, 77))
  x[:, -1] = 49407
  return torch.as_tensor(x, dtype=torch.long)


def _img():
  return torch.as_tensor(rng.standard_normal((B, 3, size, size)).astype(np.float32))


loader_batch = [_img(), *(_ids() for _ in range(5)), _img(), _ids()]
loader = types.SimpleNamespace(dataset=types.SimpleNamespace(clip_loss_iter=1))  # what set_data_type writes to
ref_iter = [0]


def ref_step(data_iter: int) -> dict:
  """train.py train()'s loop body for one iteration (data_iter even: hard-negative CLIC iteration; odd: CLIP)."""
  inputs_ = list(loader_batch)
  if args.clip_loss_iterate:
    set_data_type(data_pattern, data_iter, loader)
  it = data_iter
  for k, param_group in enumerate(optimizer.param_groups):
    param_group["lr"] = lr_scheduler_dict[param_group["name"]][it]
  if args.hard_negatives or args.additional_positives:
    if loader.dataset.clip_loss_iter == 1 and args.clip_loss_iterate:  # hard negatives
      inputs_ = inputs_[:-2]
    elif loader.dataset.clip_loss_iter == -1 and args.clip_loss_iterate:  # simple images
      inputs_ = inputs_[-2:]
    inputs_[1] = torch.cat([input_k for input_k in inputs_[1:]], dim=0)
    inputs_ = inputs_[:2]
  inputs = list(inputs_)  # .cuda(non_blocking) on GPU; CPU here
  with amp.autocast(enabled=not args.disable_amp):
    outputs = model(*inputs)
    loss_dict = criterion(outputs)
    loss = loss_dict["combined_loss"]
  if not math.isfinite(loss.item()):
    raise FloatingPointError(f"reference loss is {loss.item()}")
  if not args.only_val:
    backward_and_update(loss, model, optimizer, scaler)
  utils.model_utils.get_model(model).logit_scale.data.clamp_(0, 4.6052)
  out = {k: v.item() for k, v in loss_dict.items() if k != "cos-sim"}  # their metrics[k].update(v.item(), ...)
  out["_shapes"] = [tuple(x.shape) for x in inputs]
  return out


# ------------------------------------------------------------------------------------------------ ours
f32 = jnp.float32
ours, our_batches = {}, {}
mesh = sharding.make_mesh(data=1, fsdp=1)  # one device, as the official step runs
for kind in ("clic", "clic_clip"):  # CLIC's config and recipe, the steps training builds (train/state.py)
  step, st = bd.step_of(bd.Point(kind, "", "ViT-B-32-quickgelu", B), f32, f32, ATTN, False, mesh, abstract=False)
  state, frozen, trainable = st.state, st.frozen, st.state.trainable
  hb = bd.host_batch(bd.Point(kind, "", "ViT-B-32-quickgelu", B), np.random.default_rng(1))
  for width in (77, 32):
    b = dict(hb, ids=hb["ids"][..., -width:])  # EOT stays last: the pooled position at any width
    our_batches[(kind, width)] = jax.device_put(b)
    ours[(kind, width)] = step


def our_step(kind: str, width: int):
  global state
  state, metrics = ours[(kind, width)](state, frozen, our_batches[(kind, width)])
  jax.block_until_ready((state, metrics))
  return metrics


# ------------------------------------------------------------------------------------------------ trainable sets
def _ref_sets():
  wd, non_wd = (optimizer.param_groups[0]["params"], optimizer.param_groups[1]["params"])
  ids_wd, ids_nwd = {id(p) for p in wd}, {id(p) for p in non_wd}
  named = list(model.named_parameters())
  tr = [(n, tuple(p.shape), "wd" if id(p) in ids_wd else "no_wd") for n, p in named if id(p) in ids_wd | ids_nwd]
  fr = [(n, tuple(p.shape)) for n, p in named if not p.requires_grad]
  return tr, fr


def _our_sets():
  import re  # pylint: disable=import-outside-toplevel
  flat = lambda st: [(".".join(map(str, k)), tuple(v.shape))
                     for k, v in jax.tree_util.tree_flatten_with_path(st, is_leaf=lambda x: hasattr(x, "shape"))[0]
                     for k in [tuple(getattr(e, "key", getattr(e, "idx", e)) for e in k)]]
  rx = lambda pats, s: any(re.fullmatch(p, s) for p in pats)
  tr = [(n, s, "wd" if rx(common.DECAY_2D, n) else "no_wd") for n, s in flat(trainable)]
  for n, s, g in tr:  # the project's rules (train/config.py) vs the ndim rule used in this harness's optimiser
    assert (g == "wd") == (len(s) >= 2) == (not rx(common.NO_DECAY_2D, n)) and rx(common.CLIP_TEXT, n), (n, s, g)
  fr = flat(frozen)
  for n, _ in fr:  # configs/clic.py: optim.trainable = CLIP_TEXT, optim.frozen = CLIP_VISION
    assert rx(common.CLIP_VISION, n) and not rx(common.CLIP_TEXT, n), n
  return tr, fr


def _count(rows, group=None):
  return sum(int(np.prod(r[1])) for r in rows if group is None or r[2] == group)


if OPTS.get("check", "1") == "1":
  rtr, rfr = _ref_sets()
  otr, ofr = _our_sets()
  print(f"reference trainable: {len(rtr)} tensors, {_count(rtr):,} elements ({_count(rtr, 'wd'):,} with weight "
        f"decay, {_count(rtr, 'no_wd'):,} without); frozen {len(rfr)} tensors, {_count(rfr):,} elements")
  print(f"ours      trainable: {len(otr)} tensors, {_count(otr):,} elements ({_count(otr, 'wd'):,} with weight "
        f"decay, {_count(otr, 'no_wd'):,} without); frozen {len(ofr)} tensors, {_count(ofr):,} elements")
  print("reference trainable outside the text blocks:", [r for r in rtr if ".resblocks." not in r[0]])
  print("ours      trainable outside the text blocks:", [r for r in otr if ".layers." not in r[0]])
  print("reference trainable, block 0:", [r for r in rtr if ".resblocks.0." in r[0]])
  print("ours      trainable, block 0:", [r for r in otr if ".layers.0." in r[0]])
  # one reference step changes its trainable parameters, leaves the frozen ones, and has a finite loss
  named = dict(model.named_parameters())
  watch = [
      "model.text_projection", "model.transformer.resblocks.0.attn.in_proj_weight", "model.logit_scale",
      "model.visual.proj"
  ]
  before = {n: named[n].detach().clone() for n in watch}
  for it in (0, 1):
    m = ref_step(it)
    print(f"reference iteration {it} ({'CLIC' if it % 2 == 0 else 'CLIP'}): inputs {m.pop('_shapes')}, " +
          ", ".join(f"{k} {v:.4f}" for k, v in m.items()))
  for n in watch:
    d = (named[n].detach() - before[n]).abs()
    print(f"  after 2 reference steps: {n} {tuple(d.shape)} max |Δ| {d.max().item():.3e}, "
          f"{(d > 0).float().mean().item() * 100:.1f} % of elements changed")
  our_before = jax.tree.map(np.asarray, state.trainable)
  for kind in ("clic", "clic_clip"):
    m = our_step(kind, 77)
    print(f"ours {kind}: ids {our_batches[(kind, 77)]['ids'].shape}, image {our_batches[(kind, 77)]['image'].shape}"
          f" {our_batches[(kind, 77)]['image'].dtype}, loss {float(m['loss']):.4f}")
  dmax = max(
      jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(np.asarray(b) - a).max()), our_before, state.trainable)))
  print(f"  after 2 of our steps: max |Δ| over trainable {dmax:.3e}")

# ------------------------------------------------------------------------------------------------ timing
VARIANTS = [(kind, who) for kind in ("clic", "clic_clip") for who in ("ours77", "ours32", "ref")]


def run(kind, who):
  if who == "ref":
    ref_step(ref_iter[0] * 2 + (kind == "clic_clip"))
  else:
    our_step(kind, int(who[4:]))


for v in VARIANTS:  # warm-up: compile ours, first-touch theirs
  for _ in range(2):
    run(*v)
times = {v: [] for v in VARIANTS}
for r in range(RUNS):
  ref_iter[0] = r + 1
  for v in VARIANTS:
    t0 = time.perf_counter()
    run(*v)
    times[v].append(time.perf_counter() - t0)
print(f"\nB={B}, fp32 (reference: --disable-amp; ours: compute + frozen vision fp32, attention {ATTN}), torch "
      f"{torch.__version__} {torch.get_num_threads()} threads, jax {jax.__version__} {jax.devices()[0].platform}, "
      f"host allocator {'kept memory (host_memory)' if HOST_MALLOC else 'glibc defaults'}; "
      f"{RUNS} alternated rounds, median (min–max)\n")
print("| step | reference (official CLIC @dc845c7) | ours 77 | ours 32 | ours 77 / ref | ours 32 / ref |")
print("|---|---|---|---|---|---|")
fmt = lambda x: f"{statistics.median(x):.3f} s ({min(x):.3f}–{max(x):.3f})"
for kind, name in (("clic", "CLIC step"), ("clic_clip", "CLIC's CLIP step")):
  ref, o77, o32 = (times[(kind, w)] for w in ("ref", "ours77", "ours32"))
  mr = statistics.median(ref)
  print(f"| {name} | {fmt(ref)} | {fmt(o77)} | {fmt(o32)} | {statistics.median(o77) / mr:.2f} | "
        f"{statistics.median(o32) / mr:.2f} |")
