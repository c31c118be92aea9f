"""check_consistency on hermes-agent 0.19's inline layout: both FTS tables, as Hermes writes them.

(Schema 30's external-content layout: tests/hermes/test_v30.py.)
"""

from __future__ import annotations

import sqlite3

from sessions_admin.demo import consistency
from tests.hermes import scenario
from tests.hermes.conftest import raw_rows


def test_an_untouched_store_reports_nothing_and_a_broken_index_is_named(hermes, attach):
    built = scenario.build(hermes)
    attach()
    assert consistency._check_search_index() == []

    gone = built.message_ids["dc-a"][0]
    stale = built.message_ids["tg-new"][1]
    conn = sqlite3.connect(hermes.state)
    conn.execute("DELETE FROM messages_fts_trigram WHERE rowid = ?", [gone])
    conn.execute("UPDATE messages_fts SET content = 'something else' WHERE rowid = ?", [stale])
    conn.commit()
    conn.close()
    assert raw_rows(
        hermes.state, "SELECT COUNT(*) FROM messages_fts_trigram WHERE rowid = ?", (gone,)
    ) == [(0,)]
    assert consistency._check_search_index() == [
        f"1 messages_fts entr(ies) whose text differs from the message: {stale}",
        f"1 message(s) missing from messages_fts_trigram: {gone}",
    ]
