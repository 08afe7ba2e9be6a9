"""SigLIP 2's Gemma tokenizer (`GemmaTokenizer`, sentencepiece only) vs transformers' `GemmaTokenizer` on the same
files, as SigLIP 2 users run it: lower-cased text, `padding="max_length", max_length=64, truncation=True`. The
SentencePiece model is trained by the test, set up like Gemma's (BPE, byte fallback, no dummy prefix, whitespace
kept, digits split; <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4): no hub."""
import pickle

import numpy as np
import pytest
import transformers

from compclip_jax.data.tokenizers import GemmaTokenizer, SiglipTokenizer
from tests.data.test_tokenizers import EDGE_CASES, _captions, _siglip_spiece

GEMMA_EDGE_CASES = EDGE_CASES + [
    "", "Hello, World!  A   dog's toy.", "word " * 80, "ÉCOLE Straße İstanbul ΣΊΣΥΦΟΣ", " leading and trailing ",
    "tabs\tand\r\nwindows\u3000ideographic space", "digits 2024-01-31 12:30", "日本語のキャプション 🐕‍🦺",
    "a <eos> inside, <PAD> and <bos><unk>", "<mask> is user-defined", "\u2581odd \u2581 marks", "   ", "\n"
]


def gemma_model(directory, texts, vocab_size=700) -> str:
  """A Gemma-like SentencePiece model trained on `texts` (lower-cased), as `directory/tokenizer.model`: BPE with
  byte fallback and Gemma's trainer settings (those transformers' GemmaConverter lists), Gemma's special pieces."""
  import sentencepiece as spm
  spm.SentencePieceTrainer.train(sentence_iterator=iter([t.lower() for t in texts]),
                                 model_prefix=str(directory / "tokenizer"), vocab_size=vocab_size, model_type="bpe",
                                 byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False,
                                 normalization_rule_name="identity", split_digits=True,
                                 allow_whitespace_only_pieces=True, split_by_whitespace=True, pad_id=0, eos_id=1,
                                 bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
                                 unk_piece="<unk>", user_defined_symbols=["<mask>"], hard_vocab_limit=False,
                                 minloglevel=2, num_threads=1)
  return str(directory / "tokenizer.model")


def hf_gemma(directory, **kwargs):
  """transformers' GemmaTokenizer on `directory/tokenizer.model` (converted to its BPE), framed as SigLIP 2's
  checkpoints configure it (transformers' convert_siglip2_to_hf.py)."""
  return transformers.GemmaTokenizer.from_pretrained(str(directory), add_bos_token=False, add_eos_token=True,
                                                     padding_side="right", **kwargs)


def _theirs(ref, texts, length=64):
  """What SigLIP 2 users are told to run: lower-cased texts, padding="max_length", max_length=64, truncation."""
  out = ref([t.lower() for t in texts], padding="max_length", max_length=length, truncation=True)["input_ids"]
  return np.asarray(out, np.int32)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory, benchmarks_dir):
  d = tmp_path_factory.mktemp("gemma")
  texts = _captions(benchmarks_dir)
  return GemmaTokenizer(gemma_model(d, texts[::7])), hf_gemma(d), texts


def test_gemma_tokenizer_equals_transformers_on_the_benchmark_captions(gemma):
  """Every SugarCrepe / SugarCrepe++ caption and the edge cases (empty, over-long, punctuation, unicode, whitespace,
  special tokens written in the text): lower-cased, no BOS, EOS kept on truncation, padded with <pad> 0."""
  ours, ref, texts = gemma
  texts = texts + GEMMA_EDGE_CASES
  assert len(texts) > 29_000
  want, got = _theirs(ref, texts), ours(texts)
  assert got.shape == (len(texts), 64) and got.dtype == np.int32
  assert (ours.pad_id, ours.eos_id, ours.vocab_size) == (0, 1, ref.vocab_size)
  bad = np.nonzero((got != want).any(1))[0]
  assert not len(bad), [texts[i] for i in bad[:5]]
  assert (got[:, 0] != 2).all()  # no BOS
  body = got[(got > 4) & (got < ours.vocab_size)]
  assert (body >= 5 + 256).mean() > 0.5  # merged pieces, not just byte fallback
  assert (got[-len(GEMMA_EDGE_CASES):] == 0).any()  # padded with <pad> 0, not with EOS


def test_truncation_keeps_eos_and_empty_text_is_eos_then_pad(gemma):
  ours, _, _ = gemma
  long, empty = ours(["word " * 80, ""])
  assert long[-1] == ours.eos_id and (long[:-1] != ours.eos_id).all() and (long != 0).all()
  assert empty.tolist() == [ours.eos_id] + [0] * 63
  assert ours.count_truncated(["word " * 80, "a cat", ""]) == 1
  assert ours.encode(["word " * 80, "a cat"])[1] == 1


def test_text_is_lower_cased_and_cleaning_changes_nothing(gemma):
  ours, _, _ = gemma
  raw = ["A Red CUBE", "tom &amp; jerry", "“Curly” cafÃ©", "ÉCOLE"]
  np.testing.assert_array_equal(ours(raw), ours([t.lower() for t in raw]))
  # data.clean_text (ftfy / html) is CLIP's: the Gemma tokenizer stays as transformers' is
  assert ours.with_cleaning(True) is ours and ours.with_cleaning(False) is ours


def test_siglip_tokenizer_with_cleaning_gives_the_same_ids(tmp_path, benchmarks_dir):
  tok = SiglipTokenizer(_siglip_spiece(tmp_path, _captions(benchmarks_dir)[::50]))
  raw = ["tom &amp; jerry", "“Curly” ‘quotes’", "cafÃ© crÃ¨me", "A Photo!"]
  assert tok.with_cleaning(True) is tok and tok.with_cleaning(False) is tok  # as transformers' (no ftfy / html)
  assert tok(raw)[0].tolist() == tok(["tom amp jerry"])[0].tolist()  # "&amp;" stays text, canonicalised


def test_pickling_rebuilds_the_same_tokenizer(gemma):
  ours, _, texts = gemma
  back = pickle.loads(pickle.dumps(ours))  # grain workers rebuild it from its file
  assert back(texts[:200] + GEMMA_EDGE_CASES).tolist() == ours(texts[:200] + GEMMA_EDGE_CASES).tolist()
  assert (back.context_length, back.lower, back.path) == (ours.context_length, ours.lower, ours.path)


def test_write_files_give_transformers_the_same_ids(gemma, tmp_path):
  """The files `save_clip` writes: transformers' AutoTokenizer reads them as a GemmaTokenizer (no BOS, EOS, right
  padding) with our ids, from tokenizer.model alone (no tokenizer.json beside the source) and from our own export."""
  ours, _, texts = gemma
  written = ours.write_files(str(tmp_path / "out"))
  names = sorted(p.rsplit("/", 1)[1] for p in written)
  assert names == ["special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"]  # no tokenizer.json
  ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
  assert type(ref).__name__ == "GemmaTokenizer"
  sample = texts[::40] + GEMMA_EDGE_CASES
  np.testing.assert_array_equal(_theirs(ref, sample), ours(sample))
  back = GemmaTokenizer.from_dir(str(tmp_path / "out"))
  np.testing.assert_array_equal(back(sample), ours(sample))


def test_a_missing_tokenizer_model_names_the_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="tokenizer.model"):
    GemmaTokenizer(str(tmp_path / "tokenizer.model"))
