"""The audit log (filtered, paginated, exported as CSV) and one session's history.

All only read: the ledger's entries and the core's merge records. Each entry's
before/after is shown in words (``readable``): every session once, with what the
action did to it, and links to what the entry made (a merge, a job, trash entries);
the raw JSON stays one click away. Undoing a merge listed here posts to the merge
screen (``merge_undo``).
"""

from __future__ import annotations

import contextvars
import csv
import datetime as dt
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from sessions_admin import core
from sessions_admin.console.forms import AuditFilterForm
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    require_perm,
    session_url,
    wants_fragment,
)
from sessions_admin.ledger.models import AuditEntry, AuditSession, TrashEntry
from sessions_admin.signin.roles import DELETE, OPERATE, VIEW

AUDIT_TEMPLATE = "console/audit.html"

AUDIT_PAGE_SIZE = 50
HISTORY_ENTRIES = 20  # entries in the session history fragment
SESSION_LINKS_SHOWN = 12  # session ids linked per audit entry before "and N more"
JSON_INLINE_CHARS = 140  # before/after shown inline up to this length, folded beyond
VALUES_SHOWN = 12  # items of a list value named before "and N more"
VALUE_CHARS = 200  # of one value in words
# Set while the CSV export words an entry: its ``changes`` column names every value whole (a
# spreadsheet has room for them; the page, which cuts them, links to the entry's JSON).
_WHOLE_VALUES = contextvars.ContextVar("audit_whole_values", default=False)


def _items_shown() -> int | None:
    return None if _WHOLE_VALUES.get() else VALUES_SHOWN


EXPORT_CHUNK = 500  # entries read at a time while the CSV streams
# A spreadsheet runs a cell starting with one of these as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _compact_json(value) -> dict:
    if not value:
        return {"empty": True}
    inline = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    if len(inline) <= JSON_INLINE_CHARS:
        return {"empty": False, "inline": inline, "full": None}
    return {
        "empty": False,
        "inline": inline[:JSON_INLINE_CHARS] + "…",
        "full": json.dumps(value, sort_keys=True, ensure_ascii=False, indent=2),
    }


def _merge_state(merge_id) -> dict | None:
    try:
        record = core.merge_record(merge_id=int(merge_id))
    except (core.MergeNotFound, TypeError, ValueError):
        return None
    return {
        "id": record.merge_id,
        "undone": record.undone_at is not None,
        "lost": record.undo_lost,
        "closed": record.closed_by_erasure,
    }


# --- an entry in words ------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """A piece of a readable value: words, or an identifier (linked where the reader may go)."""

    text: str
    url: str | None = None
    code: bool = False


@dataclass(frozen=True)
class Change:
    label: str
    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return f"{self.label}: {''.join(p.text for p in self.parts)}"


@dataclass
class Mention:
    """One session an entry names, once, with what the action did to it."""

    id: str
    url: str | None
    roles: list[str] = field(default_factory=list)
    change: str = ""

    @property
    def text(self) -> str:
        said = ", ".join(filter(None, [", ".join(self.roles), self.change]))
        return f"{self.id} ({said})" if said else self.id


@dataclass(frozen=True)
class Readable:
    sessions: list[Mention]
    more_sessions: int
    changes: list[Change]

    @property
    def text(self) -> str:
        """The whole entry in one line of words (the CSV export's column)."""
        return "; ".join([*(m.text for m in self.sessions), *(c.text for c in self.changes)])


class Links:
    """Where an entry's identifiers lead; links only to pages the reader may open."""

    def __init__(self, *, can_delete: bool, trash: dict[int, str] | None = None):
        self.can_delete = can_delete
        self.trash_sessions = trash or {}  # trash entry id: a session it holds (the search)

    def session(self, session_id: str) -> str | None:
        return session_url(session_id)

    def job(self, job_id) -> str | None:
        if not self.can_delete:
            return None
        try:
            return reverse("job_detail", args=[int(job_id)])
        except (NoReverseMatch, TypeError, ValueError, OverflowError):
            return None

    def trash(self, entry_id) -> str | None:
        if not self.can_delete:
            return None
        try:
            entry_id = int(entry_id)
        except (TypeError, ValueError):
            return None
        found = self.trash_sessions.get(entry_id)
        query = "?" + urlencode({"q": found}) if found else ""
        return reverse("trash") + query + f"#trash-{entry_id}"

    def merge(self, merge_id, target) -> str | None:
        if not isinstance(target, str) or not target:
            return None
        return reverse("audit_log") + "?" + urlencode({"session": target}) + f"#merge-{merge_id}"


