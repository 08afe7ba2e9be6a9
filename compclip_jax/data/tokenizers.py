"""Tokenizers: CLIP BPE (the checkpoint's own files via transformers, else instant-clip-tokenizer), T5 SentencePiece,
and SigLIP's (SentencePiece) and SigLIP 2's (Gemma's SentencePiece BPE), read with `sentencepiece` alone.

Both CLIP backends only produce the BPE tokens of a text; the cleaning before BPE and the framing are ours, so the two
give identical rows: `[SOT] tokens… [EOT] pad…`, `context_length` wide, truncated with EOT forced last (METHODS §1.2
step 7).
"""
from __future__ import annotations

import html
import json
import logging
import os
import re
import shutil
import string
import unicodedata
from typing import Callable, Sequence

import numpy as np

SOT_ID, EOT_ID = 49406, 49407  # OpenAI's BPE (vocab 49408): its last two ids
CLIP_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                        "special_tokens_map.json")
_WS = re.compile(r"\s+")
# Printable ASCII, tab and line breaks, no "&": ftfy.fix_text and html.unescape leave such text unchanged (ftfy only
# touches non-ASCII characters, control characters, terminal escapes and line-break style; html.unescape needs "&"),
# so cleaning it is only the whitespace collapse and lower-casing. Most captions take this path (tested against ftfy).
_PLAIN = re.compile(r"[\t\n\r\x20-\x25\x27-\x7e]*")


def normalize_whitespace(text: str) -> str:
  """The normalisation HF's CLIP tokenizer applies before BPE (NFC, whitespace collapsed; lower-casing happens in
  both backends): what both backends see with `data.clean_text=False`."""
  return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip()


def clean_text(text: str) -> str:
  """open_clip's / OpenAI's cleaning before BPE (METHODS §1.2 step 7), in their order: `ftfy.fix_text` (mojibake
  "cafÃ©" → "café", curly quotes → straight, NFC), `html.unescape` twice ("&amp;amp;" → "&"), strip, whitespace runs
  → one space, strip, lower-case."""
  if _PLAIN.fullmatch(text):
    return " ".join(text.split()).lower()
  import ftfy  # pylint: disable=import-outside-toplevel
  text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
  return " ".join(text.split()).strip().lower()


class _Lazy:
  """`make()` called once, on first use (thread-safe enough: a race builds two equal backends, one is kept)."""
  def __init__(self, make: Callable[[], object]):
    self._make, self._value = make, None

  def __call__(self):
    if self._value is None:
      self._value = self._make()
    return self._value


