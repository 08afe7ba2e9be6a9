"""`python -m compclip_jax.bench_device`, kept for one release: the command is compclip_jax/cli/bench_device.py."""
from compclip_jax.cli.bench_device import run

if __name__ == "__main__":
  run()