class TextOnly(Links):
    """No links at all (the CSV export)."""

    def __init__(self):
        super().__init__(can_delete=False)

    def session(self, session_id: str) -> str | None:
        return None

    def merge(self, merge_id, target) -> str | None:
        return None


# What a key of before/after says a session was to the action (after's win over before's).
SESSION_ROLES_AFTER = {
    "ended": "ended",
    "new": "started",
    "resumed": "resumed",
    "switched_from": "switched away from",
    "target": "kept (the target)",
    "from": "moved from",
    "to": "moved to",
}
SESSION_ROLES_BEFORE = {"live": "was live", "ref": "asked for"}
TRASH_KEYS = ("trash_entries", "trash_entry")
LABELS = {
    "moved_messages": "Moved",
    "returned_messages": "Returned",
    "deleted_sessions": "Deleted sessions",
    "deleted_messages": "Deleted messages",
    "restored_sessions": "Restored sessions",
    "restored_messages": "Restored messages",
    "message_count": "Active messages now",
    "session_key": "Chat (session key)",
    "left_to_gateway": "Next session left to the gateway",
    "purged_entries": "Purged trash entries",
    "older_than_days": "Older than (days)",
    "include_live": "Live sessions included",
}


def _words(value) -> str:
    """A before/after value in words (a list is named item by item, a mapping as JSON)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        limit = _items_shown()
        shown = ", ".join(_words(v) for v in value[:limit])
        more = f" and {len(value) - limit} more" if limit and len(value) > limit else ""
        return (shown + more) or "none"
    if isinstance(value, dict):
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    else:
        text = str(value)
    if _WHOLE_VALUES.get() or len(text) <= VALUE_CHARS:
        return text
    return text[:VALUE_CHARS] + "…"


def _identifier(value) -> str:
    """An id an entry recorded (a merge, a job, a trash entry), as its number."""
    return str(value)[:40]


def _state(counts: dict) -> str:
    ended = counts.get("ended")
    return "live" if ended is None else f"ended ({ended})"


def _session_change(before, after) -> str:
    """A session's counts before and after (``ledger.actions._counts``) in words."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    if not after or not before:
        # Counted on one side only: say which, so a "before" is not read as now.
        return ("before: " if before else "after: ") + _session_change(
            before or after, before or after
        )
    said = []
    b, a = before.get("messages"), after.get("messages")
    if b is not None and a is not None and b != a:
        said.append(f"{_words(b)} → {_words(a)} messages")
    elif a is not None or b is not None:
        n = a if a is not None else b
        said.append(f"{_words(n)} message{'' if n == 1 else 's'}")
    if "ended" in before and "ended" in after and before["ended"] != after["ended"]:
        said.append(f"{_state(before)} → {_state(after)}")
    elif "ended" in after or "ended" in before:
        said.append(_state(after if "ended" in after else before))
    return ", ".join(said)


def _is_counts(value) -> bool:
    return isinstance(value, dict) and bool(value) and set(value) <= {"messages", "ended"}


def _message_span(ids) -> str:
    ids = [i for i in ids if isinstance(i, int)] if isinstance(ids, list) else []
    if not ids:
        return "none"
    span = f"#{ids[0]}" if len(ids) == 1 else f"#{ids[0]}–#{ids[-1]}"
    return f"{span} ({len(ids):,} message{'s' if len(ids) != 1 else ''})"


