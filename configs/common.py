"""Shared config pieces. Method configs start from `base()` and set the reference recipe (METHODS §1.4, §2.4)."""
import ml_collections

# Parameter-rule regexes (matched against dotted parameter paths, e.g. 'text_model.encoder.layers.0.mlp.fc1.kernel').
CLIP_TEXT = (r"text_model\..*", r"text_projection\..*", r"logit_scale")
CLIP_VISION = (r"vision_model\..*", r"visual_projection\..*")
# ≥2-D weights (kernels, token/position embeddings) decay; biases, LayerNorm scales and logit_scale do not (§1.4).
DECAY_2D = (r".*\.(kernel|embedding)",)
NO_DECAY_2D = (r".*\.(bias|scale)", r"(clip\.)?logit_scale", r".*class_embedding")


def base() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.method = ""
  c.seed = 0
  c.model = dict(
      init="",
      model_name="",
      activation="",
      random="",
      frozen_dtype="bfloat16",
      compute_dtype="float32",
      remat_text=False,
      # precision / speed (docs/performance.md): compute dtype per tower ("" → compute_dtype; trained
      # parameters and AdamW state stay fp32, logits and losses fp32); attention "explicit" (reference
      # numerics) | "xla" | "cudnn" | "auto" (jax.nn.dot_product_attention, cuDNN on GPU in bf16);
      # remat_policy "full" | "dots_saveable" | "none", used when remat_text
      text_compute_dtype="",
      vision_compute_dtype="",
      attention="explicit",
      remat_policy="full",
      # READ's W (METHODS §2.1): "torch_linear" = torch nn.Linear's default, uniform ±1/√fan_in
      # (reference); "lecun_normal" = normal with std 1/√fan_in (old, √3 larger)
      read_proj_init="torch_linear")
  # READ's frozen decoder: t5.init, an HF T5 v1.1 directory; or t5.random, a random one of random_* (:runlocal, the
  # demo; v1.1-large is d_model 1024, vocab 32128, 24 layers). t5.tokenizer: a SentencePiece .model, default
  # t5.init's spiece.model, else the one shipped for the synthetic world (compclip_jax/assets/synthetic_spiece.model).
  c.t5 = dict(init="", tokenizer="", random=False, random_layers=2, random_d_model=64, random_vocab=0)
  # data.image_size only sets the input size of a random model (model.random); a loaded model brings its own.
  # data.source: csv, coco, prepared (data.path) or synthetic: the generated world (compclip_jax/synthetic.py) of
  # data.synthetic_size scenes seeded by `seed`, written once into data.path (default <workdir>/world), read as CLIC
  # rows (synthetic_format="csv") or COCO JSON + paraphrases ("coco"); synthetic_binding_noise p: each caption names
  # the two objects with their colours exchanged with probability p (compclip_jax/synthetic.py; the demo's
  # pretraining of a bag-of-words text tower uses 0.5).
  c.data = dict(
      source="csv",
      path="",
      image_root="",
      paraphrases="",
      splits=("train", "restval"),
      num_workers=0,
      max_skip_fraction=0.05,
      image_size=224,
      synthetic_size=0,
      synthetic_format="csv",
      synthetic_binding_noise=0.0,
      clic_concat=True,
      trim_tokens=True,
      clic_imagenet_normalization=True,
      read_target_may_equal_positive=True,
      negclip_random_caption=False,
      # METHODS §1.2 step 6 / §2.2, docs/fidelity.md: shared words removed tag by tag (reference); non-word
      # tokens no swap candidates (fix); READ swaps only non-overlapping spans (True: reference's garbling)
      clic_shared_words_across_tags=False,
      clic_exclude_nonword=True,
      read_overlapping_swaps=False,
      # METHODS §1.2 steps 3, 7: images with transparency resized with alpha, then alpha dropped (CLIC
      # reference; False: alpha dropped first); the CLIP tokenizer cleans text as open_clip (ftfy, html)
      alpha_premultiplied_resize=True,
      clean_text=True,
      # METHODS §1.1: CSV rows whose image path does not end in .png/.jpg/.jpeg (case-sensitive) are skipped
      # and counted as unsupported_extension (reference filter); True admits every format PIL reads
      any_image_format=False)
  c.batch_size = 800
  c.num_epochs = 1.0
  c.total_steps = 0  # 0: from num_epochs × records / batch_size
  c.clip_every = 1  # CLIC alternation (METHODS §1.4): 1 → CLIC, CLIP, CLIC, …; 0 → no CLIP steps
  c.optim = dict(schedule="clic", lr=1e-6, start_lr=1e-7, end_lr=1e-8, warmup_frac=0.2, warmup_steps=50, b1=0.9,
                 b2=0.98, eps=1e-8, weight_decay=0.1, grad_clip=0.0, trainable=CLIP_TEXT, frozen=CLIP_VISION,
                 decay=DECAY_2D, no_decay=NO_DECAY_2D)
  c.loss = dict(w_cont=0.5, w_sneg=0.5, w_uni=1.0, w_con=1.0, w_rec=0.1, w_align=0.5, align_direction="para_to_orig",
                t5_dropout=True)
  c.mesh = dict(data=-1, fsdp=1, min_fsdp_size=2 ** 18)
  # asynchronous: orbax writes a checkpoint in the background once it is on the host (compclip_jax/checkpointing.py)
  c.checkpoint = dict(every_steps=200, keep=3, asynchronous=True)
  c.log_every = 10
  # read_ahead: the next batch is read and put on the devices while a step runs (docs/performance.md, the loop);
  # forbid_host_sync: any device → host fetch outside the log / eval / checkpoint points is an error (the tests' runs)
  c.loop = dict(read_ahead=True, forbid_host_sync=False)
  c.peak_flops = 0.0  # per device, for the MFU estimate (e.g. 989e12 for an H100 in bf16); 0 → no MFU
  c.export = dict(hf=True, open_clip=False, t5_decoder=False)  # t5_decoder: READ's decoder as an HF T5 directory
  # Benchmarks run before training, every `every_steps` (0: only then and at the end) and at the end, logged as
  # eval/<benchmark>/<metric>. Names as for python -m compclip_jax.evaluate.
  # Lists are tuples so that they can be overridden from the command line: --config.evals.benchmarks='("valse",)'.
  # evals.source: "files" (evals.data_dir / image_dir) or "synthetic": the synthetic world's held-out benchmarks
  # (evals.synthetic_size scenes seeded by seed + 1000), written once into evals.data_dir (default
  # <workdir>/world/benchmarks) in the real SugarCrepe / SugarCrepe++ / retrieval formats.
  c.evals = dict(benchmarks=(), every_steps=0, source="files", data_dir="", image_dir="", synthetic_size=0,
                 tie="strict", batch_size=64)
  return c


