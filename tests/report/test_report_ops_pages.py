"""Op-coverage pages (accelgrid.report.ops_pages): ops.json/.md/.html of a cell and
ops-grid.* across cells, from captured ops (accelgrid.ops is their model)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from helpers.report_cases import (
    CUDA_CAPTURE,
    PLANTED,
    ops_cell,
    synthetic_xpu_ops,
    write_cell,
    xpu_survey_cell,
)

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


def _aggregate(cell: Path) -> dict[str, Any]:
    """The cell's ops data; these cells all recorded ops."""
    data = ops.aggregate(cell)
    assert data is not None
    return data


def _data(tmp_path: Path) -> dict[str, Any]:
    return _aggregate(ops_cell(tmp_path, "xpu-2.5", "2.5.1+xpu",
                               {"aten::roll.default": "fallback",
                                "aten::addmm.default": "native",
                                "aten::linear.default": "decomposed"}))


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
    # A missing entry as ops.json had it before `how` and `ops`: read as not implemented.
    data = {**_data(tmp_path), "generic_fallback_notice": True,
            "missing": [{"op": "aten::nll_loss2d_forward", "workloads": ["conv"]}]}
    md = ops_pages.cell_markdown(data)
    assert "run the `fallback-debug` or `fallback-survey` profile to name every op" in md
    assert "## Missing" in md
    assert "| `aten::nll_loss2d_forward` | not implemented | (no captured call) | conv |" in md
    page = _Tables(ops_pages.cell_html(data))
    assert page.rows[-2] == [("", "op"), ("", "how"), ("", "captured ops"), ("", "workloads")]
    assert page.rows[-1] == [("op", "aten::nll_loss2d_forward"), ("", "not implemented"),
                             ("", "(no captured call)"), ("", "conv")]


def test_cell_html_shows_what_the_messages_named(tmp_path: Path) -> None:
    data = _aggregate(xpu_survey_cell(tmp_path))
    md = ops_pages.cell_markdown(data)
    page = _Tables(ops_pages.cell_html(data))
    assert page.rows[0] == [("", "op"), ("", "status"), ("", "messages named"),
                            ("", "instance-segmentation"), ("", "semantic-segmentation")]
    rows = {r[0][1]: r[1:] for r in reversed(page.rows[1:])}  # the first table's win
    assert rows["aten::_foreach_mul_.Tensor"][0] == ("missing", "missing (fell back)")
    assert rows["aten::linspace.default"][:2] == [("fallback", "fallback"),
                                                  ("", "aten::linspace.out")]
    assert [("", "op"), ("", "kernel"), ("", "kind"), ("", "captured ops"),
            ("", "workloads")][1:] in page.rows
    assert [("op", "aten::linspace.out"), ("", "registered fallback"),
            ("", "aten::linspace.default"),
            ("", "instance-segmentation, semantic-segmentation")] in page.rows
    assert [("op", "aten::_foreach_mul_.Tensor"), ("", "fell back"),
            ("", "aten::_foreach_mul_.Tensor"), ("", "instance-segmentation")] in page.rows
    # The main table's rows, in the same order in both pages.
    md_ops = re.findall(r"^\| `([^`]+)` \| [a-z]", md, re.M)[: len(data["ops"])]
    assert md_ops == [r[0][1] for r in page.rows[1: 1 + len(data["ops"])]] == list(data["ops"])


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


