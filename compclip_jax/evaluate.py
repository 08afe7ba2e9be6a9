"""`python -m compclip_jax.evaluate`, kept for one release: the command is compclip_jax/cli/evaluate.py."""
from compclip_jax.cli.evaluate import run

if __name__ == "__main__":
  run()
