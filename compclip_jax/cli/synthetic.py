"""python -m compclip_jax synthetic --t5_tokenizer=OUT.model: trains the SentencePiece model of the synthetic world's
fixed vocabulary (what compclip_jax/assets/synthetic_spiece.model is; compclip_jax/data/synthetic/scenes.py)."""
from __future__ import annotations

from absl import flags

from compclip_jax.cli import app as cli
from compclip_jax.data.synthetic import tokenizer as synthetic_tokenizer

_T5_TOKENIZER = flags.DEFINE_string(
    "t5_tokenizer", None, "Write the random T5 decoder's SentencePiece model, trained "
    "on the world's fixed vocabulary, to this .model file.", required=True)


def main(argv) -> None:
  cli.refuse_arguments(argv)
  print(synthetic_tokenizer.train_t5_tokenizer(_T5_TOKENIZER.value))


def run() -> None:
  cli.run(main)


if __name__ == "__main__":
  run()
