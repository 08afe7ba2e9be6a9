"""Files shipped inside the package (pyproject's package-data), by path.

`SYNTHETIC_SPIECE`: the SentencePiece model of a random T5 decoder (`t5.random`, e.g. READ's `:runlocal` and the
demo), trained once on the synthetic world's fixed vocabulary, so one file serves every world size and seed:
  python -m compclip_jax synthetic --t5_tokenizer=compclip_jax/assets/synthetic_spiece.model
"""
import os

SYNTHETIC_SPIECE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "synthetic_spiece.model")