def readable(entry: AuditEntry, links: Links) -> Readable:
    """What an entry's before and after say, in words: each session once with its part in
    the action (and its counts before → after), then every other fact, linked."""
    before = entry.before if isinstance(entry.before, dict) else {}
    after = entry.after if isinstance(entry.after, dict) else {}
    ids = [str(sid) for sid in (entry.session_ids or [])]
    mentions: dict[str, Mention] = {}

    def mention(sid: str) -> Mention:
        if sid not in mentions:
            mentions[sid] = Mention(sid, links.session(sid))
        return mentions[sid]

    for sid in ids[:SESSION_LINKS_SHOWN]:
        mention(sid)
    used: set[tuple[str, str]] = set()  # (side, key) said already

    # Each session's part in the action: after's keys first, before's only for a session
    # after does not name (a reset's "live" is the session it "ended").
    for key, role in SESSION_ROLES_AFTER.items():
        sid = after.get(key)
        if isinstance(sid, str) and sid:
            mention(sid).roles.append(role)
            used.add(("after", key))
        elif key in after and sid is None and key in ("ended", "switched_from"):
            used.add(("after", key))  # nothing ended or switched: said by the other roles
    for key, role in SESSION_ROLES_BEFORE.items():
        sid = before.get(key)
        if isinstance(sid, str) and sid and (sid in mentions or key == "live"):
            if not mention(sid).roles:
                mention(sid).roles.append(role)
            used.add(("before", key))
    if entry.action == "merge":
        for sid in ids[:SESSION_LINKS_SHOWN]:
            if not mentions[sid].roles:
                mentions[sid].roles.append("merged in")
    closed = after.get("closed_recoverable")
    if isinstance(closed, dict):
        for sid, ends in closed.items():
            ends = ends if isinstance(ends, dict) else {}
            m = mention(str(sid))
            m.roles.append("re-ended so a gateway cannot reopen it")
            m.change = f"{ends.get('end_reason_before')} → {ends.get('end_reason')}"
        used |= {("after", "closed_recoverable"), ("before", "recoverable_siblings")}
    siblings = before.get("recoverable_siblings")
    if isinstance(siblings, dict) and ("before", "recoverable_siblings") not in used:
        for sid, reason in siblings.items():
            mention(str(sid)).roles.append(f"could be reopened by a gateway ({reason})")
        used.add(("before", "recoverable_siblings"))
    # Counts of sessions before and after (``_counts``).
    for side, values in (("before", before), ("after", after)):
        for key, value in values.items():
            if _is_counts(value):
                used.add((side, key))
                if key in mentions or len(mentions) < SESSION_LINKS_SHOWN:
                    mention(key)
    # An undo, redo or retry records the one session's active count after it: its counts
    # read before → after.
    if isinstance(after.get("message_count"), int) and len(ids) == 1 and ids[0] in mentions:
        counted = before.get(ids[0])
        if _is_counts(counted) and not _is_counts(after.get(ids[0])):
            after = {**after, ids[0]: {**counted, "messages": after["message_count"]}}
            used |= {("after", "message_count"), ("after", ids[0])}
    for sid, m in mentions.items():
        if not m.change and (_is_counts(before.get(sid)) or _is_counts(after.get(sid))):
            m.change = _session_change(before.get(sid), after.get(sid))

    changes: list[Change] = []

    def say(label: str, *parts: Part) -> None:
        changes.append(Change(label, parts))

    merge_id = after.get("merge_id", before.get("merge_id"))
    if merge_id is not None:
        used |= {("after", "merge_id"), ("before", "merge_id")}
        target = after.get("target") or (ids[0] if ids else None)
        say("Merge", Part(f"#{_identifier(merge_id)}", links.merge(merge_id, target), code=True))
    job = after.get("job", before.get("job"))
    if job is not None:
        used |= {("after", "job"), ("before", "job")}
        say("Job", Part(f"#{_identifier(job)}", links.job(job), code=True))
    for side, values in (("after", after), ("before", before)):
        for key in TRASH_KEYS:
            entries = values.get(key)
            if entries is None or (side, key) in used:
                continue
            used.add((side, key))
            entries = entries if isinstance(entries, list) else [entries]
            parts: list[Part] = []
            limit = _items_shown()
            for n, trash_id in enumerate(entries[:limit]):
                if n:
                    parts.append(Part(", "))
                parts.append(Part(f"#{_identifier(trash_id)}", links.trash(trash_id), code=True))
            if limit and len(entries) > limit:
                parts.append(Part(f" and {len(entries) - limit} more"))
            say("Trash entries" if len(entries) != 1 else "Trash entry", *(parts or [Part("none")]))
            used.add((side, "trash_operation"))
    for key in ("message_ids", "returned_ids"):
        if key in after:
            used.add(("after", key))
            first = after[key][0] if isinstance(after[key], list) and after[key] else None
            # Where the messages are now: a stray move's destination, else the first session.
            where = after.get("to") if key == "message_ids" and "to" in after else None
            where = where or (ids[0] if ids else None)
            url = None
            if isinstance(first, int) and isinstance(where, str) and links.session(where):
                url = f"{links.session(where)}?around={first}#m{first}"
            say("Messages", Part(_message_span(after[key]), url))
    # Everything else: before → after where both say it, else what was said.
    keys = list(dict.fromkeys([*before, *after]))
    for key in keys:
        in_before = key in before and ("before", key) not in used
        in_after = key in after and ("after", key) not in used
        if not (in_before or in_after):
            continue
        label = LABELS.get(key, str(key).replace("_", " ").capitalize())
        if in_before and in_after and before[key] != after[key]:
            say(label, Part(f"{_words(before[key])} → {_words(after[key])}"))
        elif in_after:
            say(label, Part(_words(after[key])))
        else:
            say(label, Part(_words(before[key])))
    shown = list(mentions.values())
    return Readable(shown, len(set(ids) - set(mentions)), changes)


