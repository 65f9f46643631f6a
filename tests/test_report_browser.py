"""The HTML report in a real headless Chromium: it loads with no console error, every
timeline is drawn with all its blocks, and a screenshot is not blank.

Run with `python -m pytest -m browser`. It needs Debian's `chromium` and
`chromium-driver`; without them it skips and says so. `BATCHPROOF_REPORT=FILE` also
checks a report written by `batchproof check --html FILE` (the default suite's, in CI);
`BATCHPROOF_SCREENSHOT=FILE.png` keeps the screenshot."""

import os
import re
from pathlib import Path

import pytest
from browser_driver import ink
from test_report import STORED, expected_blocks, stored_results

from checker.show import report

pytestmark = pytest.mark.browser

DRAWN = """return Array.from(document.querySelectorAll('svg.timeline')).map(s => {
  const box = s.getBoundingClientRect();
  return [box.width, box.height, s.querySelectorAll('rect.block').length,
          Array.from(s.querySelectorAll('rect.block')).every(
            b => b.getBoundingClientRect().height > 0)];
});"""


def _pages(tmp_path):
    page = tmp_path / "stored.html"
    page.write_text(report.render_html(*stored_results()))
    pages = [(page, expected_blocks())]
    if os.environ.get("BATCHPROOF_REPORT"):
        pages.append((Path(os.environ["BATCHPROOF_REPORT"]).resolve(), None))
    return pages


def test_the_report_loads_without_console_errors_and_draws_every_timeline(browser, tmp_path):
    for page, blocks in _pages(tmp_path):
        browser.open(page.as_uri())
        errors = [e for e in browser.console() if e["level"] == "SEVERE"]
        assert errors == [], f"{page}: console errors {errors}"
        drawn = browser.run(DRAWN)
        expected_svgs = len(re.findall(r"<svg ", page.read_text()))
        assert len(drawn) == expected_svgs
        assert all(w > 100 and h > 100 and ok for w, h, _, ok in drawn), drawn
        if blocks is not None:
            assert len(drawn) == len(STORED)
            assert [n for _, _, n, _ in drawn] == blocks


def test_a_screenshot_of_the_report_is_not_blank(browser, tmp_path):
    page, _ = _pages(tmp_path)[-1]
    browser.open(page.as_uri())
    browser.run("document.querySelector('#counterexamples').scrollIntoView(); return 0;")
    png = browser.screenshot()
    if os.environ.get("BATCHPROOF_SCREENSHOT"):
        Path(os.environ["BATCHPROOF_SCREENSHOT"]).write_bytes(png)
    colours, inked = ink(png)
    assert colours >= 8, f"{colours} colours: the page looks blank"
    assert inked > 0.02, f"only {inked:.1%} of the screenshot is not white"
