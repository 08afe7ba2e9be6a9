"""A test-only stand-in for torchvision, put on the path of a subprocess only (tests/weights/test_weights.py, open_clip):
open_clip imports torchvision's transforms and FrozenBatchNorm2d at package import; building a CLIP from its config,
loading a state dict and encoding never use them. The real torchvision cannot be imported next to the CPU torch (its
PyPI wheel links CUDA libraries)."""
