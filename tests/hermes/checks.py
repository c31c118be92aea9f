"""Checks run with hermes-agent's own code on a store after the dashboard wrote to it."""

from __future__ import annotations

from tests.hermes.conftest import Hermes, call, sql

# The text Hermes 0.19's triggers index for a message (hermes_state.FTS_SQL).
_DOCUMENT = (
    "COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' || "
    "COALESCE(m.tool_calls, '')"
)


def health(hermes: Hermes) -> dict:
    """Integrity, foreign keys, both FTS indexes against the messages, and counters, by Hermes."""
    (
        integrity,
        foreign_keys,
        fts_missing,
        fts_stale,
        trigram_missing,
        trigram_stale,
        fts_check,
        trigram_check,
        counters,
    ) = hermes.run(
        [
            sql("PRAGMA integrity_check"),
            sql("PRAGMA foreign_key_check"),
            # Every message indexed with its current text, and nothing else indexed.
            sql(
                "SELECT m.id FROM messages m LEFT JOIN messages_fts f ON f.rowid = m.id "
                f"WHERE f.rowid IS NULL OR f.content IS NOT {_DOCUMENT}"
            ),
            sql("SELECT rowid FROM messages_fts WHERE rowid NOT IN (SELECT id FROM messages)"),
            sql(
                "SELECT m.id FROM messages m LEFT JOIN messages_fts_trigram f ON f.rowid = m.id "
                f"WHERE f.rowid IS NULL OR f.content IS NOT {_DOCUMENT}"
            ),
            sql(
                "SELECT rowid FROM messages_fts_trigram "
                "WHERE rowid NOT IN (SELECT id FROM messages)"
            ),
            sql("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')"),
            sql(
                "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('integrity-check')"
            ),
            sql(
                "SELECT s.id, s.message_count, "
                "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1) "
                "FROM sessions s ORDER BY s.id"
            ),
        ]
    )
    return {
        "integrity": integrity,
        "foreign_keys": foreign_keys,
        "fts": fts_missing + fts_stale + trigram_missing + trigram_stale,
        "fts_integrity": fts_check + trigram_check,
        "counters": {sid: (stored, active) for sid, stored, active in counters},
    }


def assert_healthy(hermes: Hermes, *, counted: set[str] = frozenset()) -> dict:
    found = health(hermes)
    assert found["integrity"] == [["ok"]]
    assert found["foreign_keys"] == []
    assert found["fts"] == [] and found["fts_integrity"] == []
    for session_id in counted:
        stored, active = found["counters"][session_id]
        assert stored == active, f"{session_id}: message_count {stored}, active rows {active}"
    return found


def search(hermes: Hermes, *words: str) -> dict[str, set[str]]:
    """word -> sessions whose messages Hermes's own FTS search finds it in (active rows)."""
    results = hermes.run([call("state.search_messages", word, limit=50) for word in words])
    return {
        word: {hit["session_id"] for hit in hits} for word, hits in zip(words, results, strict=True)
    }


def transcripts(hermes: Hermes, session_ids: list[str]) -> dict[str, list[tuple]]:
    """What Hermes loads for each session: (id, role, content) of its active messages, in order."""
    results = hermes.run([call("state.get_messages", sid) for sid in session_ids])
    return {
        sid: [(m["id"], m["role"], m["content"]) for m in messages]
        for sid, messages in zip(session_ids, results, strict=True)
    }
