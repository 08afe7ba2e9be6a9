"""Benchmarks (`python -m compclip_jax bench …`, `python -m compclip_jax bench_device`): `main` times loading,
encoding, the host pipeline and train steps against baselines; `device` is the prepared accelerator benchmark."""
