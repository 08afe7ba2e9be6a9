"""TFDS datasets as a training and evaluation source, without TensorFlow: `tfds.data_source` over ArrayRecord files.

A dataset is named with its version, `name[/config]:version` (e.g. `coco_captions/2014:1.1.0`): without TensorFlow,
TFDS cannot look a version up. It is opened from `<data_dir>/<name>[/<config>]/<version>` with
`tfds.builder_from_directory`, so a dataset this project wrote (`prepare --format=tfds`) needs no registered builder.
`data_dir` is a local folder or any path `etils.epath` opens (`gs://…` through `gcsfs`, docs/data.md).

Feature keys are paths: `captions/text` is the `text` of the `captions` sequence; a key that holds a `/` itself
(`image/id`) is found as it is. Images stay encoded (`tfds.decode.SkipDecoding`) until a grain worker decodes them.
Records that cannot become a sample (an image that does not decode, no caption) are `BadRecord`s: counted and
reported like every other skip (data/records.py). Every mistake in naming the dataset, split or keys is a `TfdsError`
(one line: which dataset, which key, what to do), raised before anything is written.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
from typing import Sequence

import numpy as np
from PIL import Image

from compclip_jax.data.images import load_image, orientation
from compclip_jax.data.records import BadRecord
from compclip_jax.errors import UserError

INSTALL = "pip install tensorflow-datasets importlib_resources"  # the pins are in requirements.txt
# A dataset written by `prepare --format=tfds` (data/prepare.py): what its records hold besides the image.
PREPARED_FEATURES = ("id", "sentences", "half", "full", "analysis", "paraphrases")
PREPARED_ORIENTATION = "orientation-{split}.npy"  # beside dataset_info.json: one int8 per record of the split
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class TfdsError(UserError, ValueError):
  """A TFDS dataset, split or feature key that cannot be used as given."""


def tfds_module():
  """`tensorflow_datasets`, or a TfdsError with the install line (it is imported only when a TFDS source is used)."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise TfdsError(f"a TFDS source needs tensorflow-datasets (without TensorFlow): {INSTALL} ({e})") from None
  return tfds


def info_path(name: str, data_dir: str) -> str:
  """Where `name[/config]:version`'s dataset_info.json lies under `data_dir` (unchecked; a run's fingerprint records
  that file, so a dataset rewritten in place shows as a change)."""
  base, _, version = name.partition(":")
  return os.path.join(data_dir, base, version, "dataset_info.json")


def dataset_dir(name: str, data_dir: str) -> str:
  """`name[/config]:version` under `data_dir` → the folder holding its dataset_info.json; TfdsError when the name has
  no version or the folder is not there (with the versions that are)."""
  from etils import epath  # pylint: disable=import-outside-toplevel
  base, _, version = name.partition(":")
  if not base or not version:
    raise TfdsError(f"TFDS dataset {name!r}: give its version too, e.g. 'coco_captions/2014:1.1.0' (without "
                    "TensorFlow TFDS cannot look the version up); the versions are the folder names under "
                    f"{data_dir or '<data_dir>'}/{base or '<name>'}")
  if not data_dir:
    raise TfdsError(f"TFDS dataset {name}: no data_dir given (data.tfds_data_dir / --tfds_data_dir): the folder "
                    "TFDS prepared it into, e.g. ~/tensorflow_datasets or gs://bucket/tensorflow_datasets")
  root = epath.Path(data_dir)
  try:
    is_dir = root.is_dir()
  except (ImportError, OSError) as e:  # gs:// without gcsfs, no credentials, …
    raise TfdsError(f"TFDS data_dir {data_dir} cannot be opened ({' '.join(str(e).split())}); gs:// paths need "
                    "`pip install gcsfs`") from None
  if not is_dir:
    raise TfdsError(f"TFDS data_dir {data_dir} is not a folder")
  folder = root / base / version
  if not (folder / "dataset_info.json").exists():
    parent = root / base
    have = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
    found = f"; {parent} holds {have}" if have else f"; {parent} does not exist"
    raise TfdsError(f"TFDS dataset {name}: no {folder}/dataset_info.json{found} (is data_dir the folder that holds "
                    f"{base.split('/')[0]}/?)")
  return os.fspath(folder)