class CLIPTokenizer:
  """texts → np.int32 [N, context_length]. `pad_id`: 0 (open_clip) or the checkpoint tokenizer's pad id (HF).

  `clean` (`data.clean_text`, default True): texts go through `clean_text` before BPE, as open_clip's and OpenAI's
  tokenizers do; False only normalises whitespace (`normalize_whitespace`, the old behaviour). Both backends.
  """
  # causal and pooled at EOT: the padding after a batch's longest text can be cut (evaluators, data.trim_tokens)
  trims_padding = True

  def __init__(self, encode: Callable[[Sequence[str]], list[list[int]]], sot_id: int, eot_id: int,
               context_length: int = 77, pad_id: int = 0, source_dir: str | None = None, backend: str = "",
               recipe: tuple = (), clean: bool = True):
    self._encode, self.sot_id, self.eot_id = encode, sot_id, eot_id
    self.context_length, self.pad_id, self.source_dir, self.backend = context_length, pad_id, source_dir, backend
    self._recipe = recipe  # (constructor name, *args): how a worker process rebuilds this tokenizer
    self.clean = clean

  def __getstate__(self):
    return {"recipe": self._recipe, "clean": self.clean}

  def __setstate__(self, state):
    name, *args = state["recipe"]
    self.__dict__.update(getattr(CLIPTokenizer, name)(*args).__dict__)
    self.clean = state.get("clean", True)

  def with_cleaning(self, clean: bool) -> "CLIPTokenizer":
    """This tokenizer with `clean` set (shares the backend)."""
    out = object.__new__(CLIPTokenizer)  # not copy.copy: that goes through __getstate__ and rebuilds the backend
    out.__dict__.update(self.__dict__, clean=bool(clean))
    return out

  def _tokens(self, texts: Sequence[str]) -> list[list[int]]:
    prep = clean_text if self.clean else normalize_whitespace
    return self._encode([prep(t) for t in texts])

  @classmethod
  def default(cls, context_length: int = 77, pad_id: int = 0) -> "CLIPTokenizer":
    """OpenAI's BPE (vocab 49408) from instant-clip-tokenizer, which embeds it: no files, no download.

    The backend is built on the first call (~80 ms of `load_clip` otherwise, for a model that may only encode
    images); its special ids are OpenAI's SOT_ID / EOT_ID (tests/data/test_tokenizers.py checks them against it).
    """
    import instant_clip_tokenizer  # pylint: disable=import-outside-toplevel
    backend = _Lazy(instant_clip_tokenizer.Tokenizer)
    return cls(lambda texts: [backend().encode(t) for t in texts], SOT_ID, EOT_ID, context_length, pad_id,
               backend="instant-clip-tokenizer", recipe=("default", context_length, pad_id))

  @classmethod
  def from_openai_vocab(cls, merges_file: str, vocab_size: int, context_length: int = 77,
                        pad_id: int = 0) -> "CLIPTokenizer":
    """instant-clip-tokenizer on an OpenAI-format merges file (`bpe_simple_vocab_16e6.txt`)."""
    import instant_clip_tokenizer  # pylint: disable=import-outside-toplevel
    tok = instant_clip_tokenizer.Tokenizer.load(merges_file, vocab_size)
    return cls(lambda texts: [tok.encode(t) for t in texts], tok.start_of_text(), tok.end_of_text(), context_length,
               pad_id, backend="instant-clip-tokenizer",
               recipe=("from_openai_vocab", merges_file, vocab_size, context_length, pad_id))

  @classmethod
  def from_dir(cls, directory: str, context_length: int = 77, pad_id: int | None = None) -> "CLIPTokenizer":
    """The checkpoint's own tokenizer files (tokenizer.json or vocab.json + merges.txt), read by transformers (a
    checkpoint whose vocabulary is not CLIP's standard one; the standard one needs no transformers)."""
    try:
      import transformers  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise ImportError(f"{directory}: its own tokenizer files are read with transformers (pip install "
                        "transformers tokenizers; requirements.txt pins them)") from e
    hf = transformers.CLIPTokenizer.from_pretrained(directory)
    sot, eot = hf.bos_token_id, hf.eos_token_id

    def encode(texts):
      ids = hf(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
      return [list(x) for x in ids]

    pad = pad_id if pad_id is not None else (hf.pad_token_id if hf.pad_token_id is not None else 0)
    return cls(encode, sot, eot, context_length, pad, source_dir=directory, backend="transformers",
               recipe=("from_dir", directory, context_length, pad))

  @staticmethod
  def has_files(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, "tokenizer.json")) or all(
        os.path.exists(os.path.join(directory, f)) for f in ("vocab.json", "merges.txt"))

  def __call__(self, texts: Sequence[str] | str) -> np.ndarray:
    return self.encode(texts)[0]

  def encode(self, texts: Sequence[str] | str) -> tuple[np.ndarray, int]:
    """(ids np.int32 [N, context_length], how many texts lost tokens) from one cleaning + BPE pass."""
    if isinstance(texts, str):
      texts = [texts]
    out = np.full((len(texts), self.context_length), self.pad_id, np.int32)
    truncated = 0
    for row, toks in zip(out, self._tokens(texts)):
      truncated += len(toks) > self.context_length - 2
      ids = [self.sot_id, *toks[:self.context_length - 2], self.eot_id]
      row[:len(ids)] = ids
    return out, truncated

  def count_truncated(self, texts: Sequence[str]) -> int:
    """How many texts lose tokens at `context_length` (METHODS §1.2 step 7 asks to count them)."""
    return sum(len(t) > self.context_length - 2 for t in self._tokens(texts))


