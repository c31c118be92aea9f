"""A runtime token limited to sources after an operator merged one of its sessions into another
source's: every route that follows the merge checks the session it acts on, changes nothing
across sources, and no answer names another source's session."""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import lineage
from tests.api.conftest import ApiClient
from tests.console import urlmap

pytestmark = pytest.mark.usefixtures("no_worker")

TG_KEY = "agent:main:telegram:dm:1111"
DC_KEY = "agent:main:discord:dm:2222"


@pytest.fixture
def telegram(make_token) -> ApiClient:
    return ApiClient(make_token("runtime", name="tg-only", sources=["telegram"]))


@pytest.fixture(params=["target live", "target reset"])
def merged(request) -> dict[str, str]:
    """A telegram chat (with a recorded turn and slug) merged by support into a discord chat,
    whose key a discord runtime then reset (or not): {"tg": T, "dc": D, "dc_live": the discord
    key's live session (D' after the reset, else D)}."""
    tg = core.create_session(source="telegram", session_key=TG_KEY, user_id="1111").session_id
    core.append_message(session_id=tg, role="user", content="my telegram question")
    core.record_turn(response_id="resp_tg_1", session_id=tg, conversation="tg-chat")
    dc = core.create_session(source="discord", session_key=DC_KEY, user_id="2222").session_id
    core.append_message(session_id=dc, role="user", content="my discord question")
    core.set_title(session_id=dc, title="Discord secret plans")
    core.merge_sessions(session_ids=[tg, dc], target_id=dc)
    if request.param == "target live":
        return {"tg": tg, "dc": dc, "dc_live": dc}
    dc_live = core.reset_session_key(session_key=DC_KEY).new_session_id
    assert dc_live and lineage.live_session_for_key(DC_KEY) == dc_live
    return {"tg": tg, "dc": dc, "dc_live": dc_live}


def _unchanged(before: dict) -> bool:
    """The store and the ledger as ``before``, but for the refusals audited meanwhile."""
    after = urlmap.state()
    audited = [e for e in after.pop("audit") if e not in before["audit"]]
    return after == {k: v for k, v in before.items() if k != "audit"} and all(
        outcome != "ok" for _pk, _action, outcome in audited
    )


def _names_none_of(answer, ids) -> None:
    text = json.dumps(answer.body)
    for session_id in ids:
        assert session_id not in text, (session_id, answer.body)


def test_a_limited_token_does_not_resume_another_sources_merge_target(telegram, merged):
    """Resuming its own merged session would reopen the discord target and end the discord
    key's live session: refused, nothing changed, nothing named."""
    before = urlmap.state()
    for ref in (merged["tg"], merged["tg"][:20]):
        answer = telegram.post("runtime/resume", {"ref": ref})
        assert answer.status == 403, (ref, answer.body)
        _names_none_of(answer, [merged["dc"], merged["dc_live"]])
    assert _unchanged(before)
    assert lineage.live_session_for_key(DC_KEY) == merged["dc_live"]


def test_an_unlimited_token_still_resumes_through_the_merge(runtime, merged):
    answer = runtime.post("runtime/resume", {"ref": merged["tg"]})
    assert answer.status == 200, answer.body
    assert answer.body["session_id"] == merged["dc"]
    assert lineage.live_session_for_key(DC_KEY) == merged["dc"]


def test_a_limited_token_resumes_its_own_sources_sessions(telegram):
    first = telegram.post("runtime/sessions", {"source": "telegram", "session_key": TG_KEY})
    old = first.body["session_id"]
    telegram.post(
        f"runtime/sessions/{old}/messages", {"messages": [{"role": "user", "content": "x"}]}
    )
    reset = telegram.post("runtime/reset", {"session_key": TG_KEY})
    assert reset.status == 200, reset.body
    answer = telegram.post("runtime/resume", {"ref": old})
    assert answer.status == 200, answer.body
    assert answer.body["session_id"] == old
    assert answer.body["switched_from_session_id"] == reset.body["new_session_id"]
    assert lineage.live_session_for_key(TG_KEY) == old


def test_a_limited_token_does_not_end_another_sources_session_by_resuming(telegram):
    """A resume ending a live session of another source (the key's, or ``current_session_id``)
    is refused, naming neither."""
    mine = core.create_session(source="telegram", session_key=DC_KEY).session_id
    core.append_message(session_id=mine, role="user", content="x")
    core.end_session(session_id=mine, end_reason="user_exit")
    dc = core.create_session(source="discord", session_key=DC_KEY).session_id
    own = core.create_session(source="telegram", session_key=TG_KEY).session_id
    before = urlmap.state()
    for body in ({"ref": mine}, {"ref": own, "current_session_id": dc}):
        answer = telegram.post("runtime/resume", body)
        assert answer.status == 403, answer.body
        _names_none_of(answer, [dc])
    assert _unchanged(before)
    assert lineage.live_session_for_key(DC_KEY) == dc


