"""Package of the stand-in FrozenBatchNorm2d."""
