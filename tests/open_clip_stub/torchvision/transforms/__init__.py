"""Names open_clip.transform imports; never called by the test."""


class _Unused:
  def __init__(self, *args, **kwargs):
    raise NotImplementedError("torchvision stand-in: image transforms are not available")


Normalize = Compose = RandomResizedCrop = ToTensor = Resize = CenterCrop = ColorJitter = Grayscale = _Unused


class InterpolationMode:
  NEAREST, BILINEAR, BICUBIC = "nearest", "bilinear", "bicubic"
