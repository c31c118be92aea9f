"""The trash: what deletes removed, restorable until purged (admin only).

One row per operation: every batch of one operator action (a cascade delete, a
bulk delete job) is one entry on the page, restored (and purged) whole; the
row is named by its first batch's entry (``#id``), which its restore form posts.
The page only reads the dashboard's own database; a restore or a purge goes
through ``ledger.actions``, validated by its form (``console.forms``) first.
How long an entry stays restorable is ``ledger.trash_retention``'s.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import F, Min, Window
from django.db.models.functions import RowNumber
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from sessions_admin.console.forms import (
    SearchTermField,
    TrashPurgeForm,
    TrashRestoreForm,
)
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    plural,
    redirect_to,
    require_perm,
)
from sessions_admin.console.refusals import Refused, attempt, refuse, refuse_form
from sessions_admin.console.views.delete import (
    TypedConfirmation,
    typed_confirmation,
    typed_count_problem,
)
from sessions_admin.core.deletion import plural_days
from sessions_admin.ledger import actions
from sessions_admin.ledger.jobs import restore_runs_as_job
from sessions_admin.ledger.models import AuditAction, DeleteJob, TrashEntry, TrashSession
from sessions_admin.ledger.trash import (
    ParentsElsewhere,
    held_trash,
    merges_waiting_on,
    parents_elsewhere,
    part_rows_elsewhere,
    purge_sizes,
    still_deleting,
)
from sessions_admin.ledger.trash_page import decode_trash_cursor, trash_operations_page
from sessions_admin.ledger.trash_retention import configured_days
from sessions_admin.signin.roles import DELETE

TRASH_TEMPLATE = "console/trash.html"

TRASH_PAGE_SIZE = 25
TRASH_SESSIONS_SHOWN = 12
NUL_SEARCH = "A session id cannot contain a NUL character: showing every entry."
BAD_CURSOR = "That page link is not valid (it was cut or changed): showing the newest entries."


@dataclass(frozen=True)
class TrashRow:
    """One operation: its entries (one per batch), shown as one restorable unit."""

    operation: str
    entry: TrashEntry  # the first batch's: the row's id, who, why, when
    entries: list[TrashEntry]
    sessions: list[tuple[TrashSession, bool]]  # (session, matches the search)
    more: int
    expires_at: dt.datetime
    expired: bool
    job_running: bool = False  # its bulk delete job still deletes: restorable once it stops
    # Its cascade's audit entry is still pending (running, or its process died and it is not
    # yet completed): restorable, whole, once it is.
    cascade_running: bool = False
    hold: str = ""  # the legal hold (in words) that keeps it from a purge
    hold_id: int | None = None
    held_session: str = ""  # a session of it the hold covers
    # Sessions only some of whose messages are here (deleted in parts, the delete unfinished
    # or stopped): their rows are still in the store.
    part_sessions: tuple[str, ...] = ()
    # (merge id, role, session): merges that can be undone again only once this is restored.
    merges: tuple[tuple[int, str, str], ...] = ()
    # Other operations holding the parents of some of its sessions: restore them first (restored
    # after, they give those sessions their parent link back then).
    parents_in: tuple[ParentsElsewhere, ...] = ()
    # (session, entry) for part sessions whose row another operation holds: restoring that
    # entry brings these parts back with the row; this operation alone cannot go back first.
    rows_in: tuple[tuple[str, int], ...] = ()

    @property
    def state(self) -> str:
        """restored | pending | partly-restored (restored batch by batch before operations
        were kept whole) | complete."""
        states = {e.state for e in self.entries}
        if states == {TrashEntry.RESTORED}:
            return TrashEntry.RESTORED
        if TrashEntry.PENDING in states:
            return TrashEntry.PENDING
        return "partly-restored" if TrashEntry.RESTORED in states else TrashEntry.COMPLETE

    @property
    def session_count(self) -> int:
        return sum(e.session_count for e in self.entries if e.state != TrashEntry.RESTORED)

    @property
    def message_count(self) -> int:
        return sum(e.message_count for e in self.entries if e.state != TrashEntry.RESTORED)

    @property
    def rows_in_sessions(self) -> set[str]:
        return {session_id for session_id, _entry in self.rows_in}

    @property
    def last_entry_id(self) -> int:
        return self.entries[-1].pk

    @property
    def total_sessions(self) -> int:
        return sum(e.session_count for e in self.entries)

    @property
    def total_messages(self) -> int:
        return sum(e.message_count for e in self.entries)

    @property
    def restore_entry(self) -> TrashEntry | None:
        """The entry the restore form names (any of the operation restores it all)."""
        return next((e for e in self.entries if e.state != TrashEntry.RESTORED), None)

    @property
    def last_restored(self) -> TrashEntry | None:
        restored = [e for e in self.entries if e.restored_at]
        return max(restored, key=lambda e: e.restored_at) if restored else None


def _trash_url(q: str = "", after: str = "") -> str:
    params = {k: v for k, v in {"q": q, "after": after}.items() if v}
    return reverse("trash") + ("?" + urlencode(params) if params else "")


def _first_sessions(operations: list[str], *, starting: str = "") -> dict[str, list[TrashSession]]:
    """The first TRASH_SESSIONS_SHOWN sessions (by id) of each operation's whole-session
    batches, those whose id starts with ``starting`` when given: one query for a page."""
    if not operations:
        return {}
    rows = TrashSession.objects.filter(entry__operation__in=operations, entry__session_count__gt=0)
    if starting:
        rows = rows.filter(session_id__startswith=starting)
    rows = (
        rows.annotate(
            operation=F("entry__operation"),
            rank=Window(RowNumber(), partition_by=[F("entry__operation")], order_by=F("id").asc()),
        )
        .filter(rank__lte=TRASH_SESSIONS_SHOWN)
        .order_by("id")
    )
    by_operation: dict[str, list[TrashSession]] = {}
    for row in rows:
        by_operation.setdefault(row.operation, []).append(row)
    return by_operation


def _render_trash(
    request: HtmxHttpRequest,
    *,
    q: str,
    after: int | None = None,
    page_problem: str = "",
    status: int = 200,
    problems=(),
    purge_reason: str = "",
    purge_scope: str = "expired",
) -> HttpResponse:
    # What a dead delete or restore left unmarked is marked first: the page never offers a
    # restore of rows already back in the store, nor counts a batch that never committed.
    actions.settle_deletes_and_restores()
    days = configured_days()
    now = timezone.now()
    retention = timedelta(days=days)
    page = trash_operations_page(q=q, after=after, limit=TRASH_PAGE_SIZE)
    entries = {operation: list(batches) for operation, batches in page.operations}
    newest = {
        operation: max(e.created_at for e in batches) for operation, batches in entries.items()
    }
    running_jobs = set(
        DeleteJob.objects.filter(
            pk__in={e.job_id for batch in entries.values() for e in batch if e.job_id},
            state__in=[DeleteJob.PENDING, DeleteJob.RUNNING],
        ).values_list("pk", flat=True)
    )
    held = held_trash()
    waiting = merges_waiting_on(list(newest))
    parents = parents_elsewhere(list(newest))
    part_rows = part_rows_elsewhere(list(newest))
    writing = still_deleting()
    # The sessions each row names, for the whole page in one query each (not two a row).
    first_by_operation = _first_sessions(list(newest))
    found_by_operation = _first_sessions(list(newest), starting=q) if q else {}
    rows = []
    for operation in newest:
        batches = entries[operation]
        whole = {s for e in batches if e.session_count for s in e.session_ids}
        parts = tuple(
            dict.fromkeys(
                s for e in batches if not e.session_count for s in e.session_ids if s not in whole
            )
        )
        found = found_by_operation.get(operation, [])
        seen = {s.pk for s in found}
        first = first_by_operation.get(operation, [])
        shown = [(s, True) for s in found] + [(s, False) for s in first if s.pk not in seen]
        shown = shown[: max(TRASH_SESSIONS_SHOWN, len(found))]
        expires_at = newest[operation] + retention
        restored = all(e.state == TrashEntry.RESTORED for e in batches)
        rows.append(
            TrashRow(
                operation=operation,
                entry=batches[0],
                entries=batches,
                sessions=shown,
                more=max(0, sum(e.session_count for e in batches) - len(shown)),
                expires_at=expires_at,
                expired=not restored and expires_at <= now,
                job_running=batches[0].job_id in running_jobs,
                cascade_running=not batches[0].job_id and operation in writing,
                hold=held[operation].hold.describe() if operation in held else "",
                hold_id=held[operation].hold.id if operation in held else None,
                held_session=held[operation].session_id if operation in held else "",
                part_sessions=parts,
                merges=waiting.get(operation, ()),
                parents_in=parents.get(operation, ()),
                rows_in=part_rows.get(operation, ()),
            )
        )
    context = {
        "q": q,
        "total": page.total,
        "rows": rows,
        "page_problem": page_problem,
        "problems": list(problems),
        "trash_days": days,
        "purge_reason": purge_reason,
        "purge_scope": purge_scope,
        # What each choice of the purge form drops (whole operations, as listed here), and
        # how large it is: a large purge asks its number of sessions typed, as a delete does.
        **_purge_choices(days, held),
        # Operations a legal hold keeps: no purge drops them.
        "held_count": len(held),
        # Keyset pages (ledger.trash_page): the newest, and the next older one.
        "first_url": _trash_url(q) if after is not None else None,
        "next_url": _trash_url(q, page.next_cursor) if page.next_cursor else None,
    }
    return render(request, fragment(request, TRASH_TEMPLATE, "entries"), context, status=status)


@require_GET
@require_perm(DELETE)
def trash(request: HtmxHttpRequest) -> HttpResponse:
    """Deleted rows, restorable until purged; searchable by session id. ``?after=`` is a
    page's cursor; a link of the old numbered pages (``?page=``) shows the newest."""
    problems = [NUL_SEARCH] if "\x00" in (request.GET.get("q") or "") else []
    token = (request.GET.get("after") or "").strip()
    after = decode_trash_cursor(token) if token else None
    bad_cursor = bool(token) and after is None
    return _render_trash(
        request,
        q=SearchTermField().clean(request.GET.get("q")),
        after=after,
        page_problem=BAD_CURSOR if bad_cursor else "",
        status=400 if bad_cursor else 200,
        problems=problems,
    )


