"""Reports from results folders: the grid (tests x cells) against baselines, as JSON,
Markdown and HTML, and the op-coverage pages.

    grid.py             the grid built, written and judged (:func:`grid`, :class:`GridReport`)
    model.py            the grid model from results folders (:func:`model.from_folders`)
    compare.py          baselines: files, :func:`compare.classify`, :func:`compare.mark`
    render_json.py      grid.json (docs/reference/grid-schema.md)
    render_markdown.py  grid.md (fits a GitHub job summary)
    render_html.py      grid.html (one self-contained page)
    ops_pages.py        ops.json/.md/.html per cell, ops-grid.* across cells
    history.py          the grid with its history: strips, since the previous run, flaky
    expect.py           expected cells with no results (lost)
    hf_tests.py         HF's own tests across cells, beside the reference cell
    site.py, hud.py     the published site (``accelgrid publish``), its runs x cells page
"""

from .grid import GITHUB_SUMMARY_LIMIT, GridReport, build_model, grid, write

__all__ = ["GITHUB_SUMMARY_LIMIT", "GridReport", "build_model", "grid", "write"]
