"""docs/troubleshooting.md quotes the messages the program prints: each entry (a `###` heading) has
one line `Message: `<the message>`` (checked against nodes/, sync/ and launch/), `Message (<file>):
`<the message>`` (checked against that file: a message printed outside those packages, e.g. a test's
skip reason) or `Message: none ...` (a stall that prints nothing of ours). A message is checked by
its fixed text, its longest piece between placeholders (`N`, `<...>`, `...`), which must occur in
the source read as text, with adjacent string literals joined. So a message reworded in the code
fails here instead of the page going stale. Reads files only: no process, no import of ours."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "troubleshooting.md")
PACKAGES = ("nodes", "sync", "launch")

MESSAGE = re.compile(r"^Message(?: \((?P<file>[^)]+)\))?: (?P<rest>.*)$")
SPAN = re.compile(r"^`(?P<text>[^`]+)`$")
PLACEHOLDER = re.compile(r"<[^<>]*>|\.\.\.|\bN\b")
PREFIX = "error: "  # added by launch.process.exits (refuse, report) and sync.watchdog, not in the message
MIN_FIXED = 10  # a shorter fixed piece would match almost anything
# "a"\n  f"b" -> "ab": a message split over lines is one string in the source (prefixes r, f, b, u)
CONTINUATION = re.compile(r"""(["'])[ \t]*\n\s*[rRbBfFuU]{0,2}\1""")


def read_source(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return CONTINUATION.sub("", f.read())


def package_sources() -> str:
    texts = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            texts += [read_source(os.path.join(folder, name)) for name in sorted(files) if name.endswith(".py")]
    return "\n".join(texts)


def fixed_text(message: str) -> str:
    """The longest piece of a message between its placeholders."""
    message = message.removeprefix(PREFIX)
    return max((piece.strip() for piece in PLACEHOLDER.split(message)), key=len)


def entries() -> list[tuple[str, list[tuple[str | None, str]]]]:
    """(heading, its Message lines as (file or None, the rest of the line)) for each ### entry."""
    out: list[tuple[str, list[tuple[str | None, str]]]] = []
    with open(PAGE, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("### "):
                out.append((line[4:], []))
                continue
            m = MESSAGE.match(line)
            if m:
                assert out, f"a Message line before the first entry: {line}"
                out[-1][1].append((m["file"], m["rest"]))
    return out


def test_every_entry_has_one_message_line():
    found = entries()
    assert len(found) >= 20, f"only {len(found)} entries on the page"
    for heading, messages in found:
        assert len(messages) == 1, f"'{heading}' has {len(messages)} Message lines, not one"
        file, rest = messages[0]
        assert SPAN.match(rest) or (file is None and rest.startswith("none")), (
            f"'{heading}': a Message line is one code span, or 'none (...)': {rest}")


def test_every_message_on_the_page_is_printed_by_the_code():
    sources = package_sources()
    checked = 0
    for heading, messages in entries():
        for file, rest in messages:
            m = SPAN.match(rest)
            if m is None:
                continue
            fixed = fixed_text(m["text"])
            assert len(fixed) >= MIN_FIXED, f"'{heading}': too little fixed text to check ('{fixed}')"
            where = read_source(os.path.join(ROOT, file)) if file else sources
            assert fixed in where, (f"'{heading}': '{fixed}' is not in {file or '/'.join(PACKAGES)}: "
                                    "the message was reworded in the code, or the page misquotes it")
            checked += 1
    assert checked >= 20


def test_the_fixed_text_is_the_longest_piece_between_placeholders():
    assert fixed_text("error: checkpoint <path> holds N; this run has population.size=N") == (
        "; this run has population.size=")
    assert fixed_text("error: pass hydra.run.dir=...") == "pass hydra.run.dir="
    assert CONTINUATION.sub("", 'f"a {x} "\n    "b"') == 'f"a {x} b"'
