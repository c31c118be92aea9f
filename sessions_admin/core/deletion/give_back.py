"""Giving back a session a delete had started in parts: its deleted parts return, its mark goes.

Apart from ``parts`` because a step of any delete (``steps``) gives back a session it must keep.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from sessions_admin.core import being_deleted, db
from sessions_admin.core.db import store_operation
from sessions_admin.core.deletion.trash import (
    Trash,
    _advance_message_sequence,
    _insert_rows,
    _trash_or_default,
)


@store_operation
def stop_deleting(*, session_ids: Sequence[str], trash: Trash | None = None) -> tuple[str, ...]:
    """Give back the sessions among these that a delete left in parts (killed, cancelled or
    skipping them): their deleted parts return from the trash and they are writable again.
    Returns the sessions given back."""
    ids = list(dict.fromkeys(session_ids))
    if not ids:
        return ()
    present = [
        r[0]
        for r in db.fetchall(
            f"SELECT id FROM sessions WHERE id IN ({db.placeholders(ids)}) ORDER BY id"
            + db.for_update(),
            ids,
        )
    ]
    marked = [sid for sid in present if sid in being_deleted.marks_on(present)]
    _give_back_parts(marked, trash=trash)
    return tuple(marked)


def _give_back_parts(session_ids: Sequence[str], *, trash: Trash | None) -> list[int]:
    """Put back the parts already deleted of these sessions and clear their being-deleted state.

    In the caller's store transaction (under the sessions' locks): a delete that
    must keep a session it had started in parts (a hold landed, it went live
    under a delete that keeps live sessions, or its job was cancelled) leaves it
    exactly as it was. The parts' trash entries go once the store commits
    (``Trash.give_back``): the trash then shows only what the store lost. A purge's parts
    come back from the store's own copy (``being_deleted.put_back_parts``), whatever trash is
    passed: a purge is given back like any other delete.
    """
    marks = being_deleted.marks_on(session_ids)
    if not marks:
        return []
    trash = _trash_or_default(trash)
    restored: list[int] = []
    for session_id in marks:
        for entry in trash.part_entries([session_id]):
            contents = trash.contents(entry)
            if contents is None or contents.restored or contents.rows.get("part_of") != session_id:
                continue
            _insert_rows("messages", contents.rows["messages"])
            restored.append(entry)
        being_deleted.put_back_parts(session_id)  # a purge's parts, kept in the store
        db.execute("DELETE FROM sessions_admin_deletions WHERE session_id = %s", [session_id])
    _advance_message_sequence()

    def given_back() -> None:
        for entry in restored:
            trash.give_back(entry)

    transaction.on_commit(given_back, using="store")
    return restored