@require_POST
@require_perm(DELETE)
def trash_restore(request: HtmxHttpRequest, entry_id: int) -> HttpResponse:
    entry = TrashEntry.objects.defer("payload").filter(pk=entry_id).first()
    if entry is None:
        refuse(
            request,
            AuditAction.RESTORE,
            f"no trash entry #{entry_id}",
            before={"trash_entry": entry_id},
        )
        raise Http404("No such trash entry")
    form = TrashRestoreForm(request.POST)
    form.is_valid()  # only the search to go back to, which is never refused
    back = _trash_url(form.cleaned_data["q"])
    if entry.state == TrashEntry.RESTORED:
        messages.info(request, f"Trash entry #{entry.pk} was already restored.")
        return redirect(back)
    first = TrashEntry.objects.filter(operation=entry.operation).order_by("pk").first() or entry
    sessions, restored_messages = actions.restore_size(entry_id=entry.pk)
    # Too long for the request: the worker restores it; its job page follows it.
    as_job = restore_runs_as_job(sessions=sessions, messages=restored_messages)
    run = actions.start_restore if as_job else actions.restore
    result = attempt(
        request,
        AuditAction.RESTORE,
        lambda: run(actor=request.user, entry_id=entry.pk),
        message="Nothing was restored: ",
    )
    if isinstance(result, Refused):
        return redirect(back)
    if as_job:
        messages.success(
            request,
            f"Restoring {plural(sessions, 'session')} and {plural(restored_messages, 'message')} "
            f"from trash entry #{first.pk} in the background (job #{result}).",
        )
        return redirect_to(request, reverse("job_detail", kwargs={"job_id": result}))
    batches = len(result.trash_entry_ids)
    # A restore of parts takes the operation holding their session's row with it: name each.
    firsts = sorted(
        TrashEntry.objects.filter(pk__in=result.trash_entry_ids)
        .values("operation")
        .annotate(first=Min("pk"))
        .values_list("first", flat=True)
    )
    if len(firsts) > 1:
        whole = f" (their whole operations: {batches} batches)."
        source = "trash entries " + " and ".join(f"#{pk}" for pk in firsts)
    else:
        whole = f" (the whole operation: {batches} batches)." if batches > 1 else "."
        source = f"trash entry #{first.pk}"
    messages.success(
        request,
        f"Restored {plural(len(result.restored_sessions), 'session')} and "
        f"{plural(result.restored_messages, 'message')} from {source}{whole}",
    )
    if result.waiting_links:
        waits_for = sorted({link.entry_id for link in result.waiting_links})
        messages.warning(
            request,
            f"{plural(len(result.waiting_links), 'session')} came back without "
            f"{'its parent' if len(result.waiting_links) == 1 else 'their parents'}, which "
            f"{'is' if len(waits_for) == 1 else 'are'} still in the trash: restore "
            + ", ".join(f"#{entry_id}" for entry_id in waits_for)
            + " to link them again ("
            + "; ".join(link.describe() for link in result.waiting_links[:5])
            + ").",
        )
    if result.lost_links:
        messages.warning(
            request,
            "These links could not be put back, the parent is no longer in the store or the "
            "trash: " + "; ".join(link.describe() for link in result.lost_links[:20]) + ".",
        )
    if result.skipped_conversations:
        messages.warning(
            request,
            "These conversation slugs were taken again meanwhile and stay with their new "
            "session: " + ", ".join(result.skipped_conversations[:20]),
        )
    return redirect(back)