def _trash_searches(entries: Iterable[AuditEntry]) -> dict[int, str]:
    """For each trash entry the entries name, a session it holds (the trash page's search)."""
    wanted: set[int] = set()
    for entry in entries:
        for side in (entry.before, entry.after):
            if not isinstance(side, dict):
                continue
            for key in TRASH_KEYS:
                value = side.get(key)
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, int) and not isinstance(item, bool):
                        wanted.add(item)
    if not wanted:
        return {}
    found = TrashEntry.objects.filter(pk__in=list(wanted)[:1000]).values_list("pk", "session_ids")
    return {pk: ids[0] for pk, ids in found if isinstance(ids, list) and ids}


def _entry_rows(entries: Sequence[AuditEntry], *, can_delete: bool = False) -> list[dict]:
    links = Links(can_delete=can_delete, trash=_trash_searches(entries) if can_delete else {})
    rows = []
    for entry in entries:
        merge = None
        if entry.action == "merge" and entry.outcome == "ok" and isinstance(entry.after, dict):
            merge = _merge_state(entry.after.get("merge_id"))
        words = readable(entry, links)
        rows.append(
            {
                "entry": entry,
                "sessions": words.sessions,
                "more_sessions": words.more_sessions,
                "changes": words.changes,
                "before": _compact_json(entry.before),
                "after": _compact_json(entry.after),
                "merge": merge,
            }
        )
    return rows


def _merge_rows(session_id: str) -> list[dict]:
    return [
        {
            "record": record,
            "target_url": session_url(record.target_id),
            "absorbed": [{"id": sid, "url": session_url(sid)} for sid in record.absorbed_ids],
            "undone": record.undone_at is not None,
            "closed": record.closed_by_erasure,
        }
        for record in core.merges_of_session(session_id=session_id)
    ]


def _entries_of_session(session_id: str):
    return AuditEntry.objects.filter(
        pk__in=AuditSession.objects.filter(session_id=session_id).values("entry_id")
    )


@dataclass(frozen=True)
class Filtered:
    form: AuditFilterForm
    entries: object  # the matching AuditEntry queryset, newest first
    session_id: str
    filtered: bool


def _filtered(request: HtmxHttpRequest) -> Filtered:
    """The entries the filters match (the page and its CSV export share them)."""
    form = AuditFilterForm(request.GET or None)
    entries = AuditEntry.objects.all()
    cleaned: dict = {}
    if form.is_bound:
        form.is_valid()  # invalid fields are left out of cleaned_data and shown as errors
        cleaned = form.cleaned_data
    if cleaned.get("action"):
        entries = entries.filter(action=cleaned["action"])
    if cleaned.get("actor"):
        entries = entries.filter(actor_name__icontains=cleaned["actor"].strip())
    session_id = (cleaned.get("session") or "").strip()
    if session_id:
        entries = entries.filter(
            pk__in=AuditSession.objects.filter(session_id=session_id).values("entry_id")
        )
    if cleaned.get("outcome"):
        entries = entries.filter(outcome=cleaned["outcome"])
    if cleaned.get("since"):
        entries = entries.filter(created_at__date__gte=cleaned["since"])
    if cleaned.get("until"):
        entries = entries.filter(created_at__date__lte=cleaned["until"])
    return Filtered(
        form=form,
        entries=entries.order_by("-created_at", "-id"),
        session_id=session_id,
        filtered=any(cleaned.get(name) for name in form.fields),
    )


