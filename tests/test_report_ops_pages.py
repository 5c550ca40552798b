"""Op-coverage pages (accelgrid.report.ops_pages): ops.json/.md/.html of a cell and
ops-grid.* across cells, from captured ops (accelgrid.ops is their model)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from report_cases import ops_cell, write_cell

from accelgrid import ops
from accelgrid.report import ops_pages


class _Tables(HTMLParser):
    """The page's title and its table as rows of (class, text) cells."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str]]] = []
        self.title = ""
        self._cell: list | None = None
        self._in_title = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = [dict(attrs).get("class") or "", ""]
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(tuple(self._cell))
            self._cell = None
        self._in_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data
        elif self._in_title:
            self.title += data


def _data(tmp_path: Path) -> dict:
    cell = ops_cell(tmp_path, "xpu-2.5", "2.5.1+xpu",
                    {"aten::roll.default": "fallback", "aten::addmm.default": "native",
                     "aten::linear.default": "decomposed"})
    data = ops.aggregate(cell)
    assert data is not None
    return data


def test_cell_pages_have_the_same_table(tmp_path: Path) -> None:
    data = _data(tmp_path)
    md = ops_pages.cell_markdown(data)
    assert md.startswith("# Op coverage: xpu-2.5 (xpu, torch 2.5.1+xpu)\n\n"
                         "1 fallback, 1 decomposed, 1 native\n")
    assert "| op | status | conv | mlp |" in md
    assert "| `aten::roll.default` | fallback | 2 | 2 |" in md
    page = _Tables(ops_pages.cell_html(data))
    assert page.title == "Op coverage: xpu-2.5"
    assert page.rows[0] == [("", "op"), ("", "status"), ("", "conv"), ("", "mlp")]
    assert page.rows[1] == [("op", "aten::roll.default"), ("fallback", "fallback"),
                            ("", "2"), ("", "2")]
    # Every Markdown row is an HTML row, in the same order.
    md_ops = re.findall(r"^\| `([^`]+)` \|", md, re.M)
    assert md_ops == [r[0][1] for r in page.rows[1:]] == list(data["ops"])


def test_cell_pages_name_missing_ops_and_the_generic_notice(tmp_path: Path) -> None:
    data = {**_data(tmp_path), "generic_fallback_notice": True,
            "missing": [{"op": "aten::nll_loss2d_forward", "workloads": ["conv"]}]}
    md = ops_pages.cell_markdown(data)
    assert "run the `fallback-debug` profile to name every op" in md
    assert "Missing: `aten::nll_loss2d_forward` (hit by conv)" in md


def test_pages_escape_what_they_show(tmp_path: Path) -> None:
    data = _data(tmp_path)
    data["cell"] = "<script>alert(1)</script>"
    data["ops"]["aten::<b>"] = {"status": "unknown", "count": 1, "phases": {},
                                "workloads": {"mlp": 1}}
    page = ops_pages.cell_html(data)
    assert "<script>alert" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page and "aten::&lt;b&gt;" in page
    parsed = _Tables(page)
    assert parsed.title == "Op coverage: <script>alert(1)</script>"
    assert ("op", "aten::<b>") in [r[0] for r in parsed.rows[1:]]


def test_write_cell(tmp_path: Path) -> None:
    cell = ops_cell(tmp_path, "xpu-2.5", "2.5.1+xpu", {"aten::roll.default": "fallback"})
    data = ops_pages.write_cell(cell)
    assert json.loads((cell / "ops.json").read_text()) == data
    assert (cell / "ops.md").read_text() == ops_pages.cell_markdown(data)
    assert (cell / "ops.html").read_text() == ops_pages.cell_html(data)
    plain = write_cell(tmp_path, "cpu-2.13", {"t.py::a": "passed"})
    assert ops_pages.write_cell(plain) is None
    assert not any((plain / f).exists() for f in ops_pages.CELL_FILES)


def test_cross_pages(tmp_path: Path) -> None:
    old = ops.aggregate(ops_cell(tmp_path, "xpu-2.5", "2.5.1+xpu",
                                 {"aten::roll.default": "fallback"}))
    new = ops.aggregate(ops_cell(tmp_path, "xpu-2.13", "2.13.0+xpu",
                                 {"aten::roll.default": "native",
                                  "aten::addmm.default": "native"}))
    view = ops.cross_cell([new, old])
    md = ops_pages.cross_markdown(view)
    assert "| op | xpu-2.5 | xpu-2.13 | stopped falling back in |" in md
    assert "| `aten::addmm.default` |  | native |  |" in md
    assert "| `aten::roll.default` | fallback | native | xpu: torch 2.13.0+xpu |" in md
    page = _Tables(ops_pages.cross_html(view))
    assert page.title == "Op coverage across cells"
    assert [t for _, t in page.rows[0]] == ["op", "xpu-2.5", "xpu-2.13",
                                            "stopped falling back in"]
    assert page.rows[1] == [("op", "aten::addmm.default"), ("", ""), ("native", "native"),
                            ("", "")]
    assert page.rows[2] == [("op", "aten::roll.default"), ("fallback", "fallback"),
                            ("native", "native"), ("", "xpu: 2.13.0+xpu")]
    paths = ops_pages.write_cross(view, tmp_path / "out")
    assert {p.name for p in paths.values()} == set(ops_pages.CROSS_FILES)
    assert json.loads(paths["json"].read_text()) == view
    assert paths["md"].read_text() == md