def test_markdown_pages_escape_as_the_html_pages_do(tmp_path: Path) -> None:
    """Issue 27: GitHub renders raw HTML in Markdown; the ops .md pages escape it as
    grid.md does (a workload is named from test ids, an op from a capture)."""
    data = _data(tmp_path)
    data["cell"] = "<script>alert(1)</script>"
    data["ops"]["aten::<b>`|"] = {"status": "unknown", "count": 1, "phases": {},
                                  "workloads": {"<img src=x onerror=alert(1)>|w": 1}}
    data["workloads"] = [*data.get("workloads", []), "<img src=x onerror=alert(1)>|w"]
    md = ops_pages.cell_markdown(data)
    assert "<script>" not in md and "<img" not in md, md
    assert "&lt;script&gt;" in md
    lines = md.splitlines()
    row = next(i for i, ln in enumerate(lines) if "aten::<b>" in ln)
    header = max(i for i in range(row) if lines[i].startswith("|---") or
                 lines[i].startswith("| --- ") or lines[i].startswith("| ---")) - 1

    def columns(line: str) -> int:  # a pipe in a value never adds a column
        return line.replace("\\|", "").count("|")

    assert columns(lines[row]) == columns(lines[header]), (lines[header], lines[row])


def test_write_cell(tmp_path: Path) -> None:
    cell = ops_cell(tmp_path, "xpu-2.5", "2.5.1+xpu", {"aten::roll.default": "fallback"})
    data = ops_pages.write_cell(cell)
    assert data is not None
    assert json.loads((cell / "ops.json").read_text()) == data
    assert (cell / "ops.md").read_text() == ops_pages.cell_markdown(data)
    assert (cell / "ops.html").read_text() == ops_pages.cell_html(data)
    plain = write_cell(tmp_path, "cpu-2.13", {"t.py::a": "passed"})
    assert ops_pages.write_cell(plain) is None
    assert not any((plain / f).exists() for f in ops_pages.CELL_FILES)
    assert "hf_ops.md" not in (cell / "ops.md").read_text()
    # A cell whose HF tests wrote their ops table: both pages point at it.
    (cell / "hf_ops.md").write_text("# table\n")
    ops_pages.write_cell(cell)
    for page in ("ops.md", "ops.html"):
        assert "suites/hf_tests) found not implemented or falling back, with the tests " \
            "that hit each: hf_ops.md" in (cell / page).read_text()


def test_cross_pages(tmp_path: Path) -> None:
    # Cells of another device than xpu: no prediction beside them.
    old = _aggregate(ops_cell(tmp_path, "mps-2.5", "2.5.1",
                              {"aten::roll.default": "fallback"}, device_type="mps"))
    new = _aggregate(ops_cell(tmp_path, "mps-2.13", "2.13.0",
                              {"aten::roll.default": "native",
                               "aten::addmm.default": "native"}, device_type="mps"))
    view = ops.cross_cell([new, old])
    assert view["predicted"] == {} and view["disagreements"] == []
    md = ops_pages.cross_markdown(view)
    assert "| op | mps-2.5 | mps-2.13 | stopped falling back in |" in md
    assert "| `aten::addmm.default` |  | native |  |" in md
    assert "| `aten::roll.default` | fallback | native | mps: torch 2.13.0 |" in md
    assert "predicted" not in md
    page = _Tables(ops_pages.cross_html(view))
    assert page.title == "Op coverage across cells"
    assert [t for _, t in page.rows[0]] == ["op", "mps-2.5", "mps-2.13",
                                            "stopped falling back in"]
    assert page.rows[1] == [("op", "aten::addmm.default"), ("", ""), ("native", "native"),
                            ("", "")]
    assert page.rows[2] == [("op", "aten::roll.default"), ("fallback", "fallback"),
                            ("native", "native"), ("", "mps: 2.13.0")]
    paths = ops_pages.write_cross(view, tmp_path / "out")
    assert {p.name for p in paths.values()} == set(ops_pages.CROSS_FILES)
    assert json.loads(paths["json"].read_text()) == view
    assert paths["md"].read_text() == md


# --- observed beside predicted -----------------------------------------------------------

