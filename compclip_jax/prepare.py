"""`python -m compclip_jax.prepare`, kept for one release: the command is compclip_jax/cli/prepare.py."""
from compclip_jax.cli.prepare import run

if __name__ == "__main__":
  run()
