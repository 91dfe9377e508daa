"""The Scoreboard as data (launch.share.scoreboard): its rows read from docs/scoreboard.md as the
landing page's build hook, the headline check and an export's model card read them. Text only."""
from launch.share import scoreboard
from launch.share.card import scoreboard_rows

PAGE = """## Learning

### VizDoom

| task | ours | Sample Factory | ours / SF | verdict | measured |
| --- | --- | --- | --- | --- | --- |
| `doom_x` | 79.25 | 78.17 | 1.01x | [level](#sb-doom_x) | [2026-11-25, Xeon](environments.md#x) |
| `doom_y` | 11.81 (6 seeds) | 9.78 (6 seeds) | 1.21x | [level](#sb-doom_y) | [2026-11-28/29, Xeon](e.md#y) |
| `doom_z` | 605 / 802 | 1,683 / -6.2 | - | [ours ahead](#sb-doom_z) | [2026-11-28, EPYC](e.md#z) |

## Throughput

| workload | ours | Sample Factory | ours / SF | verdict | measured |
| --- | --- | --- | --- | --- | --- |
| MuJoCo, launch to exit, Xeon | 5,500-6,800 | ~800 | - | [ours faster](#sb-tp) | [2026-11-25/26](e.md#t) |

| a table of another kind | x | y |
| --- | --- | --- |
| 1 | 2 | 3 |
"""


def test_a_row_s_figures_seeds_verdict_and_date():
    rows = scoreboard.rows(PAGE)
    assert [r.task for r in rows] == ["`doom_x`", "`doom_y`", "`doom_z`", "MuJoCo, launch to exit, Xeon"]
    x, y, z, tp = rows
    assert (x.table, x.family, x.ours, x.theirs, x.ratio, x.verdict, x.anchor) == (
        "Learning", "VizDoom", [79.25], [78.17], "1.01x", "level", "sb-doom_x")
    assert y.ours == [11.81] and y.seeds == (6, 6) and y.date == "2026-11-29"  # the mean of six, the later day
    assert z.ours == [605, 802] and z.theirs == [1683, -6.2] and z.seeds == (2, 2) and z.verdict == "ours ahead"
    assert (tp.table, tp.ours, tp.theirs, tp.date) == ("Throughput", [], [], "2026-11-26")  # ranges: no figures


def test_every_row_of_the_page_has_its_block_and_a_date():
    """Each verdict links to the row's block on the page (mkdocs --strict checks the anchor exists)."""
    rows = scoreboard.read()
    assert len(rows) >= 25 and {r.table for r in rows} == {"Learning", "Throughput"}
    assert all(r.anchor.startswith("sb-") and r.date.startswith("2026-") for r in rows), rows


def test_the_model_card_quotes_its_task_s_rows_under_the_header_without_the_docs_links():
    """atari_breakout's rows are not the first of their table: the card quoted them without the header
    (until 2026-12-02), and with the docs' relative links, which lead nowhere on the Hub."""
    rows = scoreboard_rows("atari_breakout")
    assert rows[0].startswith("| task | ours | Sample Factory | ours / SF | verdict") and rows[1].startswith("| ---")
    assert len(rows) == 4 and all(r.startswith("| `atari_breakout`") for r in rows[2:]), rows
    assert not any("](" in r for r in rows), rows
    assert scoreboard_rows("doom_duel") == []