def test_cross_cell_flags_every_disagreement_with_the_prediction() -> None:
    capture = json.loads(CUDA_CAPTURE.read_text())
    xpu = synthetic_xpu_ops()  # SYNTHETIC: see report_cases.synthetic_xpu_ops
    view = ops.cross_cell([xpu, capture])
    assert view["cells"] == ["cuda-2.11-op-capture", "xpu-2.5-fallback-survey"]
    assert list(view["predicted"]) == ["xpu-2.5-fallback-survey"]  # xpu cells only
    check = view["predicted"]["xpu-2.5-fallback-survey"]
    assert check["series"] == "2.5" and check["branch"] == "release/2.5"
    planted = [{"cell": "xpu-2.5-fallback-survey", "op": op, "observed": o, "predicted": p}
               for op, o, p in sorted(PLANTED)]
    assert view["disagreements"] == planted
    unknown = sum(1 for e in xpu["ops"].values() if e["status"] == "unknown")
    assert check["counts"] == {"agree": len(xpu["ops"]) - len(PLANTED) - unknown,
                               "disagree": len(PLANTED), "not_compared": unknown}
    md = ops_pages.cross_markdown(view)
    assert ("| op | cuda-2.11-op-capture | xpu-2.5-fallback-survey | "
            "xpu-2.5-fallback-survey predicted (release/2.5) | stopped falling back in |") in md
    assert "| `aten::linspace.default` | decomposed | native | fallback ≠ |  |" in md
    assert "| `aten::topk.default` | native | fallback | native ≠ |  |" in md
    assert "| `aten::addmm.default` | native | native | native |  |" in md
    assert ("- xpu-2.5-fallback-survey observed vs predicted from torch-xpu-ops release/2.5: "
            f"{check['counts']['agree']} agree, 3 disagree, {unknown} not compared") in md
    assert "| `aten::linspace.default` | xpu-2.5-fallback-survey | native | fallback |" in md
    page = _Tables(ops_pages.cross_html(view))
    row = next(r for r in page.rows if r[0] == ("op", "aten::linspace.default"))
    assert row[1:4] == [("decomposed", "decomposed"), ("native", "native"),
                        ("fallback disagree", "fallback ≠")]
    flagged = [r[0][1] for r in page.rows if any("disagree" in c for c, _ in r[1:4])]
    assert sorted(set(flagged)) == sorted(op for op, _, _ in PLANTED)


def test_cross_cell_says_when_a_series_has_no_data() -> None:
    xpu = synthetic_xpu_ops(torch="3.0.0+xpu", cell="xpu-3.0")
    view = ops.cross_cell([xpu])
    check = view["predicted"]["xpu-3.0"]
    why = ("no torch-xpu-ops data for torch 3.0.0+xpu (the last is release/2.14, "
           "2026-08-20): predicted unknown")
    assert check["error"] == why
    assert view["disagreements"] == []
    assert f"- xpu-3.0: {why}; nothing predicted." in ops_pages.cross_markdown(view)
    assert "xpu-3.0 predicted (no data)" in ops_pages.cross_markdown(view)


def test_cross_cell_shows_fallback_kernels_and_missing_kinds(tmp_path: Path) -> None:
    data = _aggregate(xpu_survey_cell(tmp_path))
    view = ops.cross_cell([data])
    assert view["fallback_seen"]["aten::linspace.default"] == {
        "xpu-2.5-fallback-survey": ["aten::linspace.out"]}
    assert view["missing_how"] == {
        "aten::_foreach_mul_.Tensor": {"xpu-2.5-fallback-survey": "fell-back"},
        "aten::nll_loss2d_forward.default": {"xpu-2.5-fallback-survey": "not-implemented"}}
    md = ops_pages.cross_markdown(view)
    assert "| `aten::linspace.default` | fallback (linspace.out) | fallback |  |" in md
    # 2.5 has no _foreach_mul.Tensor kernel, but its CompositeExplicitAutograd slow path
    # runs: the planted observation disagrees.
    assert "| `aten::_foreach_mul_.Tensor` | missing (fell back) | decomposed ≠ |  |" in md
    assert "| `aten::nll_loss2d_forward.default` | missing (not implemented) | native ≠ |" in md