def feature_paths(features, in_sequence: bool = False) -> dict[str, tuple]:
  """{key path: (leaf feature, whether a Sequence holds it)} of a FeaturesDict: `image`, `image/id`,
  `captions/text` (a text inside the `captions` sequence), …"""
  out = {}
  for key, f in features.items():
    inner = getattr(f, "feature", f)  # a Sequence's element
    seq = in_sequence or inner is not f
    if hasattr(inner, "items"):
      out |= {f"{key}/{p}": leaf for p, leaf in feature_paths(inner, seq).items()}
    else:
      out[key] = (inner, seq)
  return out


def lookup(d: dict, path: str):
  """`d` at a key path (see `feature_paths`): a key holding '/' is tried as a whole before it is split."""
  if path in d:
    return d[path]
  head, sep, rest = path.partition("/")
  while sep:
    if head in d and isinstance(d[head], dict):
      return lookup(d[head], rest)
    more, sep, rest = rest.partition("/")
    head = f"{head}/{more}"
  raise KeyError(path)


def _texts(value) -> list[str]:
  """A Text feature's value (bytes, or a list of them for a sequence) → stripped strings, empty ones dropped."""
  items = value if isinstance(value, (list, tuple, np.ndarray)) else [value]
  out = []
  for v in items:
    s = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    s = " ".join(s.split())
    if s:
      out.append(s)
  return out


def _id(value) -> str:
  """An id feature's value (int, or text as bytes) → str, as stored (no whitespace clean-up)."""
  return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def split_sentences(texts: Sequence[str]) -> list[str]:
  """Dense captions → sentences, cut after '.', '!' or '?' followed by whitespace (`data.tfds_split_sentences`)."""
  return [s for t in texts for s in _SENTENCE_END.split(t) if s]


class TfdsSource:
  """One split of a TFDS dataset as a training source (data/sources.py's protocol: `len`, `[i]`, `materialize`,
  `wide`, `read_rejects`; picklable for grain workers, which reopen it).

  Records: `id` (the `id_key` feature as a string; the record's index when `id_key` is ""), `sentences` (the
  `captions_key` texts, lower-cased with `lowercase`, split into sentences with `sentences`), `paraphrases` (from the
  cocoid → paraphrases file, by id) and the image, decoded in `materialize`. A dataset written by `prepare
  --format=tfds` gives its pre-resized images and cached POS analyses instead, as the prepared format does.
  """
  def __init__(self, name: str, data_dir: str, split: str = "train", image_key: str = "image",
               captions_key: str = "captions/text", id_key: str = "image/id",
               paraphrases: dict[str, list[str]] | None = None, lowercase: bool = False, sentences: bool = False):
    self.name, self.data_dir, self.split = name, data_dir, split
    self.keys = {"image": image_key, "captions": captions_key, "id": id_key}
    self.paraphrases, self.lowercase, self.split_sentences = paraphrases or {}, lowercase, sentences
    self.path = dataset_dir(name, data_dir)  # `path`: what the run's skip report names
    tfds = tfds_module()
    self.builder = tfds.builder_from_directory(self.path)
    self.features = self.builder.info.features
    self.prepared = all(k in self.features for k in PREPARED_FEATURES)
    if not self.prepared:
      _check_keys(name, self.features, self.keys)
    self._ds = _open_split(self.builder, name, split, self.prepared and ("half", "full") or (image_key,))
    self.rejected = []
    self._wide = None

  def __len__(self) -> int:
    return len(self._ds)

  def __getitem__(self, i: int) -> dict:
    return {"index": int(i), "example": self._ds[int(i)]}

  def __getstate__(self):
    return {
        "args": (self.name, self.data_dir, self.split, self.keys["image"], self.keys["captions"], self.keys["id"],
                 self.paraphrases, self.lowercase, self.split_sentences), "wide": self._wide
    }

  def __setstate__(self, state):  # a grain worker reopens the split
    self.__init__(*state["args"])
    self._wide = state["wide"]

  def read_rejects(self) -> tuple[list, int, list]:
    """Nothing is dropped when a TFDS split is opened (records are checked as they are loaded): ([], records, [])."""
    return [], len(self), []

  def materialize(self, raw: dict) -> dict:
    """→ {id, sentences, paraphrases, image: PIL} (or the prepared layout's {half, full, analysis}: images still
    encoded, analyses as JSON text, parsed only when a sample builder asks for one); BadRecord for a record without
    captions or whose image does not decode."""
    ex, index = raw["example"], raw["index"]
    if self.prepared:
      return {
          "id": _id(ex["id"]) or str(index), "sentences": _texts(ex["sentences"]), "half": ex["half"],
          "full": ex["full"], "analysis": [bytes(a).decode() for a in ex["analysis"]],
          "paraphrases": _texts(ex["paraphrases"])
      }
    rid = _id(lookup(ex, self.keys["id"])) if self.keys["id"] else ""
    rid = rid or str(index)  # an empty id: the record's index
    where = f"{self.name} {self.split} record {index} ({self.keys['id'] or 'index'} {rid})"
    sentences = _texts(lookup(ex, self.keys["captions"]))
    if self.split_sentences:
      sentences = split_sentences(sentences)
    if self.lowercase:
      sentences = [s.lower() for s in sentences]
    if not sentences:
      raise BadRecord("no_captions", f"{where}: no non-empty caption in {self.keys['captions']}")
    image = lookup(ex, self.keys["image"])
    return {
        "id": rid, "sentences": sentences, "paraphrases": self.paraphrases.get(rid, []),
        "image": load_image(bytes(image), where)
    }

  def image_bytes(self, i: int) -> bytes:
    """Record `i`'s encoded image (evaluation reads images this way: evaluators/retrieval.py)."""
    return lookup(self._ds[int(i)], self.keys["image"])

  def label_and_captions(self, i: int) -> tuple[str, list[str]]:
    """(its `image/filename`, else its index; every caption as stored, decoded) of record `i`."""
    ex = self._ds[int(i)]
    label = (_id(ex["image/filename"]) if "image/filename" in ex else "") or str(i)
    caps = lookup(ex, self.keys["captions"])
    caps = caps if isinstance(caps, (list, tuple, np.ndarray)) else [caps]
    return label, [c.decode("utf-8", "replace") if isinstance(c, bytes) else str(c) for c in caps]

  @property
  def wide(self) -> np.ndarray:
    """Orientation per record (1 wide, 0 tall, -1 unreadable), for CLIC's partner buckets: the prepared dataset's
    saved array for a whole split, else read from every record's image header on first use (one pass)."""
    if self._wide is None:
      from etils import epath  # pylint: disable=import-outside-toplevel
      saved = epath.Path(self.path) / PREPARED_ORIENTATION.format(split=self.split)
      if self.prepared and saved.exists():
        with saved.open("rb") as f:
          self._wide = np.load(f)
      if self._wide is None or len(self._wide) != len(self):  # a sub-split, or no saved array: one pass
        self._wide = np.array([self._orientation(i) for i in range(len(self))], np.int8)
    return self._wide

  def _orientation(self, i: int) -> int:
    ex = self._ds[i]
    data = ex["half"] if self.prepared else lookup(ex, self.keys["image"])
    try:
      with Image.open(io.BytesIO(bytes(data))) as im:
        if self.prepared:  # a CLIC half is 112 wide × 224 high for a tall image
          return int(im.size[0] >= im.size[1])
        return int(orientation(*im.size) == "wide")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
      return -1


