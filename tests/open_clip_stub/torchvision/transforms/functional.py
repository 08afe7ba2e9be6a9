"""Imported by open_clip.transform as F; unused."""
