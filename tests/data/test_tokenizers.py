"""CLIP BPE: the transformers path and the instant-clip-tokenizer path give identical ids; T5 SentencePiece vs
transformers' T5Tokenizer. Vocabularies are built by the test (no hub)."""
import json
import pickle
import re

import numpy as np
import pytest
import transformers

from compclip_jax.data.tokenizers import CLIPTokenizer, SiglipTokenizer, T5Tokenizer

EDGE_CASES = [
    "",
    "a",
    "A photo of a CAT",
    "  multiple   spaces\tand\nnewlines  ",
    "café naïve façade",
    "emoji 🙂 and ümlaut",
    "numbers 12345 and 3.14",
    "punctuation!!! ... ?!",
    "it's don't we'll they'd",
    "a dog. a cat.",
    "red-shirt man, gray horse; 'quoted' \"double\"",
    "x " * 200,
    # text cleaning (both backends clean before BPE): entities, curly quotes, mojibake, odd whitespace
    "tom &amp; jerry &amp;amp; co",
    "“curly” ‘quotes’",
    "cafÃ© crÃ¨me",
    "non\xa0breaking\u2009space",
    "&lt;b&gt; &#39;x&#39;",
    "ﬁsh ＡＢＣ"
]


def _bytes_to_unicode():
  """GPT-2 / CLIP byte → printable-character table (written out again here as an independent reference)."""
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
  cs, n = bs[:], 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def _write_vocab(tmp_path, texts, max_words=400):
  """A small BPE vocabulary in both on-disk formats: OpenAI merges file and HF vocab.json + merges.txt."""
  counts = {}
  for t in texts:
    for w in re.findall(r"[a-z]+", t.lower()):
      counts[w] = counts.get(w, 0) + 1
  merges, known = [], set()
  for w in sorted(counts, key=lambda w: (-counts[w], w))[:max_words]:
    syms = list(w[:-1]) + [w[-1] + "</w>"]
    cur = syms[0]
    for s in syms[1:]:
      if cur + s not in known:
        merges.append(f"{cur} {s}")
        known.add(cur + s)
      cur += s
  chars = list(_bytes_to_unicode().values())
  vocab = chars + [c + "</w>" for c in chars] + [m.replace(" ", "") for m in merges]
  vocab += ["<|startoftext|>", "<|endoftext|>"]
  text = "#version: 0.2\n" + "\n".join(merges) + "\n"
  (tmp_path / "merges.txt").write_text(text, encoding="utf-8")
  (tmp_path / "bpe_simple_vocab.txt").write_text(text, encoding="utf-8")
  (tmp_path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}), encoding="utf-8")
  return len(vocab)


def _captions(benchmarks_dir):
  out = []
  for f in sorted((benchmarks_dir / "sugarcrepe").glob("*.json")):
    for row in json.loads(f.read_text()).values():
      out += [row["caption"], row["negative_caption"]]
  for f in sorted((benchmarks_dir / "sugarcrepe_pp").glob("*.json")):
    for row in json.loads(f.read_text()):
      out += [row["caption"], row["caption2"], row["negative_caption"]]
  return out


def test_both_clip_backends_give_identical_ids(tmp_path, benchmarks_dir):
  texts = _captions(benchmarks_dir)
  assert len(texts) > 25_000
  vocab_size = _write_vocab(tmp_path, texts)
  hf = CLIPTokenizer.from_dir(str(tmp_path), pad_id=0)
  instant = CLIPTokenizer.from_openai_vocab(str(tmp_path / "bpe_simple_vocab.txt"), vocab_size, pad_id=0)
  assert hf.backend == "transformers" and instant.backend == "instant-clip-tokenizer"
  assert (hf.sot_id, hf.eot_id) == (instant.sot_id, instant.eot_id) == (vocab_size - 2, vocab_size - 1)
  texts += EDGE_CASES
  a, b = hf(texts), instant(texts)
  assert a.shape == (len(texts), 77) and a.dtype == np.int32
  bad = np.nonzero((a != b).any(1))[0]
  assert not len(bad), [texts[i] for i in bad[:5]]
  body = a[(a > 0) & (a < vocab_size - 2)]
  assert (body > 511).mean() > 0.5  # the merges are really used, not just byte tokens