def _check_keys(name: str, features, keys: dict[str, str]) -> None:
  """TfdsError for a key that is no feature (listing those there are), an image key that is no encoded image or
  lies inside a sequence (one image per record), or a captions key that is no text."""
  have = feature_paths(features)
  listing = f"its features are {', '.join(sorted(have))}"
  for what, key in keys.items():
    if key and key not in have:
      raise TfdsError(f"TFDS dataset {name}: no feature {key!r} (data.tfds_{what}_key); {listing}")
  leaf, in_seq = have[keys["image"]]
  if type(leaf).__name__ != "Image" or in_seq:
    raise TfdsError(f"TFDS dataset {name}: feature {keys['image']!r} (data.tfds_image_key) is "
                    f"{'inside a sequence' if in_seq else type(leaf).__name__}, not one encoded image per record; "
                    f"{listing}")
  if getattr(have[keys["captions"]][0], "np_dtype", None) not in (object, np.object_, np.str_):  # (`.dtype` is TF's)
    raise TfdsError(f"TFDS dataset {name}: feature {keys['captions']!r} (data.tfds_captions_key) is no text; "
                    f"{listing}")


def _open_split(builder, name: str, split: str, images: Sequence[str]):
  """`builder`'s split as a random-access source, the `images` features left encoded; TfdsError when the split
  does not exist or the dataset is not stored as ArrayRecord (TFRecord needs TensorFlow)."""
  tfds = tfds_module()
  fmt = str(getattr(builder.info, "file_format", "") or "")
  if fmt and "array_record" not in fmt.lower():
    raise TfdsError(f"TFDS dataset {name} is stored as {fmt.split('.')[-1].lower()}, which only TensorFlow reads: "
                    "prepare it with file_format='array_record' (`tfds build NAME --file_format=array_record`)")
  decoders = {}
  for key in images:
    _nest(decoders, key, builder.info.features, tfds.decode.SkipDecoding())
  try:
    return builder.as_data_source(split, decoders=decoders)
  except (ValueError, KeyError, NotImplementedError) as e:
    raise TfdsError(f"TFDS dataset {name}: split {split!r} cannot be read ({' '.join(str(e).split())}); its splits "
                    f"are {', '.join(builder.info.splits)} (sub-splits as 'train[:10%]' work too)") from None


