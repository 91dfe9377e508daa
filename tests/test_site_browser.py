"""The documentation site in a real browser (tests/site_browser.py): every page at a desktop's width
and a phone's scrolls only inside its tables and code blocks, never sideways as a whole; its images
load; inline code in a table cell never wraps inside a word; and at the desktop's width no table
hides a column off the page and no code block cuts a comment. About 15 s on 2 cores (the build
included); skipped where Chromium, chromedriver or Selenium is missing (failed under CI=true)."""
import io

import site_browser
from helpers import missing_dependency


def test_every_page_fits_a_desktop_and_a_phone():
    why = site_browser.missing()
    if why:
        missing_dependency(why)
    out = io.StringIO()
    problems = site_browser.check(out=out)
    assert not problems, "\n".join(problems) + "\n" + out.getvalue()