def test_truncation_forces_eot_last_and_pads():
  tok = CLIPTokenizer.default()
  ids = tok(["a photo of a cat", "word " * 100])
  np.testing.assert_array_equal(ids[0, :8], [49406, 320, 1125, 539, 320, 2368, 49407, 0])  # OpenAI's known ids
  assert ids[1, -1] == 49407 and ids[1, 0] == 49406 and (ids[1, 1:-1] != 49407).all()
  assert tok.count_truncated(["a photo of a cat", "word " * 100]) == 1
  both, n = tok.encode(["a photo of a cat", "word " * 100, "word " * 75, "word " * 76])  # 75 tokens fit, 76 do not
  np.testing.assert_array_equal(both[:2], ids)
  assert n == 2
  assert (CLIPTokenizer.default(pad_id=49407)(["a cat"])[0, 4:] == 49407).all()


def test_t5_tokenizer_matches_transformers(tmp_path):
  import sentencepiece as spm
  corpus = [
      f"a {c} {s} is {r} a {c2} {s2}" for c in ("red", "blue", "green", "small", "large")
      for s in ("cube", "ball", "cone") for r in ("left of", "right of", "above", "below") for c2 in ("gray", "yellow")
      for s2 in ("horse", "man")
  ]
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(tmp_path / "spiece"), vocab_size=30,
                                 pad_id=0, eos_id=1, unk_id=2, bos_id=-1, model_type="unigram", minloglevel=2)
  ours = T5Tokenizer(str(tmp_path / "spiece.model"))
  ref = transformers.T5Tokenizer.from_pretrained(str(tmp_path), extra_ids=0)
  texts = corpus[:20] + ["a red cube " * 30, "unseen words: zebra!"]
  want = ref(texts, max_length=77, truncation=True, padding="max_length", return_tensors="np")["input_ids"]
  np.testing.assert_array_equal(ours(texts), want)
  assert ours(["a red cube " * 30])[0, -1] == 1  # EOS kept on truncation
  assert ours.decode(ours(["a red cube is above a gray horse"]))[0] == "a red cube is above a gray horse"


def test_missing_spiece_model_names_the_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="spiece.model"):
    T5Tokenizer(str(tmp_path / "spiece.model"))


# Hand-built expectations of open_clip's / OpenAI's cleaning (ftfy.fix_text, html.unescape twice, whitespace, lower).
CLEANED = {
    "Tom &amp; Jerry": "tom & jerry",
    "&amp;amp;": "&",  # unescaped twice
    "“Curly” ‘quotes’": "\"curly\" 'quotes'",  # ftfy uncurls quotes
    "cafÃ©": "café",  # mojibake (UTF-8 read as Latin-1) repaired by ftfy
    "  a  double   space\tand\nnewline ": "a double space and newline",
    "non\xa0breaking": "non breaking",
    "ﬁsh ＡＢＣ": "fish abc",  # ftfy: ligature and full-width characters
    "it&#39;s": "it's",
    "plain text": "plain text",
}


def test_clean_text_as_open_clip():
  from compclip_jax.data.tokenizers import clean_text
  for raw, want in CLEANED.items():
    assert clean_text(raw) == want, raw


def test_tokenizer_cleans_by_default_and_the_switch_turns_it_off():
  tok = CLIPTokenizer.default()
  raw, clean = list(CLEANED), list(CLEANED.values())
  np.testing.assert_array_equal(tok(raw), tok(clean))
  # ids of open_clip 2.31's SimpleTokenizer for "Tom &amp; Jerry" (run once, outside the project)
  np.testing.assert_array_equal(tok(["Tom &amp; Jerry"])[0, :6], [49406, 2435, 261, 9164, 49407, 0])
  old = tok.with_cleaning(False)
  differ = (old(raw) != tok(clean)).any(1)
  assert differ.tolist() == [True, True, True, True, False, False, True, True, False]
  assert tok.clean and not old.clean
  assert tok.count_truncated(["&amp; " * 40]) == 0 and old.count_truncated(["&amp; " * 40]) == 1


