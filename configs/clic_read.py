"""CLIC + READ's objectives — ours (compclip_jax/methods/clic_read/): no public code combines them. CLIC's samples,
its alternation with CLIP steps and its loss (METHODS §1), plus READ's token reconstruction and paraphrase alignment
(METHODS §2.3) on CLIC's positives; READ's paper presents those two objectives as a plug-in for other methods.

- Reconstruction: READ's frozen T5 v1.1 decoder reads W·pooled(p1) and reconstructs p2. READ's target is an
  *alternative* caption of the same image; p2 is one (the same two sentences in the other order; the halves' spatial
  order is a coin flip, so both orders are true) whose content is entirely in p1, so the decoder succeeds only if
  p1's embedding keeps every object and attribute of both halves — the binding CLIC's swapped negatives probe.
- Alignment: (p3, p4), two other captions of the same image pair, as READ's reference aligned two distinct captions
  of one image (its paraphrase file was never read, METHODS §2.2); (p1, p2) would repeat CLIC's Uni term.
- Weights: CLIC's w_cont, w_sneg, w_uni (0.5, 0.5, 1) and READ's w_rec, w_align (0.1, 0.5) as they are — untuned.
- Trainable: CLIC's text side + W; frozen: the vision tower and the T5 decoder. CLIC's optimiser and schedule.

  python -m compclip_jax.main --config=configs/clic_read.py --workdir=DIR --config.model.init=PATH \\
      --config.read.t5.init=T5_V1_1_LARGE_DIR --config.data.source=csv --config.data.path=rows.csv \\
      --config.data.image_root=IMAGES
  python -m compclip_jax.main --config=configs/clic_read.py:runlocal --workdir=/tmp/clic_read   # tiny, generated
"""
from compclip_jax.methods import clic_read
from compclip_jax.train import config


def get_config(arg: str = ""):
  return config.for_method(clic_read.METHOD, arg)
