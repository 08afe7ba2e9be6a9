"""The synthetic-world demo on top of the library: its shipped starting point, probes, plots and the demo command
(`python -m compclip_jax.demo`). It imports the library; the library never imports it."""
