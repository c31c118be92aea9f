"""Domain errors of the store core. Edges turn them into messages, never into 500s."""

from __future__ import annotations


class StoreError(Exception):
    """Base class: something the caller can be told in words."""


class SessionNotFound(StoreError):
    def __init__(self, ref: str):
        self.ref = ref
        super().__init__(f"No session matches {ref!r}.")


class AmbiguousSessionRef(StoreError):
    def __init__(self, ref: str, candidates: list[str]):
        self.ref = ref
        self.candidates = candidates
        shown = ", ".join(candidates[:5])
        super().__init__(
            f"{ref!r} matches {len(candidates)} sessions ({shown}); give more of the id."
        )


class SessionEnded(StoreError):
    """A write aimed at a session that has ended.

    ``live_session_id`` names where the same session_key or conversation now
    writes, so a runtime holding a stale cached id can switch instead of
    writing into the old session (hermes-agent #3210).
    """

    def __init__(
        self, session_id: str, end_reason: str | None, live_session_id: str | None, via: str | None
    ):
        self.session_id = session_id
        self.end_reason = end_reason
        self.live_session_id = live_session_id
        self.via = via
        text = f"Session {session_id} has ended ({end_reason or 'no reason recorded'})."
        if live_session_id:
            text += f" The live session for its {via} is {live_session_id}: write there."
        else:
            text += " No live session continues it; resume it or start a new one."
        super().__init__(text)


class InvalidInput(StoreError):
    """Input the store refuses; ``field`` names the one at fault when there is one."""

    field: str | None = None

    def __init__(self, *args: object, field: str | None = None):
        super().__init__(*args)
        if field is not None:
            self.field = field


class TruncationRefused(StoreError):
    def __init__(self, session_id: str, stored: int, offered: int, reason: str):
        self.session_id = session_id
        self.stored = stored
        self.offered = offered
        super().__init__(
            f"Refusing to save {offered} messages over the {stored} stored for session "
            f"{session_id}: {reason}. Save it as a rewrite (rewrite=True in Python, "
            '"rewrite": true over the API) only when that is meant.'
        )


class NothingToUndo(StoreError):
    pass


class TurnInProgress(StoreError):
    """An operator's undo or retry while the runtime is still answering the last turn
    (``transcript.TURN_IN_PROGRESS_SECONDS``)."""


class ResumePlanChanged(StoreError):
    """The resume read under its locks is not the one previewed (``plan`` is the new one)."""

    def __init__(self, plan):
        self.plan = plan
        super().__init__(
            "The store changed since the resume was previewed (the runtime is still writing). "
            "Nothing was changed: review the new preview and confirm again."
        )


class TitleTaken(StoreError):
    def __init__(self, title: str, owner: str):
        self.title = title
        self.owner = owner
        super().__init__(f"The title {title!r} is already used by session {owner}.")


class ConversationNotFound(StoreError):
    pass


class StoreBusy(StoreError):
    def __init__(self, operation: str, attempts: int):
        super().__init__(
            f"The store is busy (another writer holds its write lock: the runtime, or a file rewrite "
            f"after an erasure); {operation} was not applied "
            f"after {attempts} attempts. Nothing changed: try again."
        )


class ReadOnlyStore(StoreError):
    """The dashboard is attached read-only (``SESSIONS_ADMIN_READ_ONLY=1``): nothing writes to the store."""

    def __init__(self, operation: str):
        self.operation = operation
        super().__init__(
            f"The store is attached read-only (SESSIONS_ADMIN_READ_ONLY=1): {operation} was refused "
            "and nothing changed. Restart the dashboard without read-only mode to act on sessions."
        )


class SessionBeingDeleted(StoreError):
    """A write aimed at a session a delete is removing in parts (``core.being_deleted``).

    Its transcript is partly in the trash already: a write now would land in a
    session that is about to go, or change what the trash keeps.
    """

    def __init__(self, session_id: str, operation: str):
        self.session_id = session_id
        self.operation = operation
        super().__init__(
            f"Session {session_id} is being deleted (its messages go in several short steps, "
            "part of them are already in the trash). Nothing was changed: start a new session, "
            "or restore it from the trash once the delete has finished."
        )
