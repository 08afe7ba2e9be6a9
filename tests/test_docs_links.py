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
  """The README stays short (≤ ~150 lines); the rest lives in docs/."""
  n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
  assert n <= 160, f"README.md has {n} lines: move sections into docs/"


# ------------------------------------------------------------------ "METHODS §x.y" citations → docs/methods.md
METHODS_PAGE = ROOT / "docs" / "methods.md"
# the spec's numbering: every section, cited or not, keeps its number
METHODS_NUMBERS = {"1", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "2", "2.1", "2.2", "2.3", "2.4", "2.5", "3", "4"}
CITING = ("README.md", "docs", "compclip_jax", "configs", "tests", "launch", "tools")
SECTION_REF = re.compile(r"§\s?(\d+(?:\.\d+)*)")
SPEC_NAME = re.compile(r"\b(METHODS|DESIGN)\b")


def methods_headings() -> set[str]:
  """The section numbers of docs/methods.md's headings: `## 1. CLIC …`, `### 1.2 Building …`."""
  text = CODE.sub("", METHODS_PAGE.read_text(encoding="utf-8"))
  return {m.group(1) for m in re.finditer(r"^#{2,3}\s+(\d+(?:\.\d+)*)\.?\s", text, re.M)}


def methods_citations() -> list[tuple[str, int, str]]:
  """(file, line, section) of every § citation in code and docs. A bare `§1.4`, or a chain such as
  `METHODS §1.1, §1.2`, is a METHODS citation; one whose nearest spec name before it is DESIGN is not."""
  files = [ROOT / "README.md"]
  for top in CITING[1:]:
    files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".sh", ".ipynb") and p.is_file()]
  out = []
  for f in files:
    text = f.read_text(encoding="utf-8", errors="replace")
    for m in SECTION_REF.finditer(text):
      names = SPEC_NAME.findall(text[max(0, m.start() - 80):m.start()])
      if names and names[-1] == "DESIGN":
        continue
      out.append((f.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1, m.group(1)))
  return out


def test_methods_page_keeps_the_spec_numbering():
  assert methods_headings() == METHODS_NUMBERS, f"docs/methods.md headings {sorted(methods_headings())}"


def test_methods_citations_resolve():
  """Every "METHODS §x.y" in the code and docs names a numbered heading of docs/methods.md."""
  cites, headings = methods_citations(), methods_headings()
  assert len(cites) > 100, cites  # the scan found the code's citations
  broken = [f"{f}:{n}: §{s}" for f, n, s in cites if s not in headings]
  assert not broken, f"citations without a heading in docs/methods.md: {broken}"
