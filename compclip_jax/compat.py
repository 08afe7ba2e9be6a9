"""The one home of the past: everything that reads what an older compclip_jax wrote or was given — config keys and
values that were renamed, keys added since a run was recorded, parameter rules added for SigLIP, the prepared
folders' older skip records, the compclip weight format's first version, workdirs from before run.json. The rest of
the code sees only today's names and formats.

What it maps (a run's recorded config in <workdir>/run.json, a command line, a file on disk):

  what                                      older                                  today
  config keys of the methods' sections      loss.w_*, data.clic_*, data.read_*,    clic.*, read.*, negclip.*
                                            model.read_proj_init, t5.*, …          (`RENAMED_KEYS`)
  schedule names                            optim.schedule="clic" / "read"         "warmup_frac_cosine" /
                                                                                   "warmup_steps_cosine"
  keys added to the shared sections         absent                                 the value that behaves as the
                                                                                   code did before (`ADDED_KEYS`)
  the parameter rules                       without SigLIP's rules                 with them (`carry_added_rules`)
  prepared folders' skipped.jsonl           "<id>: <detail>" in the detail         the detail alone
  compclip weight format                    version 1: dense kernels [in, out]     version 2: [out, in]
  workdirs                                  checkpoints without run.json           refused, with the way out

Each entry says when it changed (the version of this code that wrote the older form), so that an entry can go once no
such file is expected any more.
"""
from __future__ import annotations

import logging

# (older dotted key, or a prefix ending in ".", → today's): the methods' sections took these over from the flat
# layout of the first versions (up to 2026-11).
RENAMED_KEYS: tuple[tuple[str, str], ...] = (
    ("clip_every", "clic.clip_every"),
    ("loss.w_cont", "clic.w_cont"),
    ("loss.w_sneg", "clic.w_sneg"),
    ("loss.w_uni", "clic.w_uni"),
    ("data.clic_concat", "clic.concat"),
    ("data.clic_imagenet_normalization", "clic.imagenet_normalization"),
    ("data.clic_shared_words_across_tags", "clic.shared_words_across_tags"),
    ("data.clic_exclude_nonword", "clic.exclude_nonword"),
    ("loss.w_con", "read.w_con"),
    ("loss.w_rec", "read.w_rec"),
    ("loss.w_align", "read.w_align"),
    ("loss.align_direction", "read.align_direction"),
    ("loss.t5_dropout", "read.t5_dropout"),
    ("data.read_target_may_equal_positive", "read.target_may_equal_positive"),
    ("data.read_overlapping_swaps", "read.overlapping_swaps"),
    ("model.read_proj_init", "read.proj_init"),
    ("export.t5_decoder", "read.export_decoder"),
    ("t5.", "read.t5."),
    ("data.negclip_random_caption", "negclip.random_caption"),
)
# (key, older value, today's): schedules once named after the method that used them (up to 2026-11)
RENAMED_VALUES: tuple[tuple[str, object, object], ...] = (
    ("optim.schedule", "clic", "warmup_frac_cosine"),
    ("optim.schedule", "read", "warmup_steps_cosine"),
)
# Keys added to the shared sections after runs were recorded, with the value that behaves as the code did before
# them: an older identity read with these resumes without a difference.
_TFDS_ADDED = dict(tfds_name="coco_captions/2014:1.1.0", tfds_data_dir="", tfds_split="train", tfds_image_key="image",
                   tfds_captions_key="captions/text", tfds_id_key="image/id", tfds_lowercase=False,
                   tfds_split_sentences=False)
ADDED_KEYS: dict[str, object] = {
    **{f"data.{k}": v for k, v in _TFDS_ADDED.items()},  # since 743e607: data.source="tfds"
    "optim.clamp_logit_scale": False,  # since 37a8397: unclamped, as before
    "model.remat_vision": False,  # since eaf6739: the vision tower's blocks stored, as before
    "siglip.contrastive": "sigmoid",  # since 7a03b3a: SigLIP training (a CLIP ignores the section)
    "siglip.negatives": "columns",
    "drop_last": False,  # since a484286: ⌈num_epochs × records / batch_size⌉ steps, as before
    "optim.reference_warmup_cosine": False,  # since a484286: warmup_frac_cosine's own arithmetic, as before
    "optim.fp32_decay_factor": False,  # since a484286: optax.adamw's decay lr·wd·θ, as before
    "model.pad_tokens_to": 1,  # since a1a304d: the text tower at the batch's own width, as before
    "mesh.shard_optimizer": False,  # since e55e3e3: moments sharded as their parameters, as before
}
# The parameter rules that name SigLIP's parameters alone (added in 7a03b3a): they match no CLIP parameter, so a run
# recorded before them is the same run with them (`carry_added_rules`).
SIGLIP_RULES = (r"logit_bias", r"(clip\.)?logit_bias", r"clip\.logit_bias", r".*\.in_proj_weight", r".*\.in_proj_bias",
                r".*\.head\.probe")
RULE_KEYS = ("optim.trainable", "optim.frozen", "optim.decay", "optim.no_decay")