ROUTES_ON_THE_MERGED_SESSION = [
    ("POST", "runtime/sessions/{tg}/messages", {"messages": [{"role": "user", "content": "x"}]}),
    ("POST", "runtime/sessions/{tg}/undo", {}),
    ("POST", "runtime/sessions/{tg}/retry", {}),
    ("POST", "runtime/sessions/{tg}/redo", {}),
    ("POST", "runtime/sessions/{tg}/rotate", {"summary": "s"}),
    ("POST", "runtime/sessions/{tg}/usage", {"input_tokens": 5}),
    ("POST", "runtime/sessions/{tg}/turns", {"response_id": "resp_tg_2"}),
    ("PUT", "runtime/sessions/{tg}/transcript", {"messages": [{"role": "user", "content": "x"}]}),
    ("POST", "runtime/conversations/resolve", {"conversation": "tg-chat", "source": "telegram"}),
    (
        "POST",
        "runtime/conversations/resolve",
        {"previous_response_id": "resp_tg_1", "source": "telegram"},
    ),
    ("POST", "runtime/resume", {"ref": "{tg}"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES_ON_THE_MERGED_SESSION)
def test_no_route_changes_another_source_through_a_merge(telegram, merged, method, path, body):
    """Every runtime route on the merged telegram session: refused (403, or 409 for a write to
    an ended session), nothing changed, and the discord sessions are not named."""
    path = path.format(**merged)
    body = json.loads(json.dumps(body).replace("{tg}", merged["tg"]))
    before = urlmap.state()
    answer = telegram.call(method, path, body)
    assert answer.status in (403, 409), (path, answer.status, answer.body)
    assert _unchanged(before)
    _names_none_of(answer, [merged["dc"], merged["dc_live"]])
    if answer.status == 409:
        assert answer.body["live_session_id"] is None
        assert answer.body["session_id"] == merged["tg"]


def test_reading_the_merged_session_does_not_name_the_other_source(telegram, runtime, merged):
    answer = telegram.get(f"runtime/sessions/{merged['tg']}")
    assert answer.status == 200
    assert answer.body["live_session_id"] is None
    _names_none_of(answer, [merged["dc"], merged["dc_live"]])
    # An unlimited runtime is told where it continues (nowhere once the target was reset).
    continues = merged["dc"] if merged["dc_live"] == merged["dc"] else None
    assert runtime.get(f"runtime/sessions/{merged['tg']}").body["live_session_id"] == continues


def test_a_limited_token_is_still_told_where_its_own_session_continues(telegram):
    live = telegram.post("runtime/sessions", {"source": "telegram", "session_key": TG_KEY})
    old = live.body["session_id"]
    tip = telegram.post(f"runtime/sessions/{old}/rotate", {}).body["new_session_id"]
    answer = telegram.post(
        f"runtime/sessions/{old}/messages", {"messages": [{"role": "user", "content": "x"}]}
    )
    assert answer.status == 409
    assert answer.body["live_session_id"] == tip
    assert telegram.get(f"runtime/sessions/{old}").body["live_session_id"] == tip


def test_refusals_do_not_name_other_sources_sessions(telegram, merged):
    """A key, a title, an id prefix or a slug of another source: refused without naming the
    session it leads to."""
    dc, dc_live = merged["dc"], merged["dc_live"]
    core.record_turn(response_id="resp_dc_1", session_id=dc_live, conversation="dc-chat")
    before = urlmap.state()
    answers = [
        telegram.get(f"runtime/live?session_key={DC_KEY}"),
        telegram.post("runtime/sessions", {"source": "telegram", "session_key": DC_KEY}),
        telegram.post(
            "runtime/sessions",
            {"source": "telegram", "session_key": DC_KEY, "join_live": False},
        ),
        telegram.post("runtime/reset", {"session_key": DC_KEY}),
        telegram.post("runtime/resume", {"ref": "Discord secret plans"}),
        telegram.post("runtime/resume", {"ref": dc_live[:-2]}),
        telegram.post("runtime/resume", {"ref": dc_live[:4]}),  # ambiguous: every id
        telegram.post(
            "runtime/conversations/resolve", {"conversation": "dc-chat", "source": "telegram"}
        ),
        telegram.post(
            "runtime/conversations/resolve",
            {"previous_response_id": "resp_dc_1", "source": "telegram"},
        ),
    ]
    for answer in answers:
        # 404: a title or prefix finding only another source's session finds none.
        assert answer.status in (403, 404, 422), answer.body
        _names_none_of(answer, [dc, dc_live])
        if answer.status != 404:  # a 404 repeats the caller's own ref, finding nothing
            assert "Discord secret plans" not in json.dumps(answer.body)
    assert _unchanged(before)


def test_a_limited_token_cannot_learn_that_another_sources_session_exists_by_resuming(telegram):
    """A title or id prefix finding only another source's session was a 403 (a no-match is a
    404), and an ambiguous one said how many sessions of any source matched: both told a
    telegram token about discord's sessions (found by the attack round)."""
    dc = core.create_session(source="discord", session_key=DC_KEY).session_id
    core.set_title(session_id=dc, title="Discord secret plans")
    core.end_session(session_id=dc, end_reason="user_exit")
    core.create_session(source="telegram", session_key=TG_KEY)
    nothing = telegram.post("runtime/resume", {"ref": "No such title at all"})
    assert nothing.status == 404, nothing.body
    before = urlmap.state()
    for ref in ("Discord secret plans", dc[:20]):
        answer = telegram.post("runtime/resume", {"ref": ref})
        assert answer.status == 404, (ref, answer.body)
        assert answer.body["type"] == nothing.body["type"]
        _names_none_of(answer, [dc])
    # A whole session id is refused as on every route that names one.
    assert telegram.post("runtime/resume", {"ref": dc}).status == 403
    assert _unchanged(before)
    assert lineage.session_row(dc)["ended_at"] is not None


def test_a_limited_tokens_id_prefix_finds_its_own_sources_sessions_only(telegram):
    """An id prefix two sessions of any source matched was a 422 "more than one", against a
    404 for none: a telegram token could read discord's ids character by character, and with
    one session of its own beside a discord one tell that the discord one exists (attack 40).
    A prefix now looks among the token's sources only."""
    for n in (1, 2):
        core.create_session(
            source="discord", session_id=f"probe_dc_{n}", session_key=f"{DC_KEY}{n}"
        )
    mine = core.create_session(
        source="telegram", session_id="lonely_99", session_key=TG_KEY
    ).session_id
    core.end_session(session_id=mine, end_reason="user_exit")
    core.create_session(source="discord", session_id="lonely_98", session_key=DC_KEY)
    before = urlmap.state()
    nothing = telegram.post("runtime/resume", {"ref": "nomatch_"})
    assert nothing.status == 404, nothing.body
    # Two discord sessions match: answered exactly as no match.
    foreign = telegram.post("runtime/resume", {"ref": "probe_dc"})
    assert (foreign.status, foreign.body["type"]) == (404, nothing.body["type"]), foreign.body
    assert _unchanged(before)
    # Its own session and a discord one match: its own is the only one it can see.
    answer = telegram.post("runtime/resume", {"ref": "lonely_9"})
    assert answer.status == 200, answer.body
    assert answer.body["session_id"] == mine
    assert lineage.session_row("lonely_98")["ended_at"] is None
    # Two of its own match: a 422 that names neither nor says how many.
    core.create_session(source="telegram", session_id="lonely_97", session_key=f"{TG_KEY}7")
    ambiguous = telegram.post("runtime/resume", {"ref": "lonely_9"})
    assert ambiguous.status == 422, ambiguous.body
    assert "more than one" in ambiguous.body["detail"]
    _names_none_of(ambiguous, [mine, "lonely_97", "lonely_98"])


def test_a_limited_token_naming_another_source_is_told_it_named_it(telegram):
    # A resolve (or a start) of a source the token may not use is refused for the source the
    # call names, not for a session: the slug may lead nowhere yet.
    before = urlmap.state()
    for path, body in (
        ("runtime/conversations/resolve", {"conversation": "fresh-slug"}),
        ("runtime/conversations/resolve", {"conversation": "fresh-slug", "source": "discord"}),
        ("runtime/sessions", {"source": "discord", "session_key": "agent:main:discord:dm:9"}),
    ):
        answer = telegram.post(path, body)
        assert answer.status == 403, answer.body
        assert "this call names the source" in answer.body["detail"], answer.body
        assert "this session is from" not in answer.body["detail"]
    assert _unchanged(before)
    ok = telegram.post(
        "runtime/conversations/resolve", {"conversation": "fresh-slug", "source": "telegram"}
    )
    assert ok.status in (200, 201), ok.body
    assert lineage.session_row(ok.body["session_id"])["source"] == "telegram"
