"""The audit log as the console and the API read it: its filters, each entry in words, its CSV.

Reads only (the ledger's entries). ``AuditFilterForm`` validates the filters once for both
doors (the console shows an invalid filter and leaves it out; the API refuses it, naming the
field); ``filtered`` is the entries they match, newest first; ``readable`` says an entry's
before and after in words, its identifiers linked by a ``NoLinks`` subclass where a page links
them (console.views.audit.Links); ``csv_lines`` is the export, the same columns at both doors,
every cell a spreadsheet would run as a formula quoted. What an entry shows depends on its
reader: ``as_shown`` blanks what ``signin.roles.withheld_from`` withholds from their role (a
legal hold's details from a viewer, an erasure's reference from all but admins), at every door.
"""

from __future__ import annotations

import contextvars
import copy
import csv
import datetime as dt
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms

from sessions_admin.ledger.models import AuditEntry, AuditSession

SESSION_LINKS_SHOWN = 12  # session ids linked per audit entry before "and N more"
VALUES_SHOWN = 12  # items of a list value named before "and N more"
VALUE_CHARS = 200  # of one value in words
# Set while the CSV export words an entry: its ``changes`` column names every value whole (a
# spreadsheet has room for them; the page, which cuts them, links to the entry's JSON).
_WHOLE_VALUES = contextvars.ContextVar("audit_whole_values", default=False)
EXPORT_CHUNK = 500  # entries read at a time while the CSV streams
# A spreadsheet runs a cell starting with one of these as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
AUDIT_SESSION_MAX = 200  # a session id filtered for (longer ones are not session ids)


# --- filters ----------------------------------------------------------------------------------


class AuditFilterForm(forms.Form):
    """The audit log's filters (a GET form): invalid ones are left out and shown as errors."""

    action = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=150)
    session = forms.CharField(required=False, max_length=AUDIT_SESSION_MAX)
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *AuditEntry.OUTCOMES])
    since = forms.DateField(
        required=False, label="from", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="to", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        known = AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct()
        self.fields["action"].choices = [("", "any")] + [(a, a) for a in known]


@dataclass(frozen=True)
class Filtered:
    form: AuditFilterForm
    entries: object  # the matching AuditEntry queryset, newest first
    session_id: str
    filtered: bool


def filtered(params: Mapping[str, Any] | None) -> Filtered:
    """The entries the filters in ``params`` match (the page, its CSV export, the API)."""
    form = AuditFilterForm(params or None)
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


# --- what a reader is shown -------------------------------------------------------------------


@dataclass(frozen=True)
class Withheld:
    """What of an audit entry (or a legal hold) its reader is not shown, and the words said
    in its place; falsy when nothing is withheld. ``signin.roles.withheld_from`` says which."""

    fields: frozenset[str] = frozenset()
    words: str = ""

    def __bool__(self) -> bool:
        return bool(self.fields)


NOTHING_WITHHELD = Withheld()
# An audit entry's fields a Withheld may name (of a hold: id, kind, subject, reason).
ENTRY_DETAILS = frozenset({"before", "after", "reason", "detail"})


def as_shown(entry: AuditEntry, withheld: Withheld) -> AuditEntry:
    """The entry as its reader is shown it: a copy (never saved) whose withheld fields are
    blank (``before``/``after`` None, ``reason``/``detail`` empty), with ``details_withheld``
    the words said instead ("" when nothing is withheld, the entry itself returned)."""
    if not withheld:
        entry.details_withheld = ""
        return entry
    shown = copy.copy(entry)
    for name in withheld.fields & ENTRY_DETAILS:
        setattr(shown, name, None if name in ("before", "after") else "")
    shown.details_withheld = withheld.words
    return shown


# Which fields of which entry a reader is not shown: by the entry's action (``withheld_from``
# bound to the reader's role). Every door passes one; there is no default that shows all.
WithheldFor = Callable[[str], Withheld]


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


class NoLinks:
    """Where an entry's identifiers lead: nowhere (the CSV export, the API); a page that
    links them subclasses this."""

    def session(self, session_id: str) -> str | None:
        return None

    def job(self, job_id) -> str | None:
        return None

    def trash(self, entry_id) -> str | None:
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
        limit = None if _WHOLE_VALUES.get() else VALUES_SHOWN
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


def readable(entry: AuditEntry, links: NoLinks) -> Readable:
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

    # The page links the first few sessions ("and N more"); the CSV names every one.
    shown = None if _WHOLE_VALUES.get() else SESSION_LINKS_SHOWN
    for sid in ids[:shown]:
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
        for sid in ids[:shown]:
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
                if key in mentions or shown is None or len(mentions) < shown:
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
    trash_said: list[list] = []  # the same entries before and after are said once
    for side, values in (("after", after), ("before", before)):
        for key in TRASH_KEYS:
            entries = values.get(key)
            if entries is None or (side, key) in used:
                continue
            used.add((side, key))
            entries = entries if isinstance(entries, list) else [entries]
            if entries in trash_said:
                continue
            trash_said.append(entries)
            parts: list[Part] = []
            limit = None if _WHOLE_VALUES.get() else VALUES_SHOWN
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
    if getattr(entry, "details_withheld", ""):
        say("Details", Part(entry.details_withheld))
    return Readable(list(mentions.values()), len(set(ids) - set(mentions)), changes)


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


def export_row(entry: AuditEntry, links: NoLinks, withheld_for: WithheldFor) -> list[str]:
    """One CSV row: the entry as the reader is shown it (``as_shown``), a withheld reason
    saying so in its cell."""
    entry = as_shown(entry, withheld_for(entry.action))
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
            f"({entry.details_withheld})" if entry.details_withheld else entry.reason,
            entry.detail,
            json.dumps(entry.before, **raw) if entry.before else "",
            json.dumps(entry.after, **raw) if entry.after else "",
        ]
    ]


def csv_lines(entries, *, withheld_for: WithheldFor) -> Iterator[str]:
    """The export's lines, each entry as the reader is shown it (``withheld_for``)."""
    writer = csv.writer(_Line())
    links = NoLinks()
    yield writer.writerow(EXPORT_COLUMNS)
    for entry in entries.iterator(chunk_size=EXPORT_CHUNK):
        yield writer.writerow(export_row(entry, links, withheld_for))