class T5Tokenizer:
  """SentencePiece `spiece.model` → np.int32 [N, max_length]: pieces, EOS appended (kept on truncation), pad 0."""
  def __init__(self, spiece_model: str, pad_id: int = 0, eos_id: int = 1):
    import sentencepiece  # pylint: disable=import-outside-toplevel
    if not os.path.exists(spiece_model):
      raise FileNotFoundError(f"T5 tokenizer model {spiece_model} not found (an HF T5 directory has spiece.model)")
    self.sp = sentencepiece.SentencePieceProcessor(model_file=spiece_model)
    self.pad_id, self.eos_id, self.path = pad_id, eos_id, spiece_model

  def __getstate__(self):
    return {"spiece_model": self.path, "pad_id": self.pad_id, "eos_id": self.eos_id}

  def __setstate__(self, state):
    self.__init__(**state)

  def __call__(self, texts: Sequence[str] | str, max_length: int = 77) -> np.ndarray:
    if isinstance(texts, str):
      texts = [texts]
    out = np.full((len(texts), max_length), self.pad_id, np.int32)
    for row, ids in zip(out, self.sp.encode(list(texts))):
      ids = [*ids[:max_length - 1], self.eos_id]
      row[:len(ids)] = ids
    return out

  def decode(self, ids: np.ndarray) -> list[str]:
    return [self.sp.decode([int(i) for i in row if i not in (self.pad_id, self.eos_id)]) for row in np.asarray(ids)]


SIGLIP_TOKENIZER_FILES = ("spiece.model", "tokenizer_config.json", "special_tokens_map.json")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_SPIECE_SPACE = "\u2581"