@dataclass(frozen=True)
class PurgeSize:
    """What one choice of the purge form drops: whole operations, their sessions and messages."""

    operations: int
    sessions: int
    messages: int

    @property
    def asked(self) -> TypedConfirmation | None:
        return typed_confirmation(sessions=self.sessions, messages=self.messages)


def purge_size(days: float | None, held: dict | None = None) -> PurgeSize:
    """The size of a purge of the expired operations (``days``) or of all (None), now."""
    everything, expired = purge_sizes(
        older_than_days=days or 0, held=held_trash() if held is None else held
    )
    return PurgeSize(**asdict(everything if days is None else expired))


def _purge_choices(days: float, held: dict) -> dict:
    sizes = purge_sizes(older_than_days=days, held=held)
    everything, expired = (PurgeSize(**asdict(size)) for size in sizes)
    return {
        "purgeable_count": everything.operations,
        "expired_count": expired.operations,
        "purge_all": everything,
        "purge_expired": expired,
    }


def _purge_confirmation_problem(form: TrashPurgeForm, scope: str, size: PurgeSize) -> str | None:
    """Why the form does not confirm this purge (None: it does). Every purge of everything
    needs the "permanently" tick; one of 20 sessions or 1,000 messages (the delete's rule)
    needs its number of sessions typed."""
    if scope == "all" and not form.cleaned_data.get("confirm_purge"):
        return (
            "Tick the box saying the whole trash is purged permanently: its entries can "
            "no longer be restored. Nothing was purged."
        )
    if problem := typed_count_problem(form, size.asked):
        return problem.replace("this deletes", "this purge drops").replace(
            "Nothing was deleted.", "Nothing was purged."
        )
    return None


