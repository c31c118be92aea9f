"""The fields every POST of the console is validated with, and the forms built from them.

Operator text follows one rule (``core.text``): these fields apply it while the form is
cleaned, so a NUL, a lone surrogate, an over-long or a blank required text is refused
with the rule's own message before a view calls ``ledger.actions``, and nothing is
written. ``ledger.actions`` applies the same rule again to every argument (the door a
command or a runtime uses too); the form is where the message is shown next to the box.

Views do: ``form = SomeForm(request.POST)``; ``if not form.is_valid(): ...
form.problem()``; then call ``ledger.actions`` with ``form.cleaned_data``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.retention import MAX_DAYS, MIN_DAYS, check_days
from sessions_admin.core.text import (
    IDENTIFIER_MAX,
    REASON_MAX,
    SUMMARY_MAX,
    operator_identifier,
    operator_text,
    shown_back,
)

TRUE_WORDS = frozenset({"1", "on", "true", "yes"})


class OperatorTextField(forms.CharField):
    """Free text an operator types (a reason, a summary), checked by ``core.text``'s rule.

    ``word`` names the field in messages ("Give a reason: ..."). ``required`` refuses
    blank text with the rule's message; Django's own required check is not used, so
    every refusal reads the same whatever the view.
    """

    def __init__(
        self, *, word: str = "reason", max_length: int = REASON_MAX, required: bool = False, **kw
    ):
        self.word = word
        self.text_max = max_length
        self.text_required = required
        super().__init__(required=False, strip=False, **kw)

    def clean(self, value: Any) -> str:
        try:
            return operator_text(
                value, field=self.word, max_length=self.text_max, required=self.text_required
            )
        except InvalidInput as problem:
            raise ValidationError(str(problem), code="operator_text") from problem


class ReasonField(OperatorTextField):
    def __init__(self, *, required: bool = True, **kw):
        super().__init__(word="reason", required=required, **kw)


class IdentifierField(forms.CharField):
    """What names a thing (a session id, a fingerprint, a digest): taken exactly as given,
    refused if neither database could store it."""

    def __init__(
        self, *, word: str = "session id", max_length: int = IDENTIFIER_MAX, required=True, **kw
    ):
        self.word = word
        self.identifier_max = max_length
        self.identifier_required = required
        super().__init__(required=False, strip=False, **kw)

    def clean(self, value: Any) -> str | None:
        if isinstance(value, str):
            value = value.strip()
        try:
            return operator_identifier(
                value,
                field=self.word,
                max_length=self.identifier_max,
                required=self.identifier_required,
            )
        except InvalidInput as problem:
            raise ValidationError(str(problem), code="identifier") from problem


class FlagField(forms.Field):
    """A checkbox or hidden flag: "1", "on", "true" or "yes" (any case) is set, anything else not."""

    def __init__(self, **kw):
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> bool:
        return isinstance(value, str) and value.strip().lower() in TRUE_WORDS


# A whole number as typed: plain digits, or grouped by thousands with commas or spaces as the
# page prints it ("1,234", "1 234"); "2,1" or "1,2,3" is no number (it would read as 21 or 123).
TYPED_COUNT = re.compile(r"[0-9]{1,12}|[0-9]{1,3}(?:,[0-9]{3}){1,3}|[0-9]{1,3}(?: [0-9]{3}){1,3}")


class TypedCountField(forms.Field):
    """A number the operator typed to confirm ("1,234" and "1 234" read as 1234, spaces
    around it ignored); None if nothing or anything else was typed (the view says what to
    type)."""

    def __init__(self, **kw):
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> int | None:
        if not isinstance(value, str):
            return None
        value = value.strip(" \t")
        if not TYPED_COUNT.fullmatch(value):
            return None
        return int(value.replace(",", "").replace(" ", ""))


class PicksField(forms.Field):
    """Picked session ids (repeated ``ids`` values, and optionally ids typed in a box),
    stripped, in order, without repeats; each must be storable."""

    widget = forms.MultipleHiddenInput

    def __init__(self, *, word: str = "session id", **kw):
        self.word = word
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> list[str]:
        values = value if isinstance(value, list | tuple) else ([value] if value else [])
        picked: list[str] = []
        for raw in values:
            if not isinstance(raw, str) or not raw.strip():
                continue
            try:
                picked.append(operator_identifier(raw.strip(), field=self.word))
            except InvalidInput as problem:
                raise ValidationError(str(problem), code="identifier") from problem
        return list(dict.fromkeys(picked))


class ConsoleForm(forms.Form):
    """A form whose first problem is the one message a view shows."""

    def problem(self) -> str | None:
        if self.is_valid():
            return None
        for errors in self.errors.values():
            for error in errors:
                return str(error)
        return "The form was not valid."

    def shown_back(self, name: str) -> str:
        """What the operator typed in ``name``, storable and bounded, to show again."""
        return shown_back(self.data.get(name))


class ReasonForm(ConsoleForm):
    """An action whose only input is a required reason."""

    reason = ReasonField()


class OptionalReasonForm(ConsoleForm):
    """An action whose only input is an optional reason (support actions: undo, resume...)."""

    reason = ReasonField(required=False)


# --- the deletion screens (console/views/delete.py, jobs.py, trash.py) -----------------------


def form_problems(form: forms.Form) -> list[str]:
    """Every problem of a form, in the order of its fields (a page that lists them all)."""
    return [str(error) for errors in form.errors.values() for error in errors]


DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class NumberField(forms.Field):
    """A decimal number given in a form (an age in days, a dry run's cutoff instant); None if
    nothing, something else or no finite number was given (the view says what to give)."""

    def __init__(self, **kw):
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> float | None:
        text = value.strip() if isinstance(value, str) else ""
        # Python's float() also reads "1_0" as 10 and non-ASCII digits: a form takes a plain
        # decimal number only.
        if not text or len(text) > 32 or not DECIMAL.fullmatch(text):
            return None
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None


class SearchTermField(forms.Field):
    """A session id prefix searched for, shown again: stripped and cut to 200 characters, and
    "" for one holding a NUL (no stored id does, and PostgreSQL cannot compare with one)."""

    def __init__(self, **kw):
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> str:
        term = value.strip()[:200] if isinstance(value, str) else ""
        return "" if "\x00" in term else term


class CascadePlanForm(ConsoleForm):
    """Which cascade plan to show: with or without the conversation's branches."""

    include_branches = FlagField()


class CascadeConfirmForm(CascadePlanForm):
    """Deleting the cascade plan that was shown: its fingerprint, the number of sessions
    typed when the plan is large, the tick that a merge's undo is lost (when the plan
    touches one), and a reason. The view holds them against the plan."""

    fingerprint = IdentifierField(word="fingerprint", required=False)
    typed_count = TypedCountField()
    reason = ReasonField()
    # Ticked: the operator accepts that a merge this plan touches can no longer be undone.
    lose_undo = FlagField()


class BulkSelectionForm(ConsoleForm):
    """What a bulk delete's dry run is about: a token for sessions picked in the session
    list, or a preset with its parameters (the view knows the presets and what each
    parameter means). A source is compared exactly as given, so it is not stripped."""

    selection = IdentifierField(word="selection", required=False)
    preset = IdentifierField(word="preset", required=False)
    days = NumberField()
    source = forms.CharField(required=False, strip=False)
    include_live = FlagField()


class BulkStartForm(BulkSelectionForm):
    """Starting the job for the dry run that was shown: its cutoff instant (the "ended more
    than N days ago" preset), the digest of the set it showed, the tick for live sessions,
    the number of sessions typed when the set is large (the cascade's rule), and a reason."""

    cutoff = NumberField()
    digest = IdentifierField(word="digest", required=False)
    confirm_live = FlagField()
    typed_count = TypedCountField()
    reason = ReasonField()


class BulkPreviewForm(ConsoleForm):
    """Sessions picked in the session list, or all those matching its filter (the list's own
    query string, read by ``store.listing.parse`` like the list's URL)."""

    ids = PicksField()
    all_matching = FlagField()
    filter = forms.Field(required=False)


class JobCancelForm(OptionalReasonForm):
    """Stopping a bulk delete job after its current batch, with an optional reason."""


class JobResumeForm(OptionalReasonForm):
    """Finishing a failed bulk delete job from where it stopped, with an optional reason."""


class TrashRestoreForm(ConsoleForm):
    """Restoring a trash entry; the search to show again afterwards."""

    q = SearchTermField()


PURGE_SCOPE_PROBLEM = "Choose what to purge: expired entries only, or everything."


class TrashPurgeForm(ConsoleForm):
    """Purging the trash for good (the expired entries, or all of them), with a reason; all
    of them needs ``confirm_purge`` ticked, and a large purge its number of sessions typed."""

    scope = forms.ChoiceField(
        choices=[("expired", "expired entries"), ("all", "everything")],
        error_messages={"required": PURGE_SCOPE_PROBLEM, "invalid_choice": PURGE_SCOPE_PROBLEM},
    )
    typed_count = TypedCountField()
    confirm_purge = FlagField()
    reason = ReasonField()
    q = SearchTermField()


# --- the other screens (console/views/merge.py, audit.py, session_actions.py, stray.py,
# sessions.py) ---------------------------------------------------------------------------------


class NextField(forms.Field):
    """Where to go back to after an action, as posted ("" if none or not text); the view
    still checks that it is a page of this site."""

    def __init__(self, **kw):
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> str:
        return value if isinstance(value, str) and "\x00" not in value else ""


class MergeForm(ConsoleForm):
    """Merging the previewed sessions: the picks, the target, the preview's fingerprint.

    Sessions whose users, sources or keys differ also need the number of sessions merged
    into the target typed and a reason (the view holds them against the plan).
    """

    ids = PicksField()
    target = IdentifierField(word="target session id", required=False)
    fingerprint = IdentifierField(word="fingerprint", required=False)
    typed_count = TypedCountField()
    reason = ReasonField(required=False)
    continue_history = FlagField()  # a checkbox the preview ticks for API conversations


class UnmergeForm(ConsoleForm):
    reason = ReasonField(required=False)
    next = NextField()


class ResumeForm(ConsoleForm):
    """Resuming as the preflight showed: the session it reopens, the live session it
    switches away from ("" for none) and the plan's fingerprint, each as shown."""

    target = IdentifierField(word="target session id", required=False)
    switch_from = IdentifierField(word="live session id", required=False)
    fingerprint = IdentifierField(word="fingerprint", required=False)
    reason = ReasonField(required=False)


class ResetForm(ConsoleForm):
    """Resetting a chat: the summary that starts the new session, and the live session
    the page showed ("" for none)."""

    summary = OperatorTextField(word="summary", max_length=SUMMARY_MAX)
    live = IdentifierField(word="live session id", required=False)
    reason = ReasonField(required=False)


class RewriteForm(OptionalReasonForm):
    """Undo, redo or retry: an optional reason, and the previewed plan's fingerprint (a form
    without one acts on what the turn is now)."""

    fingerprint = IdentifierField(word="fingerprint", required=False)


class HoldForm(ConsoleForm):
    """Placing a legal hold: on a session (its whole lineage) or on a user, with a reason."""

    kind = forms.ChoiceField(
        choices=[
            ("session", "A session and its whole lineage"),
            ("user", "Every session of a user, with their lineage (delegates and children too)"),
        ],
        error_messages={"invalid_choice": "A hold is on a session or on a user."},
    )
    subject = IdentifierField(word="session or user id")
    reason = ReasonField()


class HoldReleaseForm(ReasonForm):
    """Releasing a legal hold needs a reason (kept in the audit log and on the hold)."""


class RetentionPolicyForm(ConsoleForm):
    """A new retention policy (created disabled; the page shows its dry run)."""

    name = OperatorTextField(word="name", max_length=200, required=True)
    source = OperatorTextField(word="source", max_length=200)
    older_than_days = NumberField()
    status = forms.ChoiceField(
        choices=[("ended", "ended"), ("empty", "empty")],
        error_messages={"invalid_choice": "Status is ended or empty."},
    )
    end_reason = OperatorTextField(word="end reason", max_length=200)
    title = forms.ChoiceField(
        choices=[("any", "any"), ("with", "with"), ("without", "without")],
        error_messages={"invalid_choice": "Title is any, with or without."},
    )
    mode = forms.ChoiceField(
        choices=[("trash", "trash"), ("purge", "purge")],
        error_messages={"invalid_choice": "A policy moves to the trash or purges."},
    )
    every_hours = NumberField()
    reason = ReasonField(required=False)

    def clean(self):
        data = super().clean()
        if "older_than_days" in data:
            days = data["older_than_days"]
            try:
                # The core's rule (the command and a stored policy are held to it too).
                check_days(days if days is not None else self.shown_back("older_than_days") or None)
            except InvalidInput as problem:
                self.add_error(
                    "older_than_days",
                    f"{problem} Give the number of days as a number from {MIN_DAYS} to {MAX_DAYS}.",
                )
        if "every_hours" in data and data["every_hours"] is None:
            self.add_error("every_hours", "Give how many hours between two runs.")
        return data


class RetentionSwitchForm(OptionalReasonForm):
    """Enabling or disabling a policy (``enable`` set or not); enabling one that purges
    needs ``confirm_purge`` ticked too."""

    enable = FlagField()
    confirm_purge = FlagField()


class RetentionRunForm(ConsoleForm):
    """Running a policy now as its preview showed: the preview's fingerprint, the number of
    sessions typed when the run is large (the bulk delete's rule), a reason, and for a
    policy that purges, the tick that says its sessions cannot be restored."""

    digest = IdentifierField(word="fingerprint", required=False)
    typed_count = TypedCountField()
    confirm_purge = FlagField()
    reason = ReasonField()


class IdentifierListField(forms.Field):
    """Several identifiers in one box (commas, spaces or lines between them), each storable."""

    def __init__(self, *, word: str, **kw):
        self.word = word
        super().__init__(required=False, **kw)

    def clean(self, value: Any) -> tuple[str, ...]:
        text = value if isinstance(value, str) else ""
        found = []
        for raw in text.replace(",", " ").split():
            try:
                found.append(operator_identifier(raw, field=self.word))
            except InvalidInput as problem:
                raise ValidationError(str(problem), code="identifier") from problem
        return tuple(dict.fromkeys(found))


class ExactIdentifierField(IdentifierField):
    """An identifier compared exactly, spaces included: refused (by the caller's check)
    rather than trimmed into someone else's id."""

    def clean(self, value: Any) -> str | None:
        try:
            return operator_identifier(
                value if value != "" else None,
                field=self.word,
                max_length=self.identifier_max,
                required=self.identifier_required,
            )
        except InvalidInput as problem:
            raise ValidationError(str(problem), code="identifier") from problem


class ErasureForm(ConsoleForm):
    """Who to erase (a user id, optionally chat ids and whole session keys), the request's
    reference, and (confirming) the previewed plan's fingerprint and the typed count."""

    user_id = ExactIdentifierField(word="user id")
    chat_ids = IdentifierListField(word="chat id")
    session_keys = IdentifierListField(word="session key")
    reference = OperatorTextField(word="request reference", max_length=200)
    fingerprint = IdentifierField(word="fingerprint", required=False)
    typed_count = TypedCountField()


class StrayMoveForm(ConsoleForm):
    fingerprint = IdentifierField(word="fingerprint", required=False)
    reason = ReasonField(required=False)


class SelectionForm(ConsoleForm):
    """The session list's selection posted for a merge: the picked ids, and the list's
    filters (a querystring) to go back to."""

    ids = PicksField()
    filter = forms.CharField(required=False, strip=False)


class ApiTokenForm(ConsoleForm):
    """A new API token: a name, a scope, for a runtime token its sources (separated by commas
    or spaces; none: every source), and an optional expiry in days. ``ledger.actions`` checks
    the combination."""

    name = IdentifierField(word="token name", max_length=100)
    scope = forms.ChoiceField(
        choices=[(s, s) for s in ("runtime", "viewer", "support", "admin")],
        error_messages={"invalid_choice": "The scope is runtime, viewer, support or admin."},
    )
    sources = OperatorTextField(word="sources", max_length=4000)
    expires_days = NumberField()

    def clean_sources(self) -> list[str]:
        text = self.cleaned_data.get("sources") or ""
        sources = [s for s in re.split(r"[,\s]+", text) if s]
        if text.strip() and not sources:
            # "," named no source: taken as "every source", it made an unlimited token of one
            # meant to be limited (attack 40).
            raise ValidationError(
                "These name no source: give source names separated by commas or spaces, or "
                "leave the field empty for a token of every source."
            )
        return sources

    def clean_expires_days(self) -> int | None:
        days = self.cleaned_data.get("expires_days")
        if days is None:
            if (self.data.get("expires_days") or "").strip():
                raise ValidationError("The expiry is a whole number of days (or nothing).")
            return None
        if days != int(days):
            raise ValidationError("The expiry is a whole number of days (or nothing).")
        return int(days)


class ApiTokenRevokeForm(ConsoleForm):
    """Revoking an API token: its name, typed again to confirm."""

    name = IdentifierField(word="token name", max_length=100)
    confirm = IdentifierField(word="token name typed to confirm", max_length=100, required=False)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("name") and cleaned.get("confirm") != cleaned.get("name"):
            raise ValidationError("Type the token's name to confirm revoking it.")
        return cleaned