def test_cleaning_survives_pickling_into_workers(tmp_path):
  import pickle
  tok = pickle.loads(pickle.dumps(CLIPTokenizer.default().with_cleaning(False)))
  assert not tok.clean
  assert CLIPTokenizer.default()(["a &amp; b"]).tolist() != tok(["a &amp; b"]).tolist()


def _open_clip_clean(text):
  """open_clip's `_clean_lower`, written out: basic_clean (ftfy, unescape ×2, strip), whitespace_clean, lower."""
  import html

  import ftfy
  text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
  return " ".join(text.split()).strip().lower()


def test_plain_ascii_fast_path_equals_ftfy(benchmarks_dir):
  from compclip_jax.data.tokenizers import clean_text
  rng = np.random.default_rng(0)
  alphabet = [chr(c) for c in range(32, 127)] + [
      "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x00", "\x7f", "\x1b[31m", "&amp;", "&#39;", "<b>", "é", "Ã©",
      "“", "\u2028"
  ]
  texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 60)))) for _ in range(3000)]
  texts += _captions(benchmarks_dir)[:4000]
  bad = [t for t in texts if clean_text(t) != _open_clip_clean(t)]
  assert not bad, bad[:5]


def test_builtin_tokenizer_is_built_on_first_use_with_openais_special_ids(monkeypatch):
  """`CLIPTokenizer.default()` (what load_clip returns for a standard vocabulary) builds instant-clip-tokenizer on
  its first call, once; its SOT/EOT ids are the backend's own, and the ids are the backend's BPE framed by them."""
  import instant_clip_tokenizer
  from compclip_jax.data import tokenizers
  real, built = instant_clip_tokenizer.Tokenizer, []
  monkeypatch.setattr(instant_clip_tokenizer, "Tokenizer", lambda: built.append(1) or real())
  tok = CLIPTokenizer.default(context_length=12)
  assert not built
  ids = tok(["a red cube left of a ball", "two dogs"])
  tok("again")
  assert len(built) == 1
  backend = real()
  assert (tokenizers.SOT_ID, tokenizers.EOT_ID) == (backend.start_of_text(), backend.end_of_text())
  for row, text in zip(ids, ["a red cube left of a ball", "two dogs"]):
    want = [backend.start_of_text(), *backend.encode(text), backend.end_of_text()]
    assert list(row[:len(want)]) == want and not row[len(want):].any()


def _siglip_spiece(tmp_path, texts, vocab_size=400):
  """A SigLIP-style SentencePiece model trained on `texts` (pad 0, </s> 1, <unk> 2), as `spiece.model`."""
  import sentencepiece as spm
  spm.SentencePieceTrainer.train(sentence_iterator=iter([t.lower() for t in texts]),
                                 model_prefix=str(tmp_path / "spiece"), vocab_size=vocab_size, pad_id=0, eos_id=1,
                                 unk_id=2, bos_id=-1, hard_vocab_limit=False, minloglevel=2, num_threads=1)
  return str(tmp_path / "spiece.model")


def test_siglip_tokenizer_equals_transformers_on_the_benchmark_captions(tmp_path, benchmarks_dir):
  """transformers' SiglipTokenizer with padding="max_length", truncation=True at 64 (how SigLIP is run) on every
  SugarCrepe / SugarCrepe++ caption and the edge cases: punctuation dropped, lower-cased, EOS, padded with EOS."""
  texts = _captions(benchmarks_dir)
  ours = SiglipTokenizer(_siglip_spiece(tmp_path, texts[::7]))
  ref = transformers.SiglipTokenizer(vocab_file=ours.path)
  texts += EDGE_CASES + ["Hello, World!  A   dog's toy.", "\u2581odd \u2581 marks", "word " * 80, ""]
  want = np.asarray(ref(texts, padding="max_length", max_length=64, truncation=True)["input_ids"], np.int32)
  got = ours(texts)
  assert got.shape == (len(texts), 64) and ours.pad_id == ours.eos_id == 1
  bad = np.nonzero((got != want).any(1))[0]
  assert not len(bad), [texts[i] for i in bad[:5]]
  assert ours.count_truncated(["word " * 80, "a cat"]) == 1 and got[-2, -1] == 1  # EOS kept on truncation
  assert pickle.loads(pickle.dumps(ours))(texts[:50]).tolist() == got[:50].tolist()  # grain workers rebuild it
