"""Fixture datasets the tests generate: CLIC CSV rows and COCO-style JSON with real images, broken rows included."""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
from PIL import Image

COLORS = ["red", "blue", "green", "yellow", "gray", "white", "black", "purple"]
OBJECTS = ["cube", "ball", "horse", "man", "dog", "car", "tree", "cone"]
RELS = ["left of", "right of", "above", "below", "next to"]


def caption(rng) -> str:
  c1, c2 = rng.choice(COLORS, 2, replace=False)
  o1, o2 = rng.choice(OBJECTS, 2, replace=False)
  return f"a {c1} {o1} {rng.choice(RELS)} a {c2} {o2}"


def extra(rng) -> str:
  return f"the {rng.choice(OBJECTS)} looks {rng.choice(['small', 'large', 'shiny', 'old'])}"


def _img(rng, w, h, mode="RGB"):
  a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
  img = Image.fromarray(a)
  return img if mode == "RGB" else img.convert(mode)


def _bomb_png(path, w=100_000, h=100_000):
  """A tiny PNG whose header claims w×h pixels (a decompression bomb that PIL reads lazily)."""
  def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

  ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
  path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) +
                   chunk(b"IEND", b""))


def write_images(root, n, seed=0) -> list[str]:
  """n good JPEG/PNG images of varied sizes and both orientations (also CMYK, palette, RGBA, 16-bit ones)."""
  rng = np.random.default_rng(seed)
  root.mkdir(parents=True, exist_ok=True)
  names = []
  for i in range(n):
    w, h = (int(rng.integers(40, 120)), int(rng.integers(40, 120)))
    mode = ["RGB", "RGB", "RGB", "CMYK", "P", "RGBA"][i % 6]
    ext = "jpg" if mode in ("RGB", "CMYK") else "png"
    name = f"img{i:03d}.{ext}"
    _img(rng, w, h, mode).save(root / name)
    names.append(name)
  Image.fromarray((rng.integers(0, 65535, (50, 70))).astype(np.uint16)).save(root / "grey16.png")
  names.append("grey16.png")
  return names


# (file name, reason the loader must report) for images that exist but cannot be used, plus one missing file
def write_broken_images(root) -> dict[str, str]:
  good = root / "img000.jpg"
  (root / "truncated.jpg").write_bytes(good.read_bytes()[:len(good.read_bytes()) // 3])
  (root / "corrupt.jpg").write_bytes(b"this is not an image at all")
  Image.new("RGB", (1, 1)).save(root / "tiny.png")
  _bomb_png(root / "bomb.png")
  return {
      "truncated.jpg": "corrupt_image", "corrupt.jpg": "corrupt_image", "tiny.png": "too_small",
      "bomb.png": "too_large", "missing.jpg": "missing_image"
  }


def write_clic_csv(tmp, n=30, seed=0, broken=True):
  """→ (csv path, image root, {image: expected skip reason}, number of rows rejected at read time)."""
  rng = np.random.default_rng(seed)
  root = tmp / "images"
  names = write_images(root, n, seed)
  bad = write_broken_images(root) if broken else {}
  lines = []
  for name in names + list(bad):
    k = int(rng.integers(2, 5))
    sents = [caption(rng)] + [extra(rng) for _ in range(k - 1)]
    lines.append(",".join([name] + [f'"{s}"' if i % 2 else s.upper() for i, s in enumerate(sents)]))
  raw = ("\n".join(lines) + "\n").encode()
  rejected = 0
  if broken:  # rows rejected when the CSV is read
    raw += b"img001.jpg,only one sentence\n"  # < 2 sentences
    raw += b"img002.jpg,,   ,\n"  # empty captions
    raw += b"img003.jpg,caf\xe9 latin-1,second\n"  # not UTF-8
    rejected = 3
  path = tmp / "rows.csv"
  path.write_bytes(raw)
  return path, root, bad, rejected


def write_coco_json(tmp, n=24, seed=0, broken=True):
  """Karpathy-style JSON (5 captions per image, train/val/test/restval splits) + paraphrases."""
  rng = np.random.default_rng(seed)
  root = tmp / "coco"
  names = write_images(root / "train2014", n, seed)
  bad = write_broken_images(root / "train2014") if broken else {}
  images, paras = [], {}
  for i, name in enumerate(names + list(bad)):
    caps = [caption(rng) for _ in range(5)]
    split = ["train", "train", "restval", "val", "test"][i % 5]
    images.append({
        "filepath": "train2014", "filename": name, "split": split, "cocoid": 1000 + i, "imgid": i,
        "sentences": [{"raw": c.capitalize() + ".", "tokens": c.split()} for c in caps]
    })
    if i % 2:
      paras[str(1000 + i)] = [f"{caps[0]} (paraphrased)"]
  images.append(
      {"filepath": "train2014", "filename": names[0], "split": "train", "cocoid": 9999,
       "sentences": [{"raw": "   "}]})  # no usable caption
  path = tmp / "dataset_coco.json"
  path.write_text(json.dumps({"images": images, "dataset": "coco"}))
  para_path = tmp / "paraphrases.json"
  para_path.write_text(json.dumps(paras))
  return path, root, para_path, bad