def _nest(decoders: dict, path: str, features, value) -> None:
  """Puts `value` at `path` in the nested decoders dict TFDS expects (keys as in `features`)."""
  if path in features:
    decoders[path] = value
    return
  head, _, rest = path.partition("/")
  sub = decoders.setdefault(head, {})
  _nest(sub, rest, getattr(features[head], "feature", features[head]), value)


# ------------------------------------------------------------------------------- prepare --format=tfds (writing)
PREPARED_VERSION = "1.0.0"
PREPARED_SPLIT = "train"


def prepared_features(image_format: str = "PNG"):
  """The features of a dataset `prepare --format=tfds` writes (what the prepared format's records hold)."""
  tfds = tfds_module()
  text, image = tfds.features.Text, lambda: tfds.features.Image(encoding_format=image_format.lower())
  return tfds.features.FeaturesDict({
      "id": text(), "sentences": tfds.features.Sequence(text()), "half": image(), "full": image(),
      "analysis": tfds.features.Sequence(text()), "paraphrases": tfds.features.Sequence(text())
  })


class PreparedEncoder:
  """`encode_record`'s arguments → one serialized TFDS example of `prepared_features` (picklable: rebuilds the
  features in each worker process)."""
  def __init__(self, image_format: str = "PNG"):
    self.image_format = image_format
    self._features = None

  def __getstate__(self):
    return {"image_format": self.image_format, "_features": None}

  def __call__(self, rec_id, sentences, half, full, analysis, paraphrases=(), image_format: str | None = None) -> bytes:
    """The arguments of `sources.encode_record` → the example's bytes; images in this encoder's format, which its
    features declare (`image_format`, for the same signature, is the one prepare passes: the same)."""
    del image_format
    image_format = self.image_format
    from compclip_jax.data.sources import encode_image  # pylint: disable=import-outside-toplevel
    if self._features is None:
      self._features = prepared_features(self.image_format)
    return self._features.serialize_example({
        "id": rec_id, "sentences": list(sentences), "half": encode_image(half, image_format),
        "full": encode_image(full, image_format), "analysis": [json.dumps(a.to_json()) for a in analysis],
        "paraphrases": list(paraphrases)
    })


def write_prepared_dataset(out: str, name: str, shards: Sequence[str], counts: Sequence[int], wide: np.ndarray,
                           image_format: str, description: str) -> str:
  """Makes the finished shards in `out` a TFDS dataset `<out>/<name>/<version>` (hard links named as TFDS names
  shards, `dataset_info.json`, `features.json`, the split's orientation array); → its folder. Written without
  TensorFlow (`tfds.folder_dataset.write_metadata`, no data check: that path needs TensorFlow; the caller reads
  the result back with `TfdsSource` instead)."""
  tfds = tfds_module()
  folder = os.path.join(out, name, PREPARED_VERSION)
  os.makedirs(folder, exist_ok=True)
  template = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
  prefix = f"{name}-{PREPARED_SPLIT}.array_record-"
  for old in os.listdir(folder):  # an earlier build's shards (another count is another set of names)
    if old.startswith(prefix):
      os.remove(os.path.join(folder, old))
  for k, shard in enumerate(shards):
    link = os.path.join(folder, f"{prefix}{k:05d}-of-{len(shards):05d}")
    try:
      os.link(os.path.join(out, shard), link)  # no second copy of the data
    except OSError:  # a file system without hard links
      shutil.copyfile(os.path.join(out, shard), link)
  size = sum(os.path.getsize(os.path.join(out, s)) for s in shards)
  split = tfds.core.SplitInfo(name=PREPARED_SPLIT, shard_lengths=list(counts), num_bytes=size, filename_template=None)
  np.save(os.path.join(folder, PREPARED_ORIENTATION.format(split=PREPARED_SPLIT)), np.asarray(wide, np.int8))
  # last: dataset_info.json is what makes the folder a dataset
  tfds.folder_dataset.write_metadata(data_dir=folder, features=prepared_features(image_format), split_infos=[split],
                                     filename_template=template, description=description, check_data=False)
  return folder
