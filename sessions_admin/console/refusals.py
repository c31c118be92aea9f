"""One way a view refuses: the attempt is audited as refused, once, and the operator told why.

A view validates its input with a form, then calls ``ledger.actions``; either can refuse.
``refuse`` records the refused attempt (``actions.record_refusal``, which skips an error the
action already audited itself) and, given ``message``, shows it; ``refuse_form`` does that for
an invalid form; ``attempt`` runs an action and turns its ``StoreError`` into a ``Refused`` the
view renders (its form again, or a redirect with the message); ``attempt_form`` is the two in
one, for an action whose form has one message to show (``ConsoleForm.problem``), and
``attempt_valid`` for a page that lists all of an invalid form's problems (``Refused.said``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django import forms
from django.contrib import messages

from sessions_admin.console.forms import ConsoleForm, form_problems
from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions

T = TypeVar("T")


@dataclass(frozen=True)
class Refused:
    """Why an attempt changed nothing: the form's problems, or the action's error."""

    problems: tuple[str, ...]
    error: StoreError | None = None

    @property
    def why(self) -> str:
        return " ".join(self.problems)

    def said(self, prefix: str) -> list[str]:
        """The problems as a page lists them: an action's error after ``prefix``."""
        return [f"{prefix}{self.why}"] if self.error is not None else list(self.problems)


def refuse(
    request: Any,
    action: str,
    why: str | BaseException,
    *,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
    message: str | None = None,
) -> Refused:
    """Record the refused ``action`` (who, from where, why) and, with ``message``, show
    ``message`` followed by why as an error message."""
    actions.record_refusal(
        request=request, action=action, why=why, session_ids=list(session_ids), before=before
    )
    if message is not None:
        messages.error(request, f"{message}{why}")
    return Refused((str(why),), why if isinstance(why, StoreError) else None)


def refuse_form(
    request: Any,
    action: str,
    form: forms.Form,
    *,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
    message: str | None = None,
) -> Refused | None:
    """None when ``form`` is valid; otherwise its problems, refused (``refuse``)."""
    if form.is_valid():
        return None
    problems = form_problems(form) or ["The form was not valid."]
    refused = refuse(
        request,
        action,
        " ".join(problems),
        session_ids=session_ids,
        before=before,
        message=message,
    )
    return Refused(tuple(problems), refused.error)


def attempt(
    request: Any,
    action: str,
    run: Callable[[], T],
    *,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
    message: str | None = None,
) -> T | Refused:
    """``run()``'s result, or, when it raises a ``StoreError`` (nothing changed), that error
    refused (``refuse``)."""
    try:
        return run()
    except StoreError as error:
        return refuse(
            request, action, error, session_ids=session_ids, before=before, message=message
        )


def attempt_valid(
    request: Any,
    action: str,
    form: forms.Form,
    run: Callable[[dict], T],
    *,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
) -> T | Refused:
    """``attempt`` of ``run(form.cleaned_data)`` once ``form`` is valid; until then all its
    problems, refused (``refuse_form``)."""
    return refuse_form(request, action, form, session_ids=session_ids, before=before) or attempt(
        request, action, lambda: run(form.cleaned_data), session_ids=session_ids, before=before
    )


def attempt_form(
    request: Any,
    action: str,
    form: ConsoleForm,
    run: Callable[[dict], T],
    *,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
    message: str | None = None,
) -> T | Refused:
    """``attempt`` of ``run(form.cleaned_data)`` once ``form`` is valid; until then its first
    problem (``ConsoleForm.problem``), refused as an action's error is."""
    problem = form.problem()
    if problem is not None:
        return refuse(
            request, action, problem, session_ids=session_ids, before=before, message=message
        )
    return attempt(
        request,
        action,
        lambda: run(form.cleaned_data),
        session_ids=session_ids,
        before=before,
        message=message,
    )
