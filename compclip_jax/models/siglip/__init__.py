"""SigLIP / SigLIP 2 (fixed resolution) as a second tower family: its config (`config.py`) and Flax towers
(`model.py`), equal to transformers' `SiglipModel`. The CLIP family is `models/clip.py`."""
