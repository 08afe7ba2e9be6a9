"""`python -m compclip_jax.convert`, kept for one release: the command is compclip_jax/cli/convert.py."""
from compclip_jax.cli.convert import run

if __name__ == "__main__":
  run()