# --- predicted per release ---------------------------------------------------------------

def test_predicted_pages_of_the_h200_capture(tmp_path: Path) -> None:
    from accelgrid.ops import xpu_prediction as xp

    capture = ops.load_captured(CUDA_CAPTURE)
    doc = xp.predicted_view(capture, ["2.5", "2.6", "2.13"])
    md = ops_pages.predicted_markdown(doc)
    assert md.startswith("# XPU op coverage predicted: cuda-2.11-op-capture "
                         "(cuda, torch 2.11.0+cu130)\n")
    # The counts row of each series: the prediction's own counts (each op once), rendered.
    for s in ("2.5", "2.6", "2.13"):
        c = doc["counts"][s]
        assert sum(c.values()) == len(capture["ops"])
        row = " | ".join(str(c[k]) for k in xp.STATUSES)
        assert f"| {s} | release/{s} @ {doc['releases'][s]['commit'][:12]} | {row} |" in md
    # linspace: on release/2.5's fallback list, a composite of PyTorch's own from 2.6.
    assert "| `aten::linspace.default` | fallback | decomposed | decomposed | 2.6 |" in md
    # CUDA's own attention kernel: routed, never missing, whatever the series; beside it
    # what XPU calls instead in that series (the math path, flash attention from 2.10).
    math = "routed: cuda → aten::_scaled_dot_product_attention_math: decomposed"
    assert ("| `aten::_scaled_dot_product_efficient_attention_backward.default` | "
            f"{math} | {math} | routed: cuda → "
            "aten::_scaled_dot_product_flash_attention_backward: native |  |") in md
    assert "## torch 2.5 for XPU (release/2.5 @ 7e3d00acea9f)" in md
    c = doc["counts"]["2.13"]
    assert (f"## torch 2.13 for XPU (release/2.13 @ 21172da81103)\n\n{c['native']} native, "
            f"{c['decomposed']} decomposed, {c['fallback']} fallback, "
            f"{c['fallback -> error']} fallback -> error, {c['missing']} missing, "
            f"{c['routed: cpu']} routed: cpu, {c['routed: cuda']} routed: cuda, "
            f"{c['unknown']} unknown: the ops that would fall back, be missing or cannot be "
            "predicted") in md
    # Per series, the seed-like table: the ops that would not run, calls per workload.
    per_25 = md.split("## torch 2.5 for XPU")[1].split("## torch 2.6")[0]
    assert "| `aten::linspace.default` | fallback | decomposed |" in per_25
    assert "`aten::addmm.default`" not in per_25
    assert "seed" not in md.lower()  # 2.4 not asked for
    page = _Tables(ops_pages.predicted_html(doc))
    assert page.title.startswith("XPU op coverage predicted: cuda-2.11-op-capture")
    assert [("op", "aten::linspace.default"), ("fallback", "fallback"),
            ("decomposed", "decomposed"), ("decomposed", "decomposed"), ("", "2.6")] in page.rows
    paths = ops_pages.write_predicted(doc, tmp_path)
    assert {p.name for p in paths.values()} == set(ops_pages.PREDICTED_FILES)
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(doc))
    seeded = xp.predicted_view(capture, ["2.4"])
    with_seed = ops_pages.predicted_markdown(seeded)
    assert "## The seed's table, predicted for 2.4" in with_seed
    judged = [r for r in seeded["seed"]["rows"] if r["agree"] is not None]
    agree = sum(1 for r in judged if r["agree"])
    assert (f"Agreement with the seed's table: {agree} of {len(judged)} rows "
            f"({round(100 * agree / len(judged))} %)") in with_seed
    assert "| `aten::linspace.out` | explicit (fallback) | aten::linspace.default | fallback " \
           "| yes | agree |" in with_seed


