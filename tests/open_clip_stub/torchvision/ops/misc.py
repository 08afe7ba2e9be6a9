"""open_clip.utils imports FrozenBatchNorm2d (used only to freeze timm/ResNet towers)."""


class FrozenBatchNorm2d:
  pass
