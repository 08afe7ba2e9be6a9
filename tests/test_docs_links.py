"""The README and docs/ pages link only to things inside the repository that exist (files and heading anchors)."""
import pathlib
import re

import pytest

from tests import paths

ROOT = pathlib.Path(paths.ROOT)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](image)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # links inside code are not links


def anchors(page: pathlib.Path) -> set[str]:
  """GitHub's heading anchors of a Markdown page: lower case, punctuation dropped, spaces → '-'."""
  out = set()
  for line in CODE.sub("", page.read_text(encoding="utf-8")).splitlines():
    if m := re.match(r"#{1,6}\s+(.*)", line):
      out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
  return out


def links(page: pathlib.Path) -> list[str]:
  text = CODE.sub("", page.read_text(encoding="utf-8"))
  return [a or b for a, b in LINK.findall(text)]


def test_pages_exist():
  assert (ROOT / "README.md").exists() and len(PAGES) > 3, PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
  broken = []
  for target in links(page):
    if re.match(r"[a-z]+:", target):  # http(s), mailto: outside links are not checked (no network)
      continue
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.is_relative_to(ROOT):
      broken.append(f"{target} (outside the repository)")
    elif not dest.exists():
      broken.append(f"{target} (no such file)")
    elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
      broken.append(f"{target} (no heading #{anchor} in {dest.name})")
  assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_readme_is_a_front_page():
  """Issue 14: the README stays short (≤ ~150 lines); the rest lives in docs/."""
  n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
  assert n <= 160, f"README.md has {n} lines: move sections into docs/"
