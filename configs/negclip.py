"""NegCLIP as the CLIC reference runs it (METHODS §1.5 "our NegCLIP"): single image, a caption, its single-sentence
swap negative; CE over positives ∪ negatives for i2t, positives for t2i; no alternation. Text side trains."""
from configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.method = "negclip"
  c.data.source = "coco"
  c.clip_every = 0
  return common.with_arg(c, arg, "negclip")