def _export_url(request: HtmxHttpRequest) -> str:
    """The CSV export of what the page shows: its filters, every page."""
    query = request.GET.copy()
    query.pop("page", None)
    encoded = query.urlencode()
    return reverse("audit_export") + ("?" + encoded if encoded else "")


@require_GET
@require_perm(VIEW)
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    """The audit log, newest first, filtered and paginated."""
    found = _filtered(request)
    page = Paginator(found.entries, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "form": found.form,
        "page": page,
        "rows": _entry_rows(page.object_list, can_delete=request.user.has_perm(DELETE)),
        "session_filter": found.session_id,
        "session_filter_url": session_url(found.session_id),
        "merges": _merge_rows(found.session_id) if found.session_id else [],
        "can_operate": request.user.has_perm(OPERATE),
        "here": request.get_full_path(),
        "filtered": found.filtered,
        "export_url": _export_url(request),
    }
    return render(request, fragment(request, AUDIT_TEMPLATE, "audit-results"), context)


# --- CSV export -------------------------------------------------------------------------------

EXPORT_COLUMNS = [
    "id",
    "created_at",
    "completed_at",
    "actor",
    "client_address",
    "action",
    "outcome",
    "sessions",
    "changes",
    "reason",
    "detail",
    "before",
    "after",
]


def safe_cell(value) -> str:
    """A cell a spreadsheet shows as text: one starting like a formula gets a quote first."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class _Line:
    """csv.writer's file: each row written is handed back as a string to stream."""

    def write(self, value: str) -> str:
        return value


def _iso(moment) -> str:
    return moment.astimezone(dt.UTC).isoformat() if moment else ""


def _export_row(entry: AuditEntry, links: Links) -> list[str]:
    whole = _WHOLE_VALUES.set(True)
    try:
        words = readable(entry, links)
    finally:
        _WHOLE_VALUES.reset(whole)
    raw = {"ensure_ascii": False, "sort_keys": True}
    return [
        safe_cell(cell)
        for cell in [
            entry.pk,
            _iso(entry.created_at),
            _iso(entry.completed_at),
            entry.actor_name,
            entry.client_address or "",
            entry.action,
            entry.outcome,
            " ".join(str(sid) for sid in (entry.session_ids or [])),
            words.text,
            entry.reason,
            entry.detail,
            json.dumps(entry.before, **raw) if entry.before else "",
            json.dumps(entry.after, **raw) if entry.after else "",
        ]
    ]


def _csv_lines(entries) -> Iterator[str]:
    writer = csv.writer(_Line())
    links = TextOnly()
    yield writer.writerow(EXPORT_COLUMNS)
    for entry in entries.iterator(chunk_size=EXPORT_CHUNK):
        yield writer.writerow(_export_row(entry, links))


@require_GET
@require_perm(VIEW)
def audit_export(request: HtmxHttpRequest) -> StreamingHttpResponse:
    """The entries the audit log's filters match (every page), as CSV, newest first.

    Streamed as it is read. Every cell that a spreadsheet would run as a formula starts
    with a quote; before and after come as JSON, and in words in ``changes``.
    """
    found = _filtered(request)
    response = StreamingHttpResponse(
        _csv_lines(found.entries), content_type="text/csv; charset=utf-8"
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response


@require_GET
@require_perm(VIEW)
def session_history(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """One session's merges (with undo) and audit entries: a fragment for its detail page.

    Without htmx this is the audit log filtered to the session, which shows the same.
    """
    if "\x00" in session_id:
        raise Http404("No such session.")
    if not wants_fragment(request):
        return HttpResponseRedirect(reverse("audit_log") + "?" + urlencode({"session": session_id}))
    entries = _entries_of_session(session_id).order_by("-created_at", "-id")
    shown = list(entries[: HISTORY_ENTRIES + 1])
    here = request.htmx.current_url_abs_path or session_url(session_id) or reverse("audit_log")
    context = {
        "history_session": session_id,
        "rows": _entry_rows(shown[:HISTORY_ENTRIES], can_delete=request.user.has_perm(DELETE)),
        "history_more": len(shown) > HISTORY_ENTRIES,
        "history_all_url": reverse("audit_log") + "?" + urlencode({"session": session_id}),
        "merges": _merge_rows(session_id),
        "can_operate": request.user.has_perm(OPERATE),
        "here": here,
    }
    return render(request, f"{AUDIT_TEMPLATE}#session-history", context)
