"""One keyset page of the trash: its operations, newest first, after a cursor.

An operation is ordered by its first entry's id, which never changes while it is in the
trash (later batches of a running job add entries after it; a restore changes states; a
purge drops whole operations). So a page is ``WHERE first id < cursor ORDER BY first id
DESC LIMIT n + 1``, never OFFSET: paging on while deletes add operations and purges drop
some shows each remaining operation once, in order, and a page costs the same few
queries however large the trash. The cursor is the session list's format
(``store.listing.encode_cursor``), of its own kind, so a session list cursor is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from sessions_admin.ledger.models import TrashEntry, TrashSession
from sessions_admin.store.listing import MAX_INT, cursor_values, encode_cursor

CURSOR_KIND = "trash"
CURSOR_DIRECTION = "desc"


@dataclass(frozen=True)
class TrashOperationsPage:
    # (operation, its entries oldest first), newest operation first; the payloads deferred.
    operations: tuple[tuple[str, tuple[TrashEntry, ...]], ...]
    next_cursor: str | None  # the page after this one, None on the last
    total: int  # operations matching, on every page


def decode_trash_cursor(token: str) -> int | None:
    """The first entry id a trash page cursor points below, or None if it is not one."""
    values = cursor_values(token, kind=CURSOR_KIND, direction=CURSOR_DIRECTION)
    if values is None or len(values) != 1:
        return None
    (first_id,) = values
    if isinstance(first_id, bool) or not isinstance(first_id, int) or not 0 < first_id <= MAX_INT:
        return None
    return first_id


def trash_operations_page(
    *, q: str = "", after: int | None = None, limit: int
) -> TrashOperationsPage:
    """The ``limit`` operations whose first entry id is below ``after`` (every one when None),
    those holding a session whose id starts with ``q`` when given: three queries."""
    matching = TrashEntry.objects.all()
    if q:
        matching = matching.filter(
            operation__in=TrashSession.objects.filter(session_id__startswith=q).values(
                "entry__operation"
            )
        )
    earlier = TrashEntry.objects.filter(operation=OuterRef("operation"), pk__lt=OuterRef("pk"))
    firsts = matching.filter(~Exists(earlier))
    if after is not None:
        firsts = firsts.filter(pk__lt=after)
    found = list(firsts.order_by("-pk").values_list("pk", "operation")[: limit + 1])
    shown = found[:limit]
    batches: dict[str, list[TrashEntry]] = {operation: [] for _pk, operation in shown}
    if shown:
        for entry in (
            TrashEntry.objects.defer("payload").filter(operation__in=list(batches)).order_by("pk")
        ):
            batches[entry.operation].append(entry)
    total = matching.order_by().values("operation").distinct().count()
    return TrashOperationsPage(
        # An operation purged between the two reads drops out.
        operations=tuple((op, tuple(entries)) for op, entries in batches.items() if entries),
        next_cursor=encode_cursor(CURSOR_KIND, CURSOR_DIRECTION, [shown[-1][0]])
        if len(found) > limit
        else None,
        total=total,
    )