ARGS = ("", "runlocal", "demo")


def with_arg(c: ml_collections.ConfigDict, arg: str, name: str) -> ml_collections.ConfigDict:
  """Applies the `:arg` of `--config=configs/<name>.py:arg`."""
  if arg == "runlocal":
    return runlocal(c)
  if arg == "demo":
    return demo(c)
  if arg:
    raise ValueError(f"configs/{name}.py: unknown argument {arg!r} (use one of {ARGS})")
  return c


def runlocal(c: ml_collections.ConfigDict, world_size: int = 64) -> ml_collections.ConfigDict:
  """A tiny random model on the synthetic world (written into the workdir), in the format the method reads (CLIC
  rows, or COCO JSON + paraphrases), evaluated on its held-out benchmarks: a minute on a laptop CPU."""
  c.model.random = "tiny"
  c.model.frozen_dtype = "float32"
  c.t5.random = True  # READ: a tiny random decoder (the other methods have none)
  c.data.source, c.data.synthetic_format, c.data.synthetic_size = "synthetic", c.data.source, world_size
  c.data.image_size = 32
  c.batch_size = 8
  c.total_steps = 6
  c.log_every = 2
  c.checkpoint.every_steps = 3
  c.optim.lr = 1e-4
  c.optim.start_lr, c.optim.end_lr = 1e-5, 1e-6
  c.optim.warmup_steps = 2
  c.evals.benchmarks = ("sugarcrepe", "sugarcrepe_pp", "coco_retrieval")
  c.evals.source, c.evals.synthetic_size = "synthetic", 32  # held-out scenes of the same world, real formats
  return c


def demo(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The fine-tuning step of the synthetic-world demo (`python -m compclip_jax.demo`, which pretrains the tiny CLIP it
  starts from and points data.path / evals.data_dir at one shared world): config values only."""
  runlocal(c)
  c.data.synthetic_size = 16000
  c.data.image_size = 64
  c.evals.synthetic_size = 300
  c.evals.every_steps = 100
  c.batch_size = 32
  # A short fine-tuning from a converged model, as in the papers (9,600 samples: 0.6 passes over the world). One
  # recipe for every method (linear warm-up, cosine decay). With 1,000 steps at lr 5e-4 the plain-contrastive
  # control itself reaches what the frozen vision tower allows (docs/demo.md) and every text-side method ties with it.
  c.total_steps = 300
  c.log_every = 25
  c.checkpoint.every_steps = 100
  c.optim.schedule, c.optim.lr, c.optim.warmup_steps = "read", 1e-4, 20
  return c
