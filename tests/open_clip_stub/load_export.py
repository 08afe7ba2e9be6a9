"""Run by tests/weights/test_weights.py in a subprocess: open_clip loads our export as a user would and encodes the inputs.

  python load_export.py EXPORT_DIR INPUTS.npz OUTPUTS.npz
"""
import sys

import numpy as np
import open_clip
import torch

export, inputs, outputs = sys.argv[1:]
model = open_clip.create_model(f"local-dir:{export}").eval()  # open_clip_config.json + open_clip_model.safetensors
z = np.load(inputs)
with torch.no_grad():
  text = model.encode_text(torch.as_tensor(z["ids"], dtype=torch.long)).numpy()
  image = model.encode_image(torch.as_tensor(z["px"].transpose(0, 3, 1, 2))).numpy()
np.savez(outputs, text=text, image=image, version=open_clip.__version__)
