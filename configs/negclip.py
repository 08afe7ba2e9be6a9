"""NegCLIP as the CLIC reference runs it (METHODS §1.5 "our NegCLIP"): single image, a caption, its single-sentence
swap negative; CE over positives ∪ negatives for i2t, positives for t2i; no alternation. Text side trains."""
from compclip_jax.methods import negclip
from compclip_jax.train import config


def get_config(arg: str = ""):
  return config.for_method(negclip.METHOD, arg)