class SiglipTokenizer:
  """SigLIP's SentencePiece tokenizer (`spiece.model`) → np.int32 [N, context_length]: the ids transformers'
  `SiglipTokenizer` gives with `padding="max_length", truncation=True` (how SigLIP was trained and is run): text
  lower-cased, ASCII punctuation removed, whitespace collapsed, pieces, EOS appended (kept on truncation), padded with
  the EOS id ("sticky EOS"); 64 wide. Equal to transformers' on the 29,293 SugarCrepe / SugarCrepe++ captions
  (tests/data/test_tokenizers.py), without transformers. No attention mask: the model was trained without one.

  Pieces as transformers makes them: `▁` + the canonical text, encoded after an `<unk>` whose pieces are dropped (its
  model has no dummy prefix)."""
  # the text tower reads the last position, padding included: rows are never cut to their longest text
  trims_padding = False
  backend = "sentencepiece"

  def __init__(self, spiece_model: str, context_length: int = 64, lower: bool = True):
    import sentencepiece  # pylint: disable=import-outside-toplevel
    if not os.path.exists(spiece_model):
      raise FileNotFoundError(f"SigLIP tokenizer model {spiece_model} not found (an HF SigLIP directory has "
                              "spiece.model)")
    self.sp = sentencepiece.SentencePieceProcessor(model_file=spiece_model)
    self.path, self.context_length, self.lower = spiece_model, context_length, lower
    self.eos_id = self.pad_id = self.sp.piece_to_id("</s>")
    self.source_dir = os.path.dirname(os.path.abspath(spiece_model))
    self._unk_pieces = len(self.sp.encode("<unk>", out_type=str))

  def __getstate__(self):
    return {"spiece_model": self.path, "context_length": self.context_length, "lower": self.lower}

  def __setstate__(self, state):
    self.__init__(**state)

  @classmethod
  def from_dir(cls, directory: str, context_length: int = 64) -> "SiglipTokenizer":
    """`spiece.model` and, when present, `tokenizer_config.json`'s `do_lower_case`."""
    cfg_path = os.path.join(directory, "tokenizer_config.json")
    lower = True
    if os.path.exists(cfg_path):
      with open(cfg_path) as f:
        lower = bool(json.load(f).get("do_lower_case", True))
    return cls(os.path.join(directory, "spiece.model"), context_length, lower)

  @staticmethod
  def has_files(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, "spiece.model"))

  def with_cleaning(self, clean: bool) -> "SiglipTokenizer":
    """Itself: ftfy / html cleaning (`data.clean_text`) is not applied — transformers' and big_vision's SigLIP
    tokenizers only canonicalise (`canonical`), which this one equals; open_clip's also cleans first."""
    del clean
    return self

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  def canonical(self, text: str) -> str:
    """big_vision's / transformers' `canonicalize_text`: lower-case, punctuation removed, whitespace collapsed."""
    text = text.lower() if self.lower else text
    return _WS.sub(" ", text.translate(_PUNCTUATION)).strip()

  def _ids(self, text: str) -> list[int]:
    pieces = self.sp.encode("<unk>" + self.canonical(_SPIECE_SPACE + text.replace(_SPIECE_SPACE, " ")), out_type=str)
    return [self.sp.piece_to_id(p) for p in pieces[self._unk_pieces:]]

  def encode(self, texts: Sequence[str] | str) -> tuple[np.ndarray, int]:
    """(ids [N, context_length], how many texts lost tokens)."""
    if isinstance(texts, str):
      texts = [texts]
    out = np.full((len(texts), self.context_length), self.pad_id, np.int32)
    truncated = 0
    for row, text in zip(out, texts):
      toks = self._ids(text)
      truncated += len(toks) > self.context_length - 1
      ids = [*toks[:self.context_length - 1], self.eos_id]
      row[:len(ids)] = ids
    return out, truncated

  def __call__(self, texts: Sequence[str] | str) -> np.ndarray:
    return self.encode(texts)[0]

  def count_truncated(self, texts: Sequence[str]) -> int:
    return sum(len(self._ids(t)) > self.context_length - 1 for t in texts)

  def write_files(self, directory: str) -> list[str]:
    """spiece.model + tokenizer_config.json + special_tokens_map.json: what `transformers.SiglipTokenizer.
    from_pretrained` (and `AutoProcessor`) reads."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, "spiece.model")
    if os.path.abspath(self.path) != os.path.abspath(target):
      shutil.copyfile(self.path, target)
    special = {"eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
      json.dump(
          {
              "tokenizer_class": "SiglipTokenizer", "model_max_length": self.context_length,
              "do_lower_case": self.lower, **special
          }, f, indent=2)
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
      json.dump(special, f, indent=2)
    return [os.path.join(directory, n) for n in SIGLIP_TOKENIZER_FILES]


GEMMA_TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json")


class GemmaTokenizer(SiglipTokenizer):
  """SigLIP 2's Gemma tokenizer (`tokenizer.model`: SentencePiece BPE, byte fallback, 256k pieces) → np.int32 [N,
  context_length]: the ids transformers' `GemmaTokenizer` gives a SigLIP 2 fixed-resolution directory with
  `padding="max_length", max_length=64, truncation=True` on lower-cased text: lower-cased (`str.lower`), Gemma's
  pieces (no dummy prefix, no normalisation), no BOS, EOS appended and kept on truncation, padded with `<pad>` (0, not
  EOS as SigLIP pads), 64 wide. No transformers, no attention mask; SigLIP's rows (`encode`, `trims_padding`, …).
  Equal to transformers' on the 29,293 SugarCrepe / SugarCrepe++ captions and the edge cases, with a Gemma-like
  model trained in tests/data/test_gemma_tokenizer.py.

  Established from: big_vision's SigLIP2_demo.ipynb, `lower(key="text")|tok(length=64, model="gemma", bos="no",
  eos="sticky")` ("SigLIP 2 models work best with lowercase texts"), whose `tok` op (pp/proj/paligemma/ops.py) keeps
  `x[:63] + x[-1:]` and pads with the tokenizer's pad id; transformers' model_doc/siglip2.md, "pass
  padding="max_length" and max_length=64" and "Model was trained with lowercased text, so make sure your text labels
  are preprocessed the same way" (its `GemmaTokenizer`, which a fixed-resolution `siglip` directory gets, does not
  lower-case; NaFlex's `Siglip2Tokenizer` does); transformers' convert_siglip2_to_hf.py, `GemmaTokenizerFast(
  add_bos_token=False, add_eos_token=True, padding_side="right")`, and the Hub configs' `add_bos_token: false`
  (transformers PR #47627); big_vision's README_siglip2.md: the Gemma tokenizer and 256k vocabulary are the only
  change from SigLIP's towers. Where big_vision differs we follow transformers: big_vision's `tf.strings.lower` is
  ASCII only ("É" stays), and transformers reads `<eos>`, `<pad>`, `<bos>`, `<unk>` written in a text as those
  tokens, which SentencePiece spells out (matched here as transformers does).
  """
  def __init__(self, tokenizer_model: str, context_length: int = 64, lower: bool = True):
    import sentencepiece  # pylint: disable=import-outside-toplevel
    if not os.path.exists(tokenizer_model):
      raise FileNotFoundError(f"Gemma tokenizer model {tokenizer_model} not found (an HF SigLIP 2 directory has "
                              "tokenizer.model)")
    self.sp = sentencepiece.SentencePieceProcessor(model_file=tokenizer_model)
    self.path, self.context_length, self.lower = tokenizer_model, context_length, lower
    self.eos_id, self.pad_id = self.sp.eos_id(), self.sp.pad_id()
    if min(self.eos_id, self.pad_id) < 0:
      raise ValueError(f"{tokenizer_model}: no <eos> or <pad> piece (not a Gemma tokenizer model)")
    self.source_dir = os.path.dirname(os.path.abspath(tokenizer_model))
    # transformers splits its special tokens (<pad>, <eos>, <bos>, <unk>) out of the raw text before BPE; SentencePiece
    # spells them out piece by piece (its user-defined pieces, e.g. <mask>, it matches itself)
    n, is_special = self.sp.get_piece_size(), lambda i: self.sp.is_control(i) or self.sp.is_unknown(i)
    self._special_ids = special = {self.sp.id_to_piece(i): i for i in range(n) if is_special(i)}
    self._specials = re.compile("(" + "|".join(re.escape(p) for p in sorted(special, key=len, reverse=True)) + ")")

  def __getstate__(self):
    return {"tokenizer_model": self.path, "context_length": self.context_length, "lower": self.lower}

  @classmethod
  def from_dir(cls, directory: str, context_length: int = 64) -> "GemmaTokenizer":
    """`tokenizer.model`; `tokenizer_config.json` is only checked: a config asking transformers for a BOS or for no
    EOS gets a warning (those ids are not SigLIP 2's training ids; ours stay SigLIP 2's)."""
    cfg_path = os.path.join(directory, "tokenizer_config.json")
    if os.path.exists(cfg_path):
      with open(cfg_path) as f:
        cfg = json.load(f)
      if cfg.get("add_bos_token") is True or cfg.get("add_eos_token") is False:
        logging.warning(
            "%s: add_bos_token=%s, add_eos_token=%s: transformers would frame the ids differently from SigLIP 2's "
            "training (no BOS, EOS); this tokenizer keeps SigLIP 2's", cfg_path, cfg.get("add_bos_token"),
            cfg.get("add_eos_token"))
    return cls(os.path.join(directory, "tokenizer.model"), context_length)

  @staticmethod
  def has_files(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, "tokenizer.model"))

  def _ids(self, text: str) -> list[int]:
    text = text.lower() if self.lower else text
    if not self._special_ids or not self._specials.search(text):
      return self.sp.encode(text)
    out = []
    for i, part in enumerate(self._specials.split(text)):  # odd parts: the special tokens
      out += [self._special_ids[part]] if i % 2 else self.sp.encode(part)
    return out

  def write_files(self, directory: str) -> list[str]:
    """tokenizer.model (and the source directory's tokenizer.json, when it has one) + tokenizer_config.json +
    special_tokens_map.json: SigLIP 2's files, which `transformers.AutoTokenizer` / `AutoProcessor` read as a
    `GemmaTokenizer` without BOS, with EOS, padded on the right. As with Google's files, transformers does not
    lower-case: its users lower-case the text themselves."""
    os.makedirs(directory, exist_ok=True)
    written = []
    sources = {"tokenizer.model": self.path, "tokenizer.json": os.path.join(self.source_dir, "tokenizer.json")}
    for name, src in sources.items():
      target = os.path.join(directory, name)
      if not os.path.exists(src):  # no tokenizer.json: transformers builds its tokenizer from tokenizer.model
        continue
      if os.path.abspath(src) != os.path.abspath(target):
        shutil.copyfile(src, target)
      written.append(target)
    piece = self.sp.id_to_piece
    special = {
        "bos_token": piece(self.sp.bos_id()) if self.sp.bos_id() >= 0 else None, "eos_token": piece(self.eos_id),
        "pad_token": piece(self.pad_id), "unk_token": piece(self.sp.unk_id())
    }
    special = {k: v for k, v in special.items() if v is not None}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
      json.dump(
          {
              "tokenizer_class": "GemmaTokenizer", "model_max_length": self.context_length, "add_bos_token": False,
              "add_eos_token": True, "padding_side": "right", "model_input_names": ["input_ids"], **special
          }, f, indent=2)
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
      json.dump(special, f, indent=2)
    return written + [os.path.join(directory, n) for n in GEMMA_TOKENIZER_FILES[1:]]