# The cpu-2.13-op-capture cell's capture of the attention and low-bit suites (docs/cpu).
NEW_SUITES_CAPTURE = (Path(__file__).resolve().parents[2] / "docs" / "cpu"
                      / "ops-cpu-2.13-op-capture-attention-lowbit.json")


def test_the_op_capture_cells_capture_the_new_suites() -> None:
    # The capture above is one of these cells' runs; compile has a profile of its own
    # (matrix.yaml: its cold compiles), captured only on request.
    from accelgrid.config.matrix import load_matrix

    matrix = load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml")
    for name in ("cpu-2.13-op-capture", "cuda-2.11-op-capture"):
        assert {"attention", "lowbit"} <= set(matrix.cell(name).suites), name


def test_predicted_pages_name_the_new_suites_ops_per_series(tmp_path: Path) -> None:
    """``accelgrid ops predict`` on the capture of the attention and low-bit suites: the
    FP8 and grouped GEMMs, the int4-packed matmul and SDPA's fused ops, each with its
    status per XPU series, and for the CPU's own ops the op XPU calls instead."""
    from accelgrid import cli

    out = tmp_path / "pred"
    assert cli.main(["ops", "predict", str(NEW_SUITES_CAPTURE), "--series", "2.4", "--series",
                     "2.8", "--series", "2.13", "--out", str(out)]) == 0
    md = (out / "ops-predicted.md").read_text()
    grid = md.split("## Op x series")[1].split("\n## ")[0]

    def row(op: str, *cells: str) -> str:
        return f"| `aten::{op}.default` | " + " | ".join(cells) + " |"

    def routed(xpu_op: str, status: str) -> str:
        return f"routed: cpu → aten::{xpu_op}: {status}"

    # _scaled_mm: on torch-xpu-ops' fallback list, no CPU kernel in 2.4's yaml; an XPU key
    # of PyTorch's own by 2.13.
    assert row("_scaled_mm", "fallback -&gt; error", "fallback", "native", "2.13") in grid
    # _grouped_mm: not in 2.4's yaml, no XPU kernel in 2.8 (#1574), composite from 2.9.
    assert row("_grouped_mm", "unknown", "missing", "decomposed", "2.13") in grid
    # The CPU's int4 ops stand for _weight_int4pack_mm / _convert_weight_to_int4pack.
    assert row("_weight_int4pack_mm_for_cpu", routed("_weight_int4pack_mm", "missing"),
               routed("_weight_int4pack_mm", "native"),
               routed("_weight_int4pack_mm", "native"), "") in grid
    # SDPA: the math path on 2.4, the overrideable fused op on 2.8, flash on 2.13.
    assert row("_scaled_dot_product_flash_attention_for_cpu",
               routed("_scaled_dot_product_attention_math", "decomposed"),
               routed("_scaled_dot_product_fused_attention_overrideable", "native"),
               routed("_scaled_dot_product_flash_attention", "native"), "") in grid
    # Per series, with their calls per workload (attention, lowbit).
    per_24 = md.split("## torch 2.4 for XPU")[1].split("\n## ")[0]
    assert row("_weight_int4pack_mm_for_cpu", routed("_weight_int4pack_mm", "missing"),
               "native", "", "4") in per_24
    assert row("_scaled_dot_product_flash_attention_for_cpu",
               routed("_scaled_dot_product_attention_math", "decomposed"), "native", "27",
               "") in per_24
    page = _Tables((out / "ops-predicted.html").read_text())
    assert [("op", "aten::_scaled_mm.default"), ("fallback -> error", "fallback -> error"),
            ("fallback", "fallback"), ("native", "native"), ("", "2.13")] in page.rows
    doc = json.loads((out / "ops-predicted.json").read_text())
    assert doc["ops"]["aten::_weight_int4pack_mm_for_cpu.default"]["xpu_calls"] == {
        "2.4": "aten::_weight_int4pack_mm: missing", "2.8": "aten::_weight_int4pack_mm: native",
        "2.13": "aten::_weight_int4pack_mm: native"}
