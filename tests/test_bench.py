"""The benchmark command's pure parts: store sizes and where its report sections go."""

from __future__ import annotations

import pytest

from bench import retention, run, stores


@pytest.mark.parametrize(
    ("text", "size"),
    [("10k", 10_000), ("100K", 100_000), ("1m", 1_000_000), ("2500", 2_500), ("100_000", 100_000)],
)
def test_sizes_read_as_session_counts(text, size):
    assert stores.parse_size(text) == size
    assert stores.parse_size(stores.size_label(size)) == size


@pytest.mark.parametrize("text", ["", "ten", "10x", "0", "-5k"])
def test_a_bad_size_is_refused_with_a_message(text):
    with pytest.raises(ValueError, match="size|session"):
        stores.parse_size(text)


def test_sessions_stays_an_alias_of_size():
    assert run.parse_args(["--sessions", "10000"]).size == 10_000
    assert run.parse_args(["--size", "10k", "--only", "reads"]).only == ["reads"]
    with pytest.raises(SystemExit):
        run.parse_args(["--only", "reads,everything"])


def test_a_section_replaces_its_own_and_keeps_the_others():
    text = (
        "# Benchmarks\n\nintro\n\n## Read pages on 10 sessions / 5 messages (SQLite)\n\nold\n\n"
        "## Writes on 10 sessions (SQLite)\n\ntheirs\n"
    )
    replaced = run.replace_section(
        text,
        "## Read pages on 10 sessions",
        "## Read pages on 10 sessions / 6 messages (SQLite)\n\nnew\n",
    )
    assert "old" not in replaced and "new" in replaced
    assert replaced.index("new") < replaced.index("## Writes") and "theirs" in replaced
    # A section not there yet goes before the other benchmarks' sections.
    added = run.replace_section(
        replaced,
        "## Read pages on 20 sessions",
        "## Read pages on 20 sessions / 9 messages (PostgreSQL)\n\nmore\n",
    )
    assert added.index("new") < added.index("more") < added.index("## Writes")
    assert added.startswith("# Benchmarks\n\nintro\n")


RETENTION_DOC = f"""# Benchmarks

{retention.SECTION}

intro

| store | case | what | time | rate | appends during: p50 / p99 / max | baseline p99 |
| --- | --- | --- | --- | --- | --- | --- |
| 100k sqlite | erasure | old erasure | 69.32 s | 14 sessions/s | x | 3 ms |
| 100k sqlite | policy run | old policy | 421.44 s | 152 sessions/s | x | 2919 ms |
| 100k postgres | erasure | theirs | 9.00 s | 100 sessions/s | x | 3 ms |

Measured 2026-11-26 (100k sqlite: erasure, file rewrite)

Commentary.

## Cold pages (issue 16)

next
"""


def test_a_retention_run_replaces_only_its_own_cases_rows_and_note():
    rows = {
        "erasure": "| 100k sqlite | erasure | new erasure |",
        "file rewrite": "| 100k sqlite | file rewrite | new rewrite |",
    }
    text = retention.replace_rows(RETENTION_DOC, "100k", "sqlite", rows, "Measured today.")
    section = text[text.index(retention.SECTION) : text.index("## Cold pages")]
    assert "old erasure" not in section and "new erasure" in section and "new rewrite" in section
    # Another case of the same store, and another backend, are kept with their notes.
    assert "old policy" in section and "theirs" in section
    assert "Measured 2026-11-26" not in section
    assert "Measured today. (100k sqlite: erasure, file rewrite)" in section
    assert (
        section.index("new rewrite") < section.index("Measured today") < section.index("Commentary")
    )
    assert text.endswith("## Cold pages (issue 16)\n\nnext\n")
    assert "\n\n\n" not in text


def test_a_file_rewrite_that_did_not_run_says_so_in_its_row():
    results = {
        "erasure": {
            "sessions": 1000,
            "messages": 10000,
            "plan_seconds": 1.0,
            "erase_seconds": 10.0,
            "rate": 100.0,
            "appends_during": {"p50": 1, "p99": 2, "max": 3, "errors": 0},
            "appends_baseline": {"p99": 2},
            "rewrite": {
                "rewrite_seconds": 1.2,
                "rewritten": False,
                "file_rewrite": {"state": "pending"},
                "longest_lock_seconds": None,
                "bytes_before": 2_000_000_000,
                "bytes_after": 2_000_000_000,
                "busy_try": {"seconds": 1.0, "done": False},
                "appends_rewrite": {"count": 0, "errors": 0},
            },
        }
    }
    rows = retention.report_rows("10k", "sqlite", results)
    assert set(rows) == {"erasure", "file rewrite"}
    assert "NOT done, receipt still pending" in rows["file rewrite"]
    assert "stepped back in 1.00 s" in rows["file rewrite"]


def test_the_longest_stall_is_the_time_no_append_succeeded():
    records = [
        (100.0, 1.0, ""),  # done at 100.001
        (100.05, 10_000.0, "StoreBusy: gave up"),  # held 10 s, then failed
        (110.05, 3_000.0, ""),  # done at 113.05
        (113.05, 1.0, ""),
    ]
    assert retention.longest_stall(records, 100.0, 114.0) == pytest.approx(13.049, abs=1e-3)
    # Before the first append done in the window, the window's start counts.
    assert retention.longest_stall(records, 101.0, 112.0) == pytest.approx(11.0)
    assert retention.longest_stall(records, 5.0, 5.0) is None
