"""Benchmarks (medians of repeated runs; baselines run alternately in the same process).

  python -m compclip_jax.bench load [--model_dir=DIR] [--runs=5]
      Time to load a ViT-B/32 HF safetensors checkpoint with `load_clip`, against
      `transformers.CLIPModel.from_pretrained`. Without --model_dir a random-init ViT-B/32 is written to a temp dir.
  python -m compclip_jax.bench encode [--model_dir=DIR] [--batch=64] [--runs=5]
      Captions/s and images/s encoded (jitted, fp32) against transformers in PyTorch on the same inputs.
"""
from __future__ import annotations

import statistics
import tempfile
import time

import numpy as np
from absl import app, flags

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "HF CLIP directory (default: a random-init ViT-B/32).")
_RUNS = flags.DEFINE_integer("runs", 5, "Timed repetitions (median reported).")
_BATCH = flags.DEFINE_integer("batch", 64, "Batch size for `encode`.")


def _random_b32_dir() -> str:
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  d = tempfile.mkdtemp(prefix="compclip_b32_")
  transformers.CLIPModel(transformers.CLIPConfig()).save_pretrained(d)  # defaults are ViT-B/32's shapes
  return d


def _median_time(fn, runs: int) -> float:
  times = []
  for _ in range(runs):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def bench_load(model_dir: str, runs: int) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from compclip_jax import load_clip  # pylint: disable=import-outside-toplevel

  def ours():
    model, _, _ = load_clip(model_dir)
    jax.block_until_ready(model.logit_scale[...])

  ours()  # warm the page cache and jax's start-up once, for both
  ref = lambda: transformers.CLIPModel.from_pretrained(model_dir)
  ref()
  t_ours, t_ref = [], []
  for _ in range(runs):  # alternate, so machine noise hits both alike
    t_ours.append(_median_time(ours, 1))
    t_ref.append(_median_time(ref, 1))
  mo, mr = statistics.median(t_ours), statistics.median(t_ref)
  print(f"load ViT-B/32 safetensors ({model_dir}), median of {runs}: compclip_jax.load_clip {mo:.2f} s | "
        f"transformers CLIPModel.from_pretrained {mr:.2f} s | ratio {mr / mo:.2f}×")


def bench_encode(model_dir: str, batch: int, runs: int) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from compclip_jax import load_clip  # pylint: disable=import-outside-toplevel

  model, tok, _ = load_clip(model_dir)
  ids = tok([f"a photo of {i} red cubes left of a blue ball on a wooden table" for i in range(batch)])
  px = np.random.default_rng(0).standard_normal((batch, model.cfg.vision.image_size, model.cfg.vision.image_size, 3),
                                                np.float32)
  enc_t = nnx.jit(lambda m, x: m.encode_text(x, normalize=True))
  enc_i = nnx.jit(lambda m, x: m.encode_image(x, normalize=True))
  ref = transformers.CLIPModel.from_pretrained(model_dir).eval()
  ids_t, px_t = torch.as_tensor(ids, dtype=torch.long), torch.as_tensor(px.transpose(0, 3, 1, 2))
  jax.block_until_ready(enc_t(model, ids))
  jax.block_until_ready(enc_i(model, px))
  rows = []
  for name, ours, theirs in (
      ("captions", lambda: jax.block_until_ready(enc_t(model, ids)),
       lambda: ref.get_text_features(input_ids=ids_t)),
      ("images", lambda: jax.block_until_ready(enc_i(model, px)),
       lambda: ref.get_image_features(pixel_values=px_t))):
    with torch.no_grad():
      theirs()
      t_o, t_r = [], []
      for _ in range(runs):
        t_o.append(_median_time(ours, 1))
        t_r.append(_median_time(theirs, 1))
    mo, mr = statistics.median(t_o), statistics.median(t_r)
    rows.append(f"{name}/s: compclip_jax {batch / mo:,.1f} | transformers (torch {torch.__version__}) "
                f"{batch / mr:,.1f} | ratio {mr / mo:.2f}×")
  print(f"encode ViT-B/32 fp32, batch {batch}, median of {runs} (threads: torch {torch.get_num_threads()}):")
  print("\n".join("  " + r for r in rows))


def main(argv):
  if len(argv) != 2 or argv[1] not in ("load", "encode"):
    raise app.UsageError("usage: python -m compclip_jax.bench load|encode [--model_dir=DIR] [--runs=N]")
  model_dir = _MODEL_DIR.value or _random_b32_dir()
  if argv[1] == "load":
    bench_load(model_dir, _RUNS.value)
  else:
    bench_encode(model_dir, _BATCH.value, _RUNS.value)


if __name__ == "__main__":
  app.run(main)
