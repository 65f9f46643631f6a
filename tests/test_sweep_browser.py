"""The sweep's page in a real headless Chromium: it loads with no console error, every
heatmap is drawn (a cell per config, violated ones linked), every link of the cell tables
opens a timeline with its blocks drawn, and a screenshot is not blank.

Run with `python -m pytest -m browser`; it needs Debian's `chromium` and `chromium-driver`
(and the sweep extra) and otherwise skips and says so. `BATCHPROOF_SWEEP=DIR` also checks
a page a sweep wrote (DIR holds its index.html)."""

import os
from pathlib import Path

import pytest
from browser_driver import ink
from test_sweep import read_rows, run_sweep

pytestmark = pytest.mark.browser

HEATMAPS = """return Array.from(document.querySelectorAll('figure.heatmap svg')).map(s => {
  const box = s.getBoundingClientRect();
  return [box.width, box.height, s.querySelectorAll('a').length,
          Array.from(s.querySelectorAll('a')).map(a => a.getAttribute('xlink:href')
                                                  || a.getAttribute('href'))];
});"""
LINKS = """return Array.from(document.querySelectorAll('table.cells a.timeline'))
  .map(a => a.href);"""
TIMELINE = """const s = document.querySelector('svg.timeline');
return s ? [s.getBoundingClientRect().width, s.querySelectorAll('rect.block').length] : null;"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    pytest.importorskip("pyarrow")
    pytest.importorskip("matplotlib")
    _, out = run_sweep(tmp_path_factory.mktemp("sweep"))
    found = [out]
    if os.environ.get("BATCHPROOF_SWEEP"):
        found.append(Path(os.environ["BATCHPROOF_SWEEP"]).resolve())
    return found


def test_the_page_loads_and_draws_every_heatmap_with_linked_cells(browser, pages):
    for out in pages:
        page = out / "index.html"
        browser.open(page.as_uri())
        errors = [e for e in browser.console() if e["level"] == "SEVERE"]
        assert errors == [], f"{page}: console errors {errors}"
        drawn = browser.run(HEATMAPS)
        assert len(drawn) == len(list((out / "heatmaps").glob("*.svg"))) > 0
        assert all(w > 200 and h > 100 for w, h, _, _ in drawn), drawn
        rows = read_rows(out)
        timelines = {r["timeline"] for r in rows if r["timeline"]}
        linked = {href for _, _, _, hrefs in drawn for href in hrefs}
        assert linked == timelines
        if out == pages[0]:  # the test grid: 2 violated cells, and the worst rows' witnesses
            witnessed = sum(1 for r in rows if r["check"] == "worst starvation_steps"
                            and r["timeline"])
            assert sorted(n for _, _, n, _ in drawn) == sorted([2, witnessed])


def test_every_cell_link_opens_a_drawn_timeline(browser, pages):
    for out in pages:
        browser.open((out / "index.html").as_uri())
        links = browser.run(LINKS)
        assert len(links) == len({r["timeline"] for r in read_rows(out) if r["timeline"]})
        for url in links:
            browser.open(url)
            width, blocks = browser.run(TIMELINE)
            assert width > 100 and blocks > 0, url


def test_a_screenshot_of_the_page_is_not_blank(browser, pages):
    browser.open((pages[0] / "index.html").as_uri())
    png = browser.screenshot()
    colours, inked = ink(png)
    assert colours >= 8
    assert inked > 0.02
