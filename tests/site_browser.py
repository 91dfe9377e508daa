"""The documentation site in a real browser: builds it (`mkdocs build --strict`), serves it on
127.0.0.1 and opens every page in one headless Chromium at a desktop width (1280 px) and a phone's
(390 px). A page fails when it scrolls sideways (naming the elements that stick out of the
viewport), when one of its images does not load, or when inline code in a table cell wraps inside a
word ("env.backen|d": the table should scroll instead). At the desktop width, also when a table is
wider than the page's column, hiding its last columns behind a sideways scroll, and when a code
block's line holding a comment is wider than its box, cutting the comment.

    python tests/site_browser.py [--site DIR] [--shots DIR] [--wide-code]

--site checks a site already built in DIR instead of building one; --shots saves screenshots of a
few pages at both widths. Exits 1 with one line per problem, 2 when Chromium, chromedriver or
Selenium is missing; prints the time each page took at the end. tests/test_site_browser.py runs it.
"""
import argparse
import functools
import glob
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTHS = {"desktop": 1280, "phone": 390}
HEIGHT = {"desktop": 900, "phone": 844}
SHOT_PAGES = ("index", "scoreboard", "getting-started", "your-environment", "concepts", "environments", "configuration")
SHOT_MAX_HEIGHT = 12000  # px: the top of a longer page (the configuration reference is ~30,000 at 390 px)
# Debian's packages (setup.sh: apt-get install chromium chromium-driver), else whatever is on PATH; the
# driver's path is given to Selenium, so that it never tries to download one
CHROMIUM = ("/usr/bin/chromium", *filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser"))))
CHROMEDRIVER = ("/usr/bin/chromedriver", *filter(None, [shutil.which("chromedriver")]))

# Waits (up to 5 s) for every image of the page, lazy ones included, then names those that did not load.
BROKEN_IMAGES_JS = """
const done = arguments[arguments.length - 1];
const imgs = Array.from(document.images);
imgs.forEach(img => { if (img.loading === 'lazy') img.loading = 'eager'; });
const settle = img => img.complete ? Promise.resolve() : new Promise(ok => {
  img.addEventListener('load', ok, {once: true}); img.addEventListener('error', ok, {once: true}); });
const timeout = new Promise(ok => setTimeout(ok, 5000));
Promise.race([Promise.all(imgs.map(settle)), timeout]).then(() => done(
  imgs.filter(img => !(img.complete && img.naturalWidth > 0))
      .map(img => img.getAttribute('src') + (img.complete ? ' (failed)' : ' (still loading after 5 s)'))));
"""

# The page's sideways overflow and what causes it: visible elements whose right edge is past the
# viewport and that no clipping/scrolling ancestor contains, outermost ones first (their parent
# fits), and elements whose content spills out of them (a long word in a paragraph).
OVERFLOW_JS = """
const vw = window.innerWidth;
const doc = document.documentElement;
const result = {scrollWidth: doc.scrollWidth, innerWidth: vw, culprits: []};
if (doc.scrollWidth <= vw + 1) return result;
const clips = el => { const o = getComputedStyle(el).overflowX; return o !== 'visible'; };
const describe = el => {
  let s = el.tagName.toLowerCase();
  if (el.id) s += '#' + el.id;
  if (typeof el.className === 'string' && el.className.trim())
    s += '.' + el.className.trim().split(/\\s+/).join('.');
  const parent = el.parentElement;
  if (parent && parent !== document.body) {
    let p = parent.tagName.toLowerCase();
    if (typeof parent.className === 'string' && parent.className.trim())
      p += '.' + parent.className.trim().split(/\\s+/)[0];
    s = p + ' > ' + s;
  }
  const text = (el.textContent || el.getAttribute('src') || '').replace(/\\s+/g, ' ').trim();
  return s + (text ? ' "' + text.slice(0, 50) + (text.length > 50 ? '...' : '') + '"' : '');
};
const inClip = new Set();
const walk = (el, clipped) => {
  if (clipped) inClip.add(el);
  const c = clipped || (el !== doc && el !== document.body && clips(el));
  for (const child of el.children) walk(child, c);
};
walk(doc, false);
const found = [];
for (const el of doc.querySelectorAll('body *')) {
  if (inClip.has(el)) continue;
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) continue;
  const style = getComputedStyle(el);
  if (style.visibility === 'hidden' || style.position === 'fixed') continue;
  const right = r.right + window.scrollX;
  const parent = el.parentElement;
  const parentRight = parent ? parent.getBoundingClientRect().right + window.scrollX : 0;
  if (right > vw + 1 && parentRight <= vw + 1) {
    found.push({right: Math.round(right), width: Math.round(r.width), what: describe(el), how: 'sticks out'});
  } else if (right <= vw + 1 && style.overflowX === 'visible' && el.scrollWidth > el.clientWidth + 1
             && r.left + window.scrollX + el.scrollWidth > vw + 1 && el.children.length === 0) {
    found.push({right: Math.round(r.left + window.scrollX + el.scrollWidth), width: el.scrollWidth,
                what: describe(el), how: 'content spills out'});
  }
}
found.sort((a, b) => b.right - a.right);
result.culprits = found.slice(0, 3);
return result;
"""


# Inline code in a table cell that wraps inside a word ("env.backen|d", "doom_basi|c", "env.|id"):
# a line break between two word characters (letters, digits, _ and .). A break at a space, or at
# the punctuation where the browser's line breaking allows one ("--|device", "logger=|[a,b]"), is
# not one: only `white-space: nowrap` removes those, and it squeezes tables whose cells hold long
# commands into one word per line.
BROKEN_CODE_JS = """
const found = [];
for (const code of document.querySelectorAll('td code, th code')) {
  if (code.closest('pre') || code.getClientRects().length < 2) continue;
  const text = code.textContent;
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  let prev = null, at = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++, at++) {
      const range = document.createRange();
      range.setStart(node, i); range.setEnd(node, i + 1);
      const r = range.getClientRects()[0];
      if (!r || r.width === 0) continue;
      if (prev && r.top > prev.bottom - 1 && /[\\w.]/.test(text[at - 1] || ' ') && /[\\w.]/.test(text[at]))
        found.push(text.slice(0, at) + '|' + text.slice(at));
      prev = r;
    }
  }
}
return found;
"""


# Tables at the desktop's width that hide columns: a table wider than its scrolling wrapper, with the
# header cells that start or end past the wrapper's right edge (the reader sees only the first
# columns without scrolling sideways, as the Scoreboard's verdict column was).
HIDDEN_COLUMNS_JS = """
const found = [];
for (const table of document.querySelectorAll('article table')) {
  const box = table.closest('.md-typeset__scrollwrap') || table.parentElement;
  const right = box.getBoundingClientRect().right;
  const heads = Array.from((table.tHead || table).rows[0].cells);
  const hidden = heads.filter(th => th.getBoundingClientRect().right > right + 1);
  if (hidden.length)
    found.push('"' + heads.map(th => th.textContent.trim()).join(' | ').slice(0, 60) + '" hides ' +
               hidden.map(th => '"' + th.textContent.trim().slice(0, 20) + '"').join(', '));
}
return found;
"""

# Code blocks whose comments do not fit the box: a line holding a comment (`#` at its start or after
# a space) wider than the visible part of its <pre>, so that the comment is cut at the box's edge
# ("# set up, then" of a longer one). Comments go on lines of their own, above what they explain;
# a long command without a comment may scroll, and so may a directive (`#!`, `#SBATCH`). Widths from
# the block's own monospace font.
CUT_COMMENTS_JS = """
const found = [];
const canvas = document.createElement('canvas').getContext('2d');
for (const code of document.querySelectorAll('article pre > code')) {
  const style = getComputedStyle(code);
  canvas.font = [style.fontStyle, style.fontWeight, style.fontSize, style.fontFamily].join(' ');
  const room = code.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  for (const line of code.textContent.split('\\n')) {
    if (!/(^|\\s)#/.test(line) || /^\\s*#(!|SBATCH)/.test(line)) continue;  // not directives
    if (canvas.measureText(line).width > room + 1)
      found.push('"' + line.trim().slice(0, 60) + (line.trim().length > 60 ? '...' : '') + '"');
  }
}
return found;
"""


# Not a problem, printed as a note: code blocks wider than their box, which scroll inside it.
WIDE_CODE_JS = """
return Array.from(document.querySelectorAll('article pre > code'))
  .filter(c => c.scrollWidth > c.clientWidth + 1)
  .map(c => c.scrollWidth + 'px in ' + c.clientWidth + 'px: "' +
       (c.textContent.split('\\n').find(l => l.trim()) || '').trim().slice(0, 50) + '"');
"""


def build(site_dir: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", site_dir], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    if proc.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{proc.stderr[-3000:]}")


def pages(site_dir: str) -> list[str]:
    """URL paths of every page: index.html and every */index.html (404.html is not a page)."""
    found = [os.path.relpath(p, site_dir) for p in glob.glob(os.path.join(site_dir, "**", "index.html"),
                                                                 recursive=True)]
    paths = ["" if p == "index.html" else os.path.dirname(p).replace(os.sep, "/") + "/" for p in found]
    return sorted(paths, key=lambda p: (p != "", p))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site_dir: str) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=site_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def missing() -> str | None:
    """Why the browser check cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e .[test])"
    if not any(os.access(p, os.X_OK) for p in CHROMIUM):
        return "Chromium is not installed (apt-get install chromium chromium-driver)"
    if not any(os.access(p, os.X_OK) for p in CHROMEDRIVER):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = next(p for p in CHROMIUM if os.access(p, os.X_OK))
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1280,900",
                # offline, as CI is: the CDNs (Google Fonts, unpkg) fail at once instead of timing out
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    service = Service(executable_path=next(p for p in CHROMEDRIVER if os.access(p, os.X_OK)))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(10)
    return driver


def set_width(driver, width: int, height: int) -> None:
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


def screenshot(driver, path: str, width: int) -> None:
    import base64

    height = min(driver.execute_script("return document.documentElement.scrollHeight"), SHOT_MAX_HEIGHT)
    full = driver.execute_script("return document.documentElement.scrollWidth")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": max(width, full), "height": height, "scale": 1}})
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))


def check_page(driver, url: str, name: str, width_name: str, notes: list[str] | None = None) -> list[str]:
    driver.get(url)
    problems = []
    if notes is not None:
        notes += [f"{name}: {wide}" for wide in driver.execute_script(WIDE_CODE_JS)]
    for src in driver.execute_async_script(BROKEN_IMAGES_JS):
        problems.append(f"{name} @ {width_name} {WIDTHS[width_name]}px: image does not load: {src}")
    broken = driver.execute_script(BROKEN_CODE_JS)
    if broken:
        problems.append(f"{name} @ {width_name} {WIDTHS[width_name]}px: {len(broken)} break(s) inside a word "
                        f"in code in table cells: " + ", ".join(broken[:5]) + (", ..." if len(broken) > 5 else ""))
    if width_name == "desktop":
        for table in driver.execute_script(HIDDEN_COLUMNS_JS):
            problems.append(f"{name} @ {width_name} {WIDTHS[width_name]}px: a table hides columns off the page: "
                            f"{table}")
        cut = driver.execute_script(CUT_COMMENTS_JS)
        if cut:
            problems.append(f"{name} @ {width_name} {WIDTHS[width_name]}px: {len(cut)} code line(s) whose comment is "
                            f"cut at the box's edge (put the comment on its own line): " + ", ".join(cut[:4])
                            + (", ..." if len(cut) > 4 else ""))
    over = driver.execute_script(OVERFLOW_JS)
    if over["scrollWidth"] > over["innerWidth"] + 1:
        culprits = "; ".join(f"{c['what']} ({c['how']}, right edge {c['right']}px, {c['width']}px wide)"
                             for c in over["culprits"]) or "no single element found"
        problems.append(f"{name} @ {width_name} {WIDTHS[width_name]}px: scrolls sideways "
                        f"(page {over['scrollWidth']}px wide in a {over['innerWidth']}px viewport): {culprits}")
    return problems


def check(site_dir: str | None = None, shots: str | None = None, out=sys.stdout, notes: list[str] | None = None
          ) -> list[str]:
    """Every problem on every page at both widths (an empty list: the site passes). Builds the site
    into a temporary directory unless site_dir holds one already. Code blocks that scroll at the
    desktop width (allowed: they scroll inside their box) are added to notes when it is a list."""
    start = time.monotonic()
    tmp = None
    if site_dir is None:
        tmp = tempfile.mkdtemp(prefix="site_browser_")
        site_dir = os.path.join(tmp, "site")
        build(site_dir)
    built = time.monotonic()
    if shots:
        os.makedirs(shots, exist_ok=True)
    server = serve(site_dir)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    driver = browser()
    problems, timing = [], {}
    try:
        for width_name, width in WIDTHS.items():
            set_width(driver, width, HEIGHT[width_name])
            for path in pages(site_dir):
                name = path.rstrip("/") or "index"
                t0 = time.monotonic()
                problems += check_page(driver, base + path, name, width_name,
                                       notes if width_name == "desktop" else None)
                if shots and name in SHOT_PAGES:
                    screenshot(driver, os.path.join(shots, f"{name}_{width_name}.png"), width)
                timing.setdefault(name, {})[width_name] = time.monotonic() - t0
    finally:
        driver.quit()
        server.shutdown()
        server.server_close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'page':<28}{'desktop':>9}{'phone':>9}", file=out)
    for name, t in timing.items():
        print(f"{name:<28}{t.get('desktop', 0):8.2f}s{t.get('phone', 0):8.2f}s", file=out)
    print(f"{len(timing)} pages x {len(WIDTHS)} widths in {time.monotonic() - built:.1f} s "
          f"(build {built - start:.1f} s, whole run {time.monotonic() - start:.1f} s)", file=out)
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", help="check the site already built in this directory (no build)")
    parser.add_argument("--shots", help="save desktop and phone screenshots of a few pages here")
    parser.add_argument("--wide-code", action="store_true",
                        help="name the code blocks that scroll inside their box at 1280 px (allowed)")
    args = parser.parse_args(argv)
    why = missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    notes: list[str] = []
    try:
        problems = check(args.site, args.shots, notes=notes)
    except RuntimeError as e:  # the build failed
        print(e, file=sys.stderr)
        return 1
    if args.wide_code:
        for note in notes:
            print(f"wide code block: {note}")
    else:
        print(f"{len(notes)} code block(s) scroll inside their box at {WIDTHS['desktop']} px (allowed; --wide-code "
              f"names them)")
    for problem in problems:
        print(problem)
    if args.shots:
        print(f"screenshots in {args.shots}")
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
