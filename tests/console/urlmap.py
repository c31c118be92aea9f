"""Every URL the console serves, filled with real ids from a small seeded store.

The access, CSRF and fuzz tests walk the URL resolver instead of a hand-kept
list, so a new URL cannot slip past them: each test also checks that its own
table names every URL this module finds.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver, reverse

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import (
    ApiToken,
    AuditEntry,
    DeleteJob,
    ErasureRequest,
    RetentionPolicy,
    TrashEntry,
)
from sessions_admin.routers import responses_alias

# Text that only the seeded store holds: a response that shows it leaked store content.
SECRET_TITLE = "Quokka ledger of the seeded store"
SECRET_CONTENT = "marmoset-orchid-7741"


@dataclass(frozen=True)
class Seeded:
    root: str
    tip: str
    branch: str
    fork_a: str
    fork_b: str
    merge_id: int
    trash_entry_id: int
    job_id: int
    hold_id: int
    policy_id: int
    request_id: int

    @property
    def url_args(self) -> dict[str, object]:
        """Values for every converter name the URL patterns use."""
        return {
            "session_id": self.tip,
            "merge_id": self.merge_id,
            "entry_id": self.trash_entry_id,
            "job_id": self.job_id,
            "hold_id": self.hold_id,
            "policy_id": self.policy_id,
            "request_id": self.request_id,
        }

    @property
    def secrets(self) -> list[str]:
        return [SECRET_TITLE, SECRET_CONTENT, self.root, self.tip, self.branch, "seed-slug"]


def seed() -> Seeded:
    """A conversation with a compression segment and a branch, a merge, a trash entry, a job."""
    root = core.create_session(
        source="cli", session_key="cli:seed", title=SECRET_TITLE, started_at=1000.0
    ).session_id
    core.append_messages(
        session_id=root,
        messages=[
            {"role": "user", "content": f"first question {SECRET_CONTENT}"},
            {"role": "assistant", "content": "first answer"},
        ],
    )
    core.record_turn(response_id="resp-seed", session_id=root, conversation="seed-slug")
    tip = core.rotate_for_compression(session_id=root, summary="summary so far").new_session_id
    core.append_messages(
        session_id=tip,
        messages=[
            {"role": "user", "content": f"second question {SECRET_CONTENT}"},
            {"role": "assistant", "content": "second answer"},
        ],
    )
    branch = core.branch_session(session_id=tip).new_session_id
    forks = []
    for n in range(3):
        fork = core.create_session(source="api_server", started_at=2000.0 + n).session_id
        core.append_message(session_id=fork, role="user", content=f"fork {n}")
        core.record_turn(response_id=f"resp-fork-{n}", session_id=fork, conversation="fork-slug")
        forks.append(fork)
    plan = core.plan_merge(session_ids=forks[:2])
    merge_id = core.merge_sessions(
        session_ids=forks[:2], expected_fingerprint=plan.fingerprint
    ).merge_id
    doomed = core.create_session(source="cli", started_at=3000.0).session_id
    core.end_session(session_id=doomed, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[doomed])
    trash_entry_id = core.execute_cascade_delete(
        session_ids=[doomed], expected_fingerprint=plan.fingerprint, actor="seed", reason="seed"
    ).trash_entry_ids[0]
    old = core.create_session(source="cron", started_at=4000.0).session_id
    core.end_session(session_id=old, end_reason="user_exit")
    job_id = jobs.create_bulk_delete_job(
        session_ids=[old], include_live=False, actor="seed", reason="seed"
    )
    kept = core.create_session(source="cli", started_at=5000.0).session_id
    hold_id = holds.place_hold(kind="session", subject=kept, reason="seed", actor="seed").id
    policy_id = RetentionPolicy.objects.create(
        name="seed policy", older_than_days=3650, created_by="seed"
    ).pk
    request_id = ErasureRequest.objects.create(
        reference="seed",
        subject_hash="0" * 64,
        salt="1" * 32,
        state=ErasureRequest.DONE,
        receipt={"erased": {"sessions": 0}},
        created_by="seed",
    ).pk
    return Seeded(
        request_id=request_id,
        hold_id=hold_id,
        policy_id=policy_id,
        root=root,
        tip=tip,
        branch=branch,
        fork_a=forks[0],
        fork_b=forks[2],
        merge_id=merge_id,
        trash_entry_id=trash_entry_id,
        job_id=job_id,
    )


def state() -> dict:
    """Everything an action could change: the store, the responses, the ledger."""
    snapshot = {
        "sessions": db.fetchall("SELECT * FROM sessions ORDER BY id"),
        "messages": db.fetchall("SELECT * FROM messages ORDER BY id"),
        "switch_events": db.fetchall("SELECT * FROM sessions_admin_switch_events ORDER BY 1"),
        "merges": db.fetchall("SELECT * FROM sessions_admin_merges ORDER BY 1"),
        "undos": db.fetchall("SELECT * FROM sessions_admin_undos ORDER BY 1"),
        "holds": db.fetchall("SELECT * FROM sessions_admin_holds ORDER BY 1"),
        "conversations": db.fetchall(
            "SELECT * FROM conversations ORDER BY name", alias=responses_alias()
        ),
        "responses": db.fetchall(
            "SELECT * FROM responses ORDER BY response_id", alias=responses_alias()
        ),
        # Refused attempts are recorded (tests/security/test_refusals.py); nothing else changes.
        "audit": list(
            AuditEntry.objects.exclude(outcome=AuditEntry.REFUSED)
            .order_by("pk")
            .values_list("pk", "action", "outcome")
        ),
        "trash": list(TrashEntry.objects.order_by("pk").values_list("pk", "state")),
        "jobs": list(DeleteJob.objects.order_by("pk").values_list("pk", "state", "done")),
        "erasures": list(ErasureRequest.objects.order_by("pk").values_list("pk", "state")),
        "api_tokens": list(ApiToken.objects.order_by("pk").values_list("pk", "name", "revoked_at")),
        "policies": list(
            RetentionPolicy.objects.order_by("pk").values_list(
                "pk", "name", "enabled", "next_run_at"
            )
        ),
    }
    if db.vendor() == "sqlite":
        snapshot["fts"] = db.fetchall("SELECT rowid, content FROM messages_fts ORDER BY rowid")
    return snapshot


@dataclass(frozen=True)
class Route:
    name: str
    params: tuple[str, ...]

    def url(self, args: dict[str, object]) -> str:
        return reverse(self.name, kwargs={p: args[p] for p in self.params})


def routes() -> list[Route]:
    """Every named URL pattern with the converter names it needs, in resolver order."""
    found: list[Route] = []

    def walk(patterns, params: tuple[str, ...]) -> None:
        for pattern in patterns:
            own = tuple(getattr(pattern.pattern, "converters", {}))
            if isinstance(pattern, URLResolver):
                if pattern.namespace == "api":
                    continue  # the HTTP API has its own access table: tests/api/test_access.py
                walk(pattern.url_patterns, params + own)
            elif isinstance(pattern, URLPattern):
                assert pattern.name, f"URL pattern {pattern.pattern} has no name"
                found.append(Route(pattern.name, params + own))

    walk(get_resolver().url_patterns, ())
    return found


def route_names() -> set[str]:
    return {route.name for route in routes()}


def route(name: str) -> Route:
    """The route of that URL name."""
    return next(r for r in routes() if r.name == name)
