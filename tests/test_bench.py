"""The benchmark command's pure parts: store sizes and where its report sections go."""

from __future__ import annotations

import pytest

from bench import run, stores


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