@require_POST
@require_perm(DELETE)
def trash_purge(request: HtmxHttpRequest) -> HttpResponse:
    """Drop trash entries for good: the expired ones, or everything."""
    form = TrashPurgeForm(request.POST)
    form.is_valid()  # what is valid is in cleaned_data; refuse_form says the rest
    q = form.cleaned_data["q"]
    scope = form.cleaned_data.get("scope") or "expired"
    reason = form.cleaned_data.get("reason", form.shown_back("reason"))
    days = configured_days() if scope == "expired" else None
    refused = refuse_form(request, AuditAction.PURGE_TRASH, form)
    if refused is None and (problem := _purge_confirmation_problem(form, scope, purge_size(days))):
        refused = refuse(request, AuditAction.PURGE_TRASH, problem)
    report = refused or attempt(
        request,
        AuditAction.PURGE_TRASH,
        lambda: actions.purge(actor=request.user, older_than_days=days, reason=reason),
    )
    if isinstance(report, Refused):
        problems = report.said("Nothing was purged: ")
        return _render_trash(
            request, q=q, problems=problems, purge_reason=reason, purge_scope=scope
        )
    messages.success(
        request,
        f"Purged {plural(report.purged, 'trash entry', 'trash entries')}"
        + (f" older than {plural_days(days)}" if days is not None else "")
        + "; they can no longer be restored.",
    )
    if report.kept:
        messages.warning(request, report.kept_text())
    return redirect("trash")
