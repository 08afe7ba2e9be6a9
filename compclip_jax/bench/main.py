"""Benchmarks (medians of repeated runs; baselines run alternately in the same process).

  python -m compclip_jax bench load [--model_dir=DIR] [--runs=5]
      Time to load an HF safetensors checkpoint (CLIP or SigLIP) with `load_clip`, against transformers'
      `AutoModel.from_pretrained` (CLIPModel / SiglipModel). Without --model_dir a random-init ViT-B/32 CLIP is
      written to a temp dir.
  python -m compclip_jax bench encode [--model_dir=DIR] [--batch=64] [--runs=5]
      Captions/s and images/s encoded (jitted, fp32) against transformers in PyTorch on the same inputs.
  python -m compclip_jax bench pipeline [--records=400] [--runs=5]
      Host pipeline on one core: CLIC text side with on-the-fly spaCy vs the cached POS analysis, and full CLIC
      samples (two images + captions + negative + tokenisation) from four sources of the same records, alternating:
      prepared shards, the same as `prepare --format=tfds`, CSV + image files, TFDS of the original JPEGs.
      Generates its own JPEGs (300–640 px) and captions.
  python -m compclip_jax bench train --config=configs/clic.py:runlocal [--config.key=value …] [--runs=7]
      Per step kind: median step time after compilation, steps/s, samples/s, XLA's FLOPs per step, the MFU implied
      by --peak_tflops (per device), and compiled peak memory per device. E.g. the ViT-B/32 CLIC step at B=8:
      --config.model.random=ViT-B-32-quickgelu --config.data.image_size=224 --config.model.frozen_dtype=float32
  python -m compclip_jax bench train --components --config=… [--text_len=77] [--runs=7]
      The CLIC step's parts, each jitted alone and timed round-robin: frozen vision forward, text forward + backward
      on the 5B texts, loss, AdamW update, whole step (model.random, data.image_size, batch_size, model dtypes and
      model.attention from the config). E.g. --config.model.random=ViT-B-32-quickgelu --config.data.image_size=224
      --config.batch_size=8 --config.model.frozen_dtype=float32
  python -m compclip_jax bench device [--smoke]
      The prepared accelerator benchmark (compclip_jax/bench/device.py, docs/performance.md): CLIC, CLIC's CLIP and
      READ steps at ViT-B/32 (B 256, 800) and a ViT-L/14 CLIC point, bf16, one Markdown table. --smoke: tiny, CPU.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from compclip_jax.cli import app as cli
from compclip_jax.cli import host_memory
from compclip_jax.cli import config_args

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "HF CLIP or SigLIP directory (default: a random-init ViT-B/32).")
_RUNS = flags.DEFINE_integer("runs", 5, "Timed repetitions (median reported).")
_BATCH = flags.DEFINE_integer("batch", 64, "Batch size for `encode`.")
_RECORDS = flags.DEFINE_integer("records", 400, "Records generated for `pipeline`.")
_PEAK = flags.DEFINE_float("peak_tflops", 0.0, "Peak TFLOP/s per device for the MFU of `train` (0: not shown).")
_COMPONENTS = flags.DEFINE_bool(
    "components", False, "`train`: time the CLIC step's parts instead (frozen vision "
    "forward, text forward + backward, loss, AdamW) at --text_len tokens.")
_TEXT_LEN = flags.DEFINE_integer("text_len", 77, "`train --components`: token width of the texts.")
_SMOKE = flags.DEFINE_bool("smoke", False, "`device`: tiny widths and batches (seconds on a CPU).")
_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config for `train`.", lock_config=True)


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
  """A warm process loading a checkpoint: jax's backend is up and the file is in the page cache (both loaders read
  it first). Ours is timed until every parameter is on the device; transformers' model is ready when it returns
  (its parameters map the file, uncopied). The first load in a process also builds the shape-only template."""
  import jax  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from compclip_jax import load_clip  # pylint: disable=import-outside-toplevel

  def ours():
    model, _, _ = load_clip(model_dir)
    jax.block_until_ready(jax.tree.leaves(model))

  jax.block_until_ready(jax.device_put(np.zeros(1)))  # backend start-up, not part of a load
  ref = lambda: transformers.AutoModel.from_pretrained(model_dir)  # CLIPModel or SiglipModel, by its config
  name = type(ref()).__name__  # (and warms the page cache, and torch)
  first = _median_time(ours, 1)
  t_ours, t_ref, c_ours, c_ref = [], [], [], []
  for _ in range(runs):  # alternate, so machine noise hits both alike
    for fn, wall, cpu in ((ours, t_ours, c_ours), (ref, t_ref, c_ref)):
      c0 = time.process_time()
      wall.append(_median_time(fn, 1))
      cpu.append(time.process_time() - c0)
  mo, mr = statistics.median(t_ours), statistics.median(t_ref)
  print(f"load safetensors ({model_dir}), median of {runs} alternated: compclip_jax.load_clip {mo:.2f} s "
        f"(CPU {statistics.median(c_ours):.2f} s; first load in the process {first:.2f} s) | transformers "
        f"{name}.from_pretrained {mr:.2f} s (CPU {statistics.median(c_ref):.2f} s) | ratio {mr / mo:.2f}×")


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
  ref = transformers.AutoModel.from_pretrained(model_dir).eval()  # CLIPModel or SiglipModel, by its config
  ids_t, px_t = torch.as_tensor(ids, dtype=torch.long), torch.as_tensor(px.transpose(0, 3, 1, 2))
  jax.block_until_ready(enc_t(model, ids))
  jax.block_until_ready(enc_i(model, px))
  rows = []
  for name, ours, theirs in (("captions", lambda: jax.block_until_ready(enc_t(model, ids)),
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
  print(f"encode ({type(model).__name__} {model.cfg.vision.image_size} px) fp32, batch {batch}, median of {runs} "
        f"(threads: torch {torch.get_num_threads()}):")
  print("\n".join("  " + r for r in rows))


def _bench_dataset(root: str, n: int) -> str:
  """n JPEGs of 300–640 px (both orientations) and a CLIC CSV with 3–5 sentences per row."""
  import os  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  colors, things = ["red", "blue", "green", "gray", "white", "black"], ["man", "horse", "shirt", "dog", "car", "ball"]
  os.makedirs(os.path.join(root, "images"), exist_ok=True)
  lines = []
  for i in range(n):
    w, h = (int(x) for x in rng.integers(300, 641, 2))
    base = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)  # smooth-ish content, JPEG-realistic
    Image.fromarray(base).resize((w, h), Image.Resampling.BILINEAR).save(os.path.join(root, "images", f"{i}.jpg"),
                                                                         quality=90)
    sents = [
        f"a {rng.choice(colors)} {rng.choice(things)} next to a {rng.choice(colors)} {rng.choice(things)} on "
        f"a sunny day" for _ in range(int(rng.integers(3, 6)))
    ]
    lines.append(",".join([f"{i}.jpg"] + sents))
  with open(os.path.join(root, "rows.csv"), "w") as f:
    f.write("\n".join(lines) + "\n")
  return os.path.join(root, "rows.csv")


def _tfds_of_files(src, out: str, name: str = "bench_captions") -> str:
  """The CSV source's rows as a TFDS dataset `name:1.0.0` in `out` (original JPEG bytes, captions as a sequence),
  written as `prepare --format=tfds` writes (ArrayRecord + write_metadata, no TensorFlow); → its data_dir."""
  import os  # pylint: disable=import-outside-toplevel
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from array_record.python.array_record_module import ArrayRecordWriter  # pylint: disable=import-outside-toplevel
  features = tfds.features.FeaturesDict({
      "image": tfds.features.Image(encoding_format="jpeg"), "captions": tfds.features.Sequence(tfds.features.Text()),
      "id": tfds.features.Text()
  })
  folder = os.path.join(out, name, "1.0.0")
  os.makedirs(folder)
  shard = os.path.join(folder, f"{name}-train.array_record-00000-of-00001")
  writer = ArrayRecordWriter(shard, "group_size:1")
  for i in range(len(src)):
    r = src[i]
    with open(r["image_path"], "rb") as f:
      writer.write(features.serialize_example({"image": f.read(), "captions": r["sentences"], "id": r["id"]}))
  writer.close()
  split = tfds.core.SplitInfo(name="train", shard_lengths=[len(src)], num_bytes=os.path.getsize(shard),
                              filename_template=None)
  tfds.folder_dataset.write_metadata(data_dir=folder, features=features, split_infos=[split], check_data=False,
                                     filename_template="{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}")
  return out


def _rates(fns: dict, n: int, runs: int) -> dict:
  """{name: median items/s} of `runs` passes of fn(k) for k in range(n), the functions alternating pass by pass (so
  a slow phase of the machine costs each the same)."""
  times = {name: [] for name in fns}
  for _ in range(runs):
    for name, fn in fns.items():
      t0 = time.perf_counter()
      for k in range(n):
        fn(k)
      times[name].append(time.perf_counter() - t0)
  return {name: n / statistics.median(t) for name, t in times.items()}


def _rate(fn, n: int, runs: int) -> float:
  """Median items/s of `runs` timed passes of fn(k) for k in range(n)."""
  return n / _median_time(lambda: [fn(k) for k in range(n)], runs)


def bench_pipeline(records: int, runs: int) -> None:
  from compclip_jax import methods  # pylint: disable=import-outside-toplevel
  from compclip_jax.data import negatives as neg  # pylint: disable=import-outside-toplevel
  from compclip_jax.data import pipeline as pl  # pylint: disable=import-outside-toplevel
  from compclip_jax.data import samples  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.sources import CsvSource, PreparedSource  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.tfds_source import TfdsSource  # pylint: disable=import-outside-toplevel
  from compclip_jax.methods.clic import samples as clic_samples  # pylint: disable=import-outside-toplevel
  from compclip_jax.methods.clic.negatives import clic_negative  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.tokenizers import CLIPTokenizer  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.prepare import prepare  # pylint: disable=import-outside-toplevel
  root = tempfile.mkdtemp(prefix="compclip_pipe_")
  src = CsvSource(_bench_dataset(root, records), root + "/images")
  prepare(src, root + "/prepared", workers=1, progress=False)
  ps = PreparedSource(root + "/prepared")
  tok = CLIPTokenizer.default()
  tagger = neg.SpacyTagger()
  tagger(["warm up"])
  cached = [ps.materialize(ps[k]) for k in range(len(ps))]
  m = len(cached)
  rng = np.random.default_rng(0)

  def text_side(k, fresh: bool):
    a, b = cached[k], cached[(k * 7 + 1) % m]
    if fresh:  # the reference: spaCy on the two first sentences for every sample
      tagger._memo.clear()  # pylint: disable=protected-access
      aa, ab = tagger([a["sentences"][0], b["sentences"][0]])
    else:
      (aa,), (ab,) = samples.analyses(a, [0], None), samples.analyses(b, [0], None)
    n, _ = clic_negative(aa, ab, rng)
    tok([
        neg.join(a["sentences"][0], b["sentences"][0]),
        neg.join(b["sentences"][0], a["sentences"][0]),
        neg.join(a["sentences"][1], b["sentences"][1]),
        neg.join(b["sentences"][2], a["sentences"][1]), n or ""
    ])

  fly = _rate(lambda k: text_side(k, True), m, runs)
  cache = _rate(lambda k: text_side(k, False), m, runs)
  # the same records from each source, CLIC samples (2 images + 5 captions + negative + tokens), alternating
  prepare(src, root + "/prepared_tfds", workers=1, progress=False, tfds_name="bench_prepared")
  sources = {
      "prepared shards": ps, "prepare --format=tfds": TfdsSource("bench_prepared:1.0.0", root + "/prepared_tfds"),
      "CSV + image files": src, "TFDS, original JPEGs": TfdsSource("bench_captions:1.0.0",
                                                                   _tfds_of_files(src, root + "/tfds"), "train",
                                                                   captions_key="captions", id_key="id")
  }
  transforms = {
      name: pl.SampleTransform(s, pl.PipelineConfig(methods.clic.STEP, batch_size=1, options=clic_samples.Options()),
                               tok, tagger=tagger) for name, s in sources.items()
  }
  for t in transforms.values():  # orientations read and spaCy's memo of every caption filled outside the timing
    [t(k, np.random.default_rng(k)) for k in range(m)]
  full = _rates({n: (lambda k, t=t: t(k, np.random.default_rng(k))) for n, t in transforms.items()}, m, runs)
  print(f"host pipeline, 1 core, {m} records, median of {runs}:")
  print(f"  CLIC text side, spaCy on the fly : {fly:8.1f} samples/s")
  print(f"  CLIC text side, cached analysis  : {cache:8.1f} samples/s  ({cache / fly:.1f}× on the fly)")
  print("  full CLIC sample (2 images + 5 captions + negative + tokens), sources alternating pass by pass:")
  base = {"prepare --format=tfds": "prepared shards", "TFDS, original JPEGs": "CSV + image files"}
  for name, rate in full.items():
    vs = f"  ({rate / full[base[name]]:.2f}× {base[name]})" if name in base else ""
    print(f"    {name:22s}: {rate:8.1f} samples/s{vs}")


def _same_width_batches(t, kind: str, n: int) -> list:
  """n batches of one token-width bucket (the first batch's), so one executable times them all."""
  import jax  # pylint: disable=import-outside-toplevel
  shapes = lambda b: [x.shape for x in jax.tree.leaves(b)]
  batches = [t.global_batch(kind)]
  for _ in range(50 * n):
    if len(batches) == n:
      return batches
    b = t.global_batch(kind)
    if shapes(b) == shapes(batches[0]):
      batches.append(b)
  raise RuntimeError(f"{kind}: fewer than {n} batches of token width {shapes(batches[0])} in {50 * n} draws")


def bench_train(config, runs: int, peak_tflops: float) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  from compclip_jax.train import loop as train  # pylint: disable=import-outside-toplevel
  workdir = tempfile.mkdtemp(prefix="compclip_bench_train_")
  t = train.setup(config, workdir)
  n_dev = jax.device_count()
  print(f"train step benchmark: method {config.method}, global batch {config.batch_size}, {n_dev} device(s) "
        f"({jax.devices()[0].platform}), median of {runs} timed steps after compilation")
  for kind in t.kinds:
    batches = _same_width_batches(t, kind, runs + 1)
    compiled, flops, peak = train.compile_step(t, kind, t.state, batches[0])
    state = t.state
    state, m = compiled(state, t.frozen, batches[0])  # warm-up
    jax.block_until_ready(m)
    times = []
    for b in batches[1:]:
      t0 = time.perf_counter()
      state, m = compiled(state, t.frozen, b)
      jax.block_until_ready(m)
      times.append(time.perf_counter() - t0)
    t.state = state
    med = statistics.median(times)
    line = (f"  {kind:10s} {med:8.3f} s/step  {1 / med:7.2f} steps/s  {config.batch_size / med:8.2f} samples/s")
    if flops:
      line += f"  {flops / 1e9:9.1f} GFLOP/step"
      if peak_tflops:
        line += f"  MFU {100 * flops / med / (peak_tflops * 1e12 * n_dev):5.1f}%"
    if peak:
      line += f"  peak {peak / 2**30:6.2f} GiB/device"
    print(line, flush=True)


def bench_components(config, text_len: int, runs: int) -> None:
  """The CLIC step's parts at the config's model (model.random), image size, batch, dtypes and attention."""
  from compclip_jax.bench import device as bench_device  # pylint: disable=import-outside-toplevel
  m = config.model
  bench_device.components(m.random, config.batch_size, text_len, m.text_compute_dtype or m.compute_dtype,
                          m.frozen_dtype, m.attention, runs)


def main(argv):
  host_memory.keep_freed_memory()  # COMPCLIP_HOST_MALLOC=keep, as the training entry point (docs/performance.md)
  if len(argv) != 2 or argv[1] not in ("load", "encode", "pipeline", "train", "device"):
    raise app.UsageError("usage: python -m compclip_jax bench load|encode|pipeline|train|device [flags]")
  if argv[1] == "device":
    from compclip_jax.bench import device as bench_device  # pylint: disable=import-outside-toplevel
    bench_device.benchmark(smoke=_SMOKE.value)
    return
  if argv[1] == "train":
    if _CONFIG.value is None:
      raise app.UsageError("bench train needs --config=configs/<method>.py[:arg]")
    if _COMPONENTS.value:
      bench_components(_CONFIG.value, _TEXT_LEN.value, _RUNS.value)
      return
    bench_train(_CONFIG.value, _RUNS.value, _PEAK.value)
    return
  if argv[1] == "pipeline":
    bench_pipeline(_RECORDS.value, _RUNS.value)
    return
  model_dir = _MODEL_DIR.value or _random_b32_dir()
  if argv[1] == "load":
    bench_load(model_dir, _RUNS.value)
  else:
    bench_encode(model_dir, _BATCH.value, _RUNS.value)


def run() -> None:
  sys.argv = config_args.resolve_argv(sys.argv)  # --config=clic[:arg] by name, from any directory
  cli.run(main)


if __name__ == "__main__":
  run()
