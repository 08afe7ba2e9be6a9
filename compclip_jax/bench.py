"""`python -m compclip_jax.bench`, kept for one release: the command is compclip_jax/cli/bench.py."""
from compclip_jax.cli.bench import run

if __name__ == "__main__":
  run()
