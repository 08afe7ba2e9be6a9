"""Fast encoding for evaluation: batched, jitted, sharded over the mesh, every distinct text and image once.

The last batch is padded (masked rows dropped afterwards) so shapes stay fixed and every host runs the same number of
batches; each host builds only its rows of a global batch. Token arrays are trimmed to 16-token buckets (exact, as
in training) on single-process runs. Images are read by a thread pool. An image that cannot be read (missing,
truncated, not an image) is recorded in `bad` ({row: reason}, agreed by every host) and encoded as zeros, for the
caller to drop its examples (`Task.skip_images`); with `strict` it is refused by name (UserError).
"""
from __future__ import annotations

import concurrent.futures
import io
import os

import jax
import numpy as np
from flax import nnx
from PIL import Image, UnidentifiedImageError

from compclip_jax.errors import UserError

from compclip_jax import sharding
from compclip_jax.data import pipeline as pl
from compclip_jax.evaluators.tasks import ImageRef


class Encoder:
  def __init__(self, model, tokenizer, preprocess, batch_size: int = 256, mesh=None, threads: int | None = None,
               progress: bool = True):
    self.mesh = mesh or sharding.make_mesh(-1, 1)
    n = self.mesh.devices.size
    self.batch = max(n, (batch_size + n - 1) // n * n)  # a multiple of the device count
    self.tokenizer, self.preprocess = tokenizer, preprocess
    self.threads = threads or min(16, 2 * (os.cpu_count() or 2))
    self.progress = progress and jax.process_index() == 0
    graphdef, self.state = nnx.split(model)
    rep, batch_sh = sharding.replicated(self.mesh), sharding.batch_sharding(self.mesh)
    self.batch_sh = batch_sh
    # Parameters keep whatever sharding they have (training's FSDP layout included); batches are split over the mesh.
    self._text = jax.jit(lambda s, ids: nnx.merge(graphdef, s).encode_text(ids, normalize=True),
                         in_shardings=(None, batch_sh), out_shardings=rep)
    self._image = jax.jit(lambda s, px: nnx.merge(graphdef, s).encode_image(px, normalize=True),
                          in_shardings=(None, batch_sh), out_shardings=rep)

  def lowered(self, length: int, image_size: int) -> dict:
    """{"eval_text", "eval_image"}: the two jitted encoders lowered for one batch (ids int32 [batch, length],
    pixels float32 [batch, S, S, 3]) with the parameters' own shardings — what the compile check compiles
    (`train/aot.py`); the parameters may be abstract (ShapeDtypeStructs with shardings)."""
    abstract = lambda shape, dt: jax.ShapeDtypeStruct(shape, np.dtype(dt), sharding=self.batch_sh)
    return {
        "eval_text": self._text.lower(self.state, abstract((self.batch, length), np.int32)),
        "eval_image": self._image.lower(self.state, abstract((self.batch, image_size, image_size, 3), np.float32))
    }

  def set_params(self, model) -> None:
    """Evaluate other weights of the same architecture (training: the current state) without recompiling."""
    self.state = nnx.state(model)

  def _batches(self, n: int):
    p, pc = jax.process_index(), jax.process_count()
    local = self.batch // pc
    for start in range(0, n, self.batch):
      rows = np.arange(start + p * local, start + (p + 1) * local)
      yield start, rows, rows < n

  def _run(self, fn, n, make_local, desc):
    out = []
    batches = list(self._batches(n))
    it = batches
    if self.progress and len(batches) > 1:
      from tqdm import tqdm  # pylint: disable=import-outside-toplevel
      it = tqdm(batches, desc=desc, unit="batch", leave=False)
    for start, rows, valid in it:
      local = make_local(np.where(valid, rows, 0))
      emb = fn(self.state, jax.make_array_from_process_local_data(self.batch_sh, local))
      out.append(np.asarray(emb)[:min(self.batch, n - start)])
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

  def texts(self, texts: list[str], desc: str = "texts") -> np.ndarray:
    """[N, D] normalised fp32 text embeddings."""
    def local(rows):
      ids = self.tokenizer([texts[r] for r in rows])
      # trimming the padding is exact for CLIP (causal, pooled at EOT); SigLIP pools at the last position, padding
      # included, and its tokenizer says so (`trims_padding` False)
      if jax.process_count() == 1 and getattr(self.tokenizer, "trims_padding", True):
        ids = pl.trim_tokens({"ids": ids}, pl.text_length({"ids": ids}, self.tokenizer.eot_id))["ids"]
      return ids

    return self._run(self._text, len(texts), local, desc)

  def images(self, refs: list[ImageRef], desc: str = "images", bad: dict[int, str] | None = None,
             strict: bool = False) -> np.ndarray:
    """[N, D] normalised fp32 image embeddings; rows that cannot be read go to `bad` ({row: reason}; zeros encoded)
    or, with `strict` (or no `bad` given), raise UserError naming the file."""
    found: dict[int, str] = {}
    strict = strict or bad is None
    with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
      out = self._run(self._image, len(refs),
                      lambda rows: np.stack(list(pool.map(lambda r: self._load(refs, r, found), rows))), desc)
    found = _agreed(found, len(refs))  # every host joins, then every host knows every bad row (and raises alike)
    if strict and found:
      row = min(found)
      raise UserError(f"image {refs[row].path}: {found[row]} (check --image_dir, fix or remove the file; without "
                      "--strict it is skipped and counted)")
    if bad is not None:
      bad.update(found)
    return out

  def _load(self, refs: list[ImageRef], row: int, bad: dict[int, str]) -> np.ndarray:
    ref = refs[row]
    try:
      if ref.read is None and not os.path.exists(ref.path):
        raise FileNotFoundError("not found")
      with Image.open(ref.path if ref.read is None else io.BytesIO(ref.read())) as img:
        img.load()  # decode now: a truncated file fails here, with its name, not deep inside the transform
        if ref.box is not None:
          x, y, w, h = ref.box
          img = img.crop((x, y, x + w, y + h))
        return self.preprocess(img)
    except (OSError, ValueError, SyntaxError, UnidentifiedImageError, Image.DecompressionBombError) as e:
      bad[row] = " ".join(str(e).split()) or type(e).__name__  # strict or not: `images` decides on every host
      size = self.preprocess.size
      return np.zeros((size, size, 3), np.float32)


def _agreed(bad: dict[int, str], n: int) -> dict[int, str]:
  """`bad` with the rows other hosts could not read added (each host reads only its rows of a batch)."""
  if jax.process_count() == 1:
    return bad
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  mask = np.zeros(n, np.int32)
  mask[list(bad)] = 1
  every = np.asarray(multihost_utils.process_allgather(mask)).reshape(-1, n).max(0)
  return {int(r): bad.get(int(r), "unreadable (found by another host)") for r in np.flatnonzero(every)}
