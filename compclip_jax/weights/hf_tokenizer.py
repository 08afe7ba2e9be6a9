"""Writing a CLIP tokenizer as transformers' files (`vocab.json`, `merges.txt`, `tokenizer_config.json`,
`special_tokens_map.json`), so that `CLIPTokenizer/CLIPProcessor.from_pretrained(export)` work on an export made
with the built-in tokenizer, which has no files of its own.

The vocabulary follows from the BPE merges alone (OpenAI's construction): the 256 byte symbols, the same with
`</w>`, one entry per merge, then `<|startoftext|>` and `<|endoftext|>`. `clip_merges.txt.gz` beside this module
holds OpenAI's first 48,894 merges (vocab 49,408) in `merges.txt` format — the BPE that instant-clip-tokenizer
embeds and open_clip ships as `bpe_simple_vocab_16e6.txt.gz` (taken from the open_clip_torch 3.3.0 wheel; a test
checks the written files against instant-clip-tokenizer's ids).
"""
from __future__ import annotations

import gzip
import json
import os

SOT, EOT = "<|startoftext|>", "<|endoftext|>"
STANDARD_MERGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clip_merges.txt.gz")


def byte_symbols() -> list[str]:
  """The printable character standing for each byte 0..255, in vocabulary order (GPT-2/CLIP byte-level BPE):
  printable Latin-1 bytes stand for themselves, the others are shifted to 256 + n so no symbol is whitespace or a
  control character. Order: the printable ones first (by byte), then the shifted ones."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  rest = [b for b in range(256) if b not in printable]
  return [chr(b) for b in printable] + [chr(256 + n) for n in range(len(rest))]


def read_merges(path: str, vocab_size: int) -> list[str]:
  """The merges a vocabulary of `vocab_size` uses, from a `merges.txt` or OpenAI `bpe_simple_vocab` file (.gz ok)."""
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt", encoding="utf-8") as f:
    lines = f.read().split("\n")
  n = vocab_size - 2 * 256 - 2
  merges = [m for m in lines[1:] if m][:n]  # line 0 is a header in both formats
  if len(merges) != n or any(len(m.split(" ")) != 2 for m in merges):
    raise ValueError(f"{path}: expected {n} BPE merges ('a b' lines) for vocab size {vocab_size}, "
                     f"found {len(merges)}")
  return merges


def vocab_from_merges(merges: list[str]) -> dict[str, int]:
  symbols = byte_symbols()
  tokens = symbols + [s + "</w>" for s in symbols] + [m.replace(" ", "") for m in merges] + [SOT, EOT]
  return {t: i for i, t in enumerate(tokens)}


def write_files(directory: str, merges: list[str], context_length: int, pad_id: int) -> list[str]:
  """Writes the four tokenizer files; `pad_id` becomes the pad token (0 → "!" as open_clip pads, 49407 → EOT as
  OpenAI's HF checkpoints do). Returns the file names written."""
  vocab = vocab_from_merges(merges)
  by_id = {i: t for t, i in vocab.items()}
  if pad_id not in by_id:
    raise ValueError(f"pad id {pad_id} is outside the vocabulary of {len(vocab)}")
  special = {"bos_token": SOT, "eos_token": EOT, "unk_token": EOT, "pad_token": by_id[pad_id]}
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False)
  with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
  with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
    json.dump(
        {
            "tokenizer_class": "CLIPTokenizer", "model_max_length": context_length, "do_lower_case": True,
            "errors": "replace", "add_prefix_space": False, **special
        }, f, indent=2)
  with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
    json.dump(special, f, indent=2)
  return ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]