def rename(key: str) -> str | None:
  """Today's name of an older dotted `key` (`RENAMED_KEYS`; an entry ending in "." renames a prefix), or None."""
  for old, new in RENAMED_KEYS:
    if key == old or (old.endswith(".") and key.startswith(old)):
      return new + key[len(old):]
  return None


def new_value(key: str, value) -> object:
  """Today's value of an older one (`RENAMED_VALUES`), else `value`."""
  for k, old, new in RENAMED_VALUES:
    if k == key and value == old:
      return new
  return value


def migrate_flat(flat: dict, keep: set | None = None) -> tuple[dict, list]:
  """A flat {dotted key: value} (a recorded run identity) with older keys and values read as today's; renamed keys
  not in `keep` (another method's sections, which older configs carried) are dropped, and keys added since take the
  value that is how the code behaved before them. → (migrated, [(old, new)] of the renamed keys kept)."""
  out, moved = {}, []
  for k, v in flat.items():
    new = rename(k)
    if new is not None:
      if keep is not None and new not in keep:
        continue
      moved.append((k, new))
      k = new
    out[k] = new_value(k, v)
  for k, v in ADDED_KEYS.items():
    if keep is None or k in keep:
      out.setdefault(k, v)
  return out, moved


def carry_added_rules(old: dict, new: dict) -> dict:
  """A recorded run identity `old` whose parameter rules are today's (`new`) less `SIGLIP_RULES` takes today's: the
  rules added for SigLIP match no CLIP parameter, so that run trains what it trained (its trainable set says so)."""
  out = dict(old)
  for k in RULE_KEYS:
    if k in old and k in new and list(old[k]) == [r for r in new[k] if r not in SIGLIP_RULES]:
      out[k] = new[k]
  return out


def read_recorded_identity(identity: dict, today: dict, where: str) -> dict:
  """A recorded run identity read as today's (renamed keys and values, added keys, added rules), with one warning
  line naming every older key of `where` and what it is now."""
  migrated, moved = migrate_flat(identity, set(today) | {"model.params", "optim.trainable_set"})
  warn_renamed(moved, where)
  return carry_added_rules(migrated, today)


def warn_renamed(moved: list, where: str) -> None:
  """One warning line naming every older key of `where` and what it is now."""
  if moved:
    logging.warning("%s uses older config keys, read as today's: %s", where, ", ".join(f"{a} → {b}" for a, b in moved))


def _renamed_arg(a: str, moved: list) -> str:
  """`--config.OLD=V` → `--config.NEW=V`; `--allow_config_change=OLD,…` → today's keys; an older schedule name."""
  if a.startswith("--config."):
    key, sep, value = a[len("--config."):].partition("=")
    new = rename(key) or key
    if new != key:
      moved.append((key, new))
    newer = new_value(new, value)
    if newer != value:
      moved.append((f"{new}={value}", f"{new}={newer}"))
      value = newer
    return f"--config.{new}{sep}{value}"
  if a.startswith("--allow_config_change="):
    keys = a.partition("=")[2].split(",")
    new = [rename(k) or k for k in keys]
    moved += [(k, n) for k, n in zip(keys, new) if k != n]
    return "--allow_config_change=" + ",".join(new)
  return a


def migrate_argv(argv: list[str]) -> list[str]:
  """`argv` with older config keys and values read as today's (one warning line naming each)."""
  moved = []
  out = [_renamed_arg(a, moved) for a in argv]
  if moved:
    logging.warning("the command line uses older config keys, read as today's: %s",
                    ", ".join(f"{a} → {b}" for a, b in moved))
  return out


# ------------------------------------------------------------------------------------------- files on disk
def prepared_reject_detail(where: str, detail: str) -> str:
  """A prepared folder's skipped.jsonl detail without the row prefix folders prepared before eca2d45 wrote into it
  (`Rejected` prefixes the row itself)."""
  return detail.removeprefix(f"{where}: ")


COMPCLIP_VERSIONS = (1, 2)  # the compclip weight formats this code reads; 2 is what it writes


def compclip_transposed(version: int, key: str) -> bool:
  """Whether tensor `key` of a compclip directory of format `version` is read transposed: version 1 (written before
  25e1078) stored dense kernels [in, out], today's layout is [out, in] (compclip_jax/models/layers.py); the patch
  conv keeps Flax's HWIO in both."""
  return version == 1 and key.endswith(".kernel") and key != "vision_model.embeddings.patch_embedding.kernel"


def checkpoints_without_run_file(ckpt_dir: str, workdir: str, run_file: str) -> str:
  """What to say of a workdir whose checkpoints no run.json describes: written before run.json existed, and before
  today's kernel layout, so a square kernel would restore transposed, silently — they cannot be continued."""
  return (f"{ckpt_dir} holds checkpoints but {workdir} has no {run_file}: they were written by a compclip_jax older "
          "than commit 25e1078 (dense kernels [in, out], now [out, in]) and cannot be continued. Use a new --workdir; "
          "to keep that run's weights, export them with the version that wrote them and fine-tune from the export")


OLD_KERNEL_LAYOUT_WAY_OUT = (
    "  - its checkpoints hold dense kernels [in, out] (compclip_jax before commit 25e1078; now "
    "[out, in]): export them with that version (its export/hf loads here), then fine-tune "
    "from the export")
