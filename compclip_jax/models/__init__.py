"""The towers: CLIP (clip.py), SigLIP (siglip/), the T5 v1.1 decoder (t5.py), their shared blocks (layers.py).

`TINY`: per tower family, the model.random of its tiny size (a recipe's `:runlocal,family=…`)."""
TINY = {"clip": "tiny", "siglip": "siglip_tiny"}
