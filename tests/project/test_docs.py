"""The documentation holds together: every relative link of the README and docs/ resolves,
every page is on docs/index.md, and every docs path the code names exists.

Pages moved once (issue #47: docs/ shelved by reader); these checks make the next move
fix its references or fail. Each check is a function of a project root, so the planted
faults below run the same code on a tmp tree.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The lab notebook and the data behind pages (records, captures, generated tables): not
# pages of their own, so docs/index.md need not list each file.
DATA_FOLDERS = ("measured", "cpu", "cuda", "hf_tests")
# Markdown outside docs/ whose links are checked too, beside README.md.
OTHER_MARKDOWN = ("ci", "baselines", "containers", "suites")
# Where code and configuration name docs paths (error messages, docstrings, comments).
CODE_FOLDERS = ("src", "tests", "tools", "suites", ".ci")
CODE_FILES = ("README.md", "matrix.yaml", "known_issues.yaml", "noxfile.py", ".importlinter",
              "pyproject.toml", "conftest.py")
# Another repository's docs path, named as the source of a fact: not ours to resolve.
FOREIGN = frozenset({"docs/source/accelerator/ci.md"})  # pytorch/pytorch, the CI relay

LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED = re.compile(r"(?<![\w./-])docs/[\w./*-]*[\w*/]")


def markdown_files(root: Path) -> list[Path]:
    """README.md, every page under docs/ and the Markdown of the other top folders."""
    found = [root / "README.md"] if (root / "README.md").is_file() else []
    found += sorted((root / "docs").rglob("*.md"))
    for folder in OTHER_MARKDOWN:
        found += sorted((root / folder).rglob("*.md"))
    return found


def relative_links(page: Path) -> list[str]:
    """The page's link targets that point into the checkout (no scheme, not an anchor)."""
    targets = LINK.findall(page.read_text(encoding="utf-8"))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def broken_links(root: Path) -> list[str]:
    """``page: target`` for each relative link that resolves to nothing (anchors ignored;
    a folder counts: GitHub shows its listing, and the lab notebook links its records so)."""
    broken = []
    for page in markdown_files(root):
        for target in relative_links(page):
            if not (page.parent / target.split("#", 1)[0]).resolve().exists():
                broken.append(f"{page.relative_to(root)}: {target}")
    return broken


def unlisted_pages(root: Path) -> list[str]:
    """Pages under docs/ (the data folders aside) that docs/index.md does not link."""
    docs = root / "docs"
    index = docs / "index.md"
    listed = {(docs / t.split("#", 1)[0]).resolve() for t in relative_links(index)}
    pages = [p for p in sorted(docs.rglob("*.md"))
             if p != index and p.relative_to(docs).parts[0] not in DATA_FOLDERS]
    return [str(p.relative_to(root)) for p in pages if p.resolve() not in listed]


def code_files(root: Path) -> list[Path]:
    """The text files where code and configuration may name a docs path."""
    files = [root / name for name in CODE_FILES if (root / name).is_file()]
    for folder in CODE_FOLDERS:
        files += sorted(p for p in (root / folder).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts)
    return files


def missing_named_paths(root: Path) -> list[str]:
    """``file: docs/...`` for each docs path named in code that exists nowhere."""
    missing = []
    for file in code_files(root):
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file names nothing
            continue
        for named in sorted(set(NAMED.findall(text)) - FOREIGN):
            exists = (any(root.glob(named)) if "*" in named else (root / named).exists())
            if not exists:
                missing.append(f"{file.relative_to(root)}: {named}")
    return missing


def doc_problems(root: Path) -> list[str]:
    """Every broken link, unlisted page and missing named path under ``root``."""
    return ([f"broken link {b}" for b in broken_links(root)]
            + [f"not on docs/index.md: {p}" for p in unlisted_pages(root)]
            + [f"names a missing path {m}" for m in missing_named_paths(root)])


def test_the_checkouts_docs_hold_together() -> None:
    assert doc_problems(ROOT) == []


def test_each_shelf_has_its_pages() -> None:
    """The shelves exist and hold pages (a check that looked at no page would pass)."""
    for shelf in ("guides", "reference", "design", "suites", "devices"):
        assert list((ROOT / "docs" / shelf).glob("*.md")), shelf


# The tmp tree's guides, spelled in two parts: this file is code the check reads, and the
# tmp tree's pages do not exist in the checkout.
GUIDES = "docs/" + "guides/"


def _tree(root: Path) -> Path:
    """A small project whose docs hold together: README, index, two shelved pages, code."""
    docs = root / "docs"
    for shelf in ("guides", "reference", "measured"):
        (docs / shelf).mkdir(parents=True)
    (root / "README.md").write_text("See [the index](docs/index.md#guides).\n")
    (docs / "index.md").write_text("- [a](guides/a.md)\n- [b](reference/b.md)\n")
    (docs / "guides" / "a.md").write_text("Fields: [b](../reference/b.md#fields), "
                                          "[site](https://example.org/x.md).\n")
    (docs / "reference" / "b.md").write_text("# b\n")
    (docs / "measured" / "notes.md").write_text("unlisted: the lab notebook\n")
    (root / "src").mkdir()
    (root / "src" / "mod.py").write_text(f'HELP = "see {GUIDES}a.md"\n')
    return root


def test_a_tree_that_holds_together_has_no_problem(tmp_path: Path) -> None:
    assert doc_problems(_tree(tmp_path)) == []


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    # The planted fault: a page moved to another shelf, its link not updated.
    (root / "docs" / "reference" / "b.md").rename(root / "docs" / "guides" / "b.md")
    (root / "docs" / "index.md").write_text("- [a](guides/a.md)\n- [b](guides/b.md)\n")
    assert doc_problems(root) == [f"broken link {GUIDES}a.md: ../reference/b.md#fields"]


def test_an_unlisted_page_is_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "docs" / "guides" / "c.md").write_text("# c, on no index\n")
    assert doc_problems(root) == [f"not on docs/index.md: {GUIDES}c.md"]


def test_a_missing_named_path_is_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "docs" / "guides" / "a.md").rename(root / "docs" / "guides" / "a2.md")
    (root / "docs" / "index.md").write_text("- [a](guides/a2.md)\n- [b](reference/b.md)\n")
    assert doc_problems(root) == [f"names a missing path src/mod.py: {GUIDES}a.md"]
