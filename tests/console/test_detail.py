"""The session detail page: access, metadata, lineage, the stitched and chunked transcript."""

from __future__ import annotations

import html
import json
import re
import time

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import store_alias
from tests.console.pages import detail

HX = {"HX-Request": "true"}
SCRIPT = "<script>alert(1)</script>"


def transcript(session_id: str) -> str:
    return reverse("session_transcript", args=[session_id])


def message_ids(body: str) -> list[int]:
    return [int(m) for m in re.findall(r'id="m(\d+)"', body)]


def link(body: str, css_class: str, attribute: str) -> str | None:
    """An attribute of the first ``<a class="css_class">`` in ``body``."""
    match = re.search(rf'<a class="{css_class}"[^>]*>', body)
    if not match:
        return None
    value = re.search(rf'\s{attribute}="([^"]*)"', match.group(0))
    return html.unescape(value.group(1)) if value else None


def tag_block(body: str, start: str, tag: str) -> str:
    """From the first occurrence of ``start`` to the matching ``</tag>`` (no nesting of ``tag``)."""
    begin = body.index(start)
    return body[begin : body.index(f"</{tag}>", begin)]


def lineage_items(body: str) -> dict[str, str]:
    """Session id -> the class attribute of its lineage item."""
    tree = body[body.index('class="lineage-tree"') :]
    tree = tree[: tree.index("</section>")]
    items = {}
    for classes, inner in re.findall(
        r'<li class="(node(?! fold)[^"]*)"[^>]*>(.*?)</div>', tree, re.S
    ):
        session_id = re.search(r'class="node-link" href="/sessions/([^/]+)/"', inner).group(1)
        edge = re.search(r'<span class="edge"[^>]*>([^<]+)</span>', inner)
        items[session_id] = classes + (f" label:{edge.group(1)}" if edge else "")
    return items


def follow_forward(client, body: str, *, htmx: bool = True) -> list[str]:
    """The bodies of every chunk reached from ``body`` through its load-more links."""
    bodies = [body]
    for _ in range(1000):
        url = link(bodies[-1], "load-more", "hx-get" if htmx else "href")
        if url is None:
            return bodies
        response = client.get(url, headers=HX if htmx else {})
        assert response.status_code == 200
        bodies.append(response.content.decode())
    raise AssertionError("load-more links never ended")


def conversation_messages(n: int, *, prefix: str = "msg") -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{prefix} {i:05d}"}
        for i in range(n)
    ]


def append_in_batches(session_id: str, messages: list[dict], batch: int = 500) -> list[int]:
    ids: list[int] = []
    for start in range(0, len(messages), batch):
        result = core.append_messages(
            session_id=session_id, messages=messages[start : start + batch]
        )
        ids.extend(result.message_ids)
    return ids


# --- access ----------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_login(client):
    ref = core.create_session(source="cli").session_id
    for url in (detail(ref), transcript(ref) + "?after=0:0"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("role", ["viewer", "support", "admin"])
def test_every_role_can_read_a_session(signed_in, role):
    ref = core.create_session(source="cli").session_id
    client = signed_in(role)
    assert client.get(detail(ref)).status_code == 200
    assert client.get(transcript(ref) + "?after=0:0", headers=HX).status_code == 200


def test_an_operator_without_a_role_is_forbidden(signed_in):
    ref = core.create_session(source="cli").session_id
    client = signed_in(None)
    assert client.get(detail(ref)).status_code == 403
    assert client.get(transcript(ref) + "?after=0:0").status_code == 403


def test_an_unknown_session_is_not_found(signed_in):
    client = signed_in("viewer")
    assert client.get(detail("no-such-session")).status_code == 404
    assert client.get(transcript("no-such-session") + "?after=0:0").status_code == 404


def test_post_is_not_allowed(signed_in):
    ref = core.create_session(source="cli").session_id
    client = signed_in("admin")
    assert client.post(detail(ref)).status_code == 405
    assert client.post(transcript(ref) + "?after=0:0").status_code == 405


def test_a_malformed_cursor_is_a_bad_request(signed_in):
    ref = core.create_session(source="cli").session_id
    client = signed_in("viewer")
    assert client.get(transcript(ref)).status_code == 400
    assert client.get(transcript(ref) + "?after=abc").status_code == 400
    assert client.get(transcript(ref) + "?after=7:0").status_code == 400  # no segment 7
    assert client.get(detail(ref) + "?before=-1:3").status_code == 400


# --- metadata --------------------------------------------------------------------------------


def test_metadata_is_shown(signed_in):
    ref = core.create_session(
        source="telegram",
        user_id="user-77",
        session_key="agent:main:telegram:dm:77",
        chat_id="chat-77",
        chat_type="dm",
        thread_id="thread-9",
        model="claude-sonnet-4",
        title="Refund for order 8812",
        started_at=1_700_000_000.0,
    ).session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
                ],
            },
        ],
    )
    core.add_usage(
        session_id=ref,
        input_tokens=12345,
        output_tokens=678,
        cache_read_tokens=9000,
        cache_write_tokens=321,
        reasoning_tokens=55,
        cost_usd=0.0431,
    )
    core.end_session(session_id=ref, end_reason="user_exit")
    body = signed_in("viewer").get(detail(ref)).content.decode()
    meta = tag_block(body, 'class="card meta"', "section")
    for text in (
        "telegram",
        "user-77",
        "agent:main:telegram:dm:77",
        "chat-77",
        "(dm)",
        "thread-9",
        "claude-sonnet-4",
        "Refund for order 8812",
        "2023-11-14 22:13:20 UTC",  # started_at
        "closed by the user",  # end reason in words
        "12345",
        "678",
        "9000",
        "321",
        "55",
        "$0.0431",
    ):
        assert text in meta, text
    assert re.search(r"<dt>Messages</dt><dd[^>]*>2 ", meta)
    assert re.search(r"<dt>Tool calls</dt><dd[^>]*>2<", meta)
    assert "<title>Refund for order 8812" in body


def test_a_live_session_says_so(signed_in):
    ref = core.create_session(source="cli").session_id
    meta = tag_block(signed_in("viewer").get(detail(ref)).content.decode(), "detail-head", "header")
    assert "still live" in meta


# --- lineage ---------------------------------------------------------------------------------


def _family():
    root = core.create_session(source="telegram", session_key="tg:fam").session_id
    core.append_message(session_id=root, role="user", content="hi")
    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    compressed = core.rotate_for_compression(session_id=root).new_session_id
    core.append_message(session_id=compressed, role="user", content="more")
    branch = core.branch_session(session_id=compressed).new_session_id
    reset = core.reset_session_key(session_key="tg:fam").new_session_id
    # A stray session of the same user, merged back into the conversation.
    merged = core.create_session(source="cli", session_key="cli:other").session_id
    core.append_message(session_id=merged, role="user", content="stray")
    core.merge_sessions(session_ids=[reset, merged], target_id=reset)
    return root, delegate, compressed, branch, reset, merged


def test_the_lineage_shows_every_related_session_with_its_edge(signed_in):
    root, delegate, compressed, branch, reset, merged = _family()
    unrelated = core.create_session(source="cli").session_id
    body = signed_in("viewer").get(detail(branch)).content.decode()
    items = lineage_items(body)
    assert set(items) == {root, delegate, compressed, branch, reset, merged}
    assert unrelated not in items
    assert "label:" not in items[root]
    assert "label:delegate" in items[delegate]
    assert "label:compression" in items[compressed]
    assert "label:branch" in items[branch]
    assert "label:reset" in items[reset]
    assert "label:merge" in items[merged]
    # Live sessions are marked, the current one highlighted.
    assert {s for s, classes in items.items() if "is-live" in classes} == {delegate, reset}
    assert [s for s, classes in items.items() if "current" in classes] == [branch]
    assert body.count('aria-current="page"') == 1
    # Each node links to its own page.
    for session_id in items:
        assert f'class="node-link" href="{detail(session_id)}"' in body


def test_the_merge_shows_from_the_absorbed_side_too(signed_in):
    _root, _d, _c, _b, reset, merged = _family()
    items = lineage_items(signed_in("viewer").get(detail(merged)).content.decode())
    assert set(items) == {merged, reset}
    assert "label:merge" in items[reset]


def test_a_long_compression_chain_is_drawn_flat_folded_and_fast(signed_in):
    ids = [core.create_session(source="cli", session_key="k:long").session_id]
    for i in range(49):
        core.append_message(session_id=ids[-1], role="user", content=f"segment {i}")
        ids.append(core.rotate_for_compression(session_id=ids[-1]).new_session_id)
    client = signed_in("viewer")
    started = time.monotonic()
    response = client.get(detail(ids[25]))
    elapsed = time.monotonic() - started
    body = response.content.decode()
    items = lineage_items(body)
    assert list(items) == ids  # every segment, in chain order
    assert all("label:compression" in items[s] for s in ids[1:])
    tree = tag_block(body, 'class="lineage-tree"', "section")
    assert tree.count("<ol") <= 3  # one line (and two folds), not 50 nested levels
    # The plain middle of the chain is folded away; the ends and the current one's
    # neighbourhood stay in view.
    visible = re.sub(r'<li class="node fold">.*?</details></li>', "", tree, flags=re.S)
    assert re.findall(r'class="node-link" href="/sessions/([^/]+)/"', visible) == [
        ids[0],
        *ids[23:28],
        ids[49],
    ]
    assert "22 more compression segments" in tree and "21 more compression segments" in tree
    assert elapsed < 5, elapsed


# --- transcript: stitching, chunks ------------------------------------------------------------


def test_the_transcript_is_stitched_across_the_compression_chain(signed_in):
    root = core.create_session(source="cli").session_id
    core.append_messages(session_id=root, messages=conversation_messages(2, prefix="first"))
    middle = core.rotate_for_compression(session_id=root, summary="summary one").new_session_id
    core.append_messages(session_id=middle, messages=conversation_messages(2, prefix="second"))
    tip = core.rotate_for_compression(session_id=middle, summary="summary two").new_session_id
    core.append_messages(session_id=tip, messages=conversation_messages(1, prefix="third"))
    client = signed_in("viewer")
    body = client.get(detail(root)).content.decode()
    expected = [
        "first 00000",
        "first 00001",
        f'Continued in compressed session <a href="{detail(middle)}"><code>{middle}</code>',
        "summary one",
        "second 00000",
        "second 00001",
        f'Continued in compressed session <a href="{detail(tip)}"><code>{tip}</code>',
        "summary two",
        "third 00000",
        # The tip is live: the transcript's end follows it (tests/console/test_live.py).
        'id="live-tail"',
    ]
    positions = [body.index(text) for text in expected]
    assert positions == sorted(positions)
    assert body.count('class="handoff"') == 2

    # The tip's page opens at the tip's own messages; earlier segments are a link away.
    tip_body = client.get(detail(tip)).content.decode()
    assert "third 00000" in tip_body
    assert "first 00000" not in tip_body
    earlier = client.get(link(tip_body, "load-earlier", "hx-get"), headers=HX).content.decode()
    assert "<html" not in earlier
    positions = [
        earlier.index(text)
        for text in ("first 00000", f"<code>{middle}</code>", "second 00001", f"<code>{tip}</code>")
    ]
    assert positions == sorted(positions)
    assert link(earlier, "load-earlier", "href") is None  # that was the start


def test_the_first_response_holds_one_chunk_and_the_links_load_the_rest(signed_in):
    root = core.create_session(source="cli").session_id
    first_ids = append_in_batches(root, conversation_messages(130))
    tip = core.rotate_for_compression(session_id=root).new_session_id
    tip_ids = append_in_batches(tip, conversation_messages(140, prefix="tip"))
    client = signed_in("viewer")
    page = client.get(detail(root)).content.decode()
    assert message_ids(page) == first_ids[:100]
    more = re.search(r'<a class="load-more"[^>]*>', page).group(0)
    assert 'hx-trigger="revealed"' in more and 'hx-swap="outerHTML"' in more
    assert link(page, "load-more", "href").startswith(detail(root) + "?after=")

    second = client.get(link(page, "load-more", "hx-get"), headers=HX).content.decode()
    assert "<html" not in second
    assert message_ids(second) == first_ids[100:] + tip_ids[:70]
    assert 'class="handoff"' in second

    bodies = follow_forward(client, page)
    seen = [i for body in bodies for i in message_ids(body)]
    assert seen == first_ids + tip_ids  # every message exactly once, in id order
    assert 'id="live-tail"' in bodies[-1]  # the tip is live: its end follows the runtime

    # Without JavaScript the plain links page through the same messages.
    plain = follow_forward(client, page, htmx=False)
    assert [message_ids(b)[0] for b in plain[1:]] == [m for m in (first_ids[100], tip_ids[70])]
    assert all("<html" in b for b in plain)


def test_hidden_rows_are_skipped_and_paging_still_sees_every_active_message_once(signed_in):
    ref = core.create_session(source="cli").session_id
    append_in_batches(ref, conversation_messages(90))
    core.undo_last_turn(session_id=ref)  # the last user+assistant pair becomes inactive
    append_in_batches(ref, conversation_messages(90, prefix="after"))
    core.undo_last_turn(session_id=ref)
    client = signed_in("viewer")
    all_ids = [
        m
        for (m,) in db.fetchall("SELECT id FROM messages WHERE session_id = %s ORDER BY id", [ref])
    ]
    active_ids = [
        m
        for (m,) in db.fetchall(
            "SELECT id FROM messages WHERE session_id = %s AND active = 1 ORDER BY id", [ref]
        )
    ]
    assert len(active_ids) == len(all_ids) - 4
    shown = follow_forward(client, client.get(detail(ref)).content.decode())
    assert [i for b in shown for i in message_ids(b)] == all_ids
    hidden = follow_forward(client, client.get(detail(ref) + "?inactive=hide").content.decode())
    assert [i for b in hidden for i in message_ids(b)] == active_ids


def test_opening_a_huge_session_reads_one_chunk_by_keyset(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = append_in_batches(ref, conversation_messages(20_000), batch=2000)
    client = signed_in("viewer")
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        response = client.get(detail(ref))
    assert message_ids(response.content.decode()) == ids[:100]
    message_reads = [q["sql"] for q in queries.captured_queries if "messages" in q["sql"]]
    assert message_reads
    for sql in message_reads:
        assert "OFFSET" not in sql.upper()
        assert "LIMIT" in sql.upper(), sql
        assert "COUNT(" not in sql.upper(), sql
    # Deep in the transcript a chunk is just as small.
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        chunk = client.get(transcript(ref) + f"?after=0:{ids[15_000]}", headers=HX)
    assert message_ids(chunk.content.decode()) == ids[15_001:15_101]
    assert all("OFFSET" not in q["sql"].upper() for q in queries.captured_queries)


# --- transcript: content ---------------------------------------------------------------------


def _tool_turn(session_id: str, *, name: str = "lookup_order", arguments=None, result="found 3"):
    arguments = arguments if arguments is not None else json.dumps({"order": "8812", "n": 2})
    return core.append_messages(
        session_id=session_id,
        messages=[
            {"role": "user", "content": "where is my order?"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "reasoning": "I should look the order up first.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "content": result, "tool_call_id": "call_1", "tool_name": name},
            {"role": "assistant", "content": "It shipped."},
        ],
    ).message_ids


def test_a_tool_call_is_paired_with_its_result_in_a_collapsible_element(signed_in):
    ref = core.create_session(source="cli").session_id
    _user, assistant, tool, _reply = _tool_turn(ref)
    body = signed_in("viewer").get(detail(ref)).content.decode()
    call = tag_block(body, '<details class="tool-call"', "details")
    assert "lookup_order" in call
    assert "&quot;order&quot;: &quot;8812&quot;,\n  &quot;n&quot;: 2" in call  # pretty-printed
    assert f'id="m{tool}"' in call and "found 3" in call
    assert '<details class="tool-call" open' not in body  # collapsed by default
    article = tag_block(body, f'id="m{assistant}"', "article")
    assert '<details class="tool-call"' in article
    assert body.count(f'id="m{tool}"') == 1  # not repeated as a row of its own


def _two_calls(call_ids=("c1", "c2")) -> list[dict]:
    return [
        {"role": "user", "content": "check both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c, "type": "function", "function": {"name": f"tool_{c}", "arguments": "{}"}}
                for c in call_ids
            ],
        },
        *({"role": "tool", "content": f"result {c}", "tool_call_id": c} for c in call_ids),
        {"role": "assistant", "content": "both done"},
    ]


def test_a_chunk_never_splits_a_tool_call_from_its_results(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = append_in_batches(
        ref, conversation_messages(98) + _two_calls() + conversation_messages(10)
    )
    assistant, first_result, second_result = ids[99], ids[100], ids[101]
    client = signed_in("viewer")
    page = client.get(detail(ref)).content.decode()
    assert message_ids(page) == ids[:102]  # the chunk grew to keep the results with their call
    article = tag_block(page, f'id="m{assistant}"', "article")
    assert f'id="m{first_result}"' in article and f'id="m{second_result}"' in article
    rest = follow_forward(client, page)
    assert [i for body in rest for i in message_ids(body)] == ids

    # Starting around a later message does not start between a call and its results.
    around = client.get(detail(ref) + f"?around={ids[105]}").content.decode()
    assert message_ids(around)[:3] == [assistant, first_result, second_result]
    # Around a tool result: its call is shown open, the result highlighted.
    around = client.get(detail(ref) + f"?around={second_result}").content.decode()
    call = tag_block(around, "tool_c2", "details")
    assert f'class="tool-result highlight" id="m{second_result}"' in call
    assert around.count('<details class="tool-call" open>') == 1


def test_user_assistant_tool_and_system_rows_are_styled_apart(signed_in):
    ref = core.create_session(source="cli").session_id
    core.append_message(session_id=ref, role="system", content="be nice")
    core.append_message(session_id=ref, role="tool", content="orphan", tool_call_id="x")
    _tool_turn(ref)
    body = signed_in("viewer").get(detail(ref)).content.decode()
    for role in ("system", "user", "assistant", "tool"):
        assert f'class="msg role-{role}' in body


def test_reasoning_is_inside_a_collapsed_element(signed_in):
    ref = core.create_session(source="cli").session_id
    _tool_turn(ref)
    body = signed_in("viewer").get(detail(ref)).content.decode()
    reasoning = tag_block(body, '<details class="reasoning"', "details")
    assert "I should look the order up first." in reasoning
    assert not reasoning.startswith('<details class="reasoning" open')


def test_undone_and_compacted_rows_are_marked_and_can_be_hidden(signed_in):
    ref = core.create_session(source="cli").session_id
    kept = core.append_messages(session_id=ref, messages=conversation_messages(4)).message_ids
    undone = core.undo_last_turn(session_id=ref).message_ids
    # Compaction is the runtime's: it marks rows it summarised away.
    db.execute("UPDATE messages SET compacted = 1 WHERE id = %s", [kept[0]])
    client = signed_in("viewer")
    body = client.get(detail(ref)).content.decode()
    assert message_ids(body) == list(kept)
    for message_id in undone:
        assert re.search(rf'<article class="[^"]*\binactive\b[^"]*" id="m{message_id}"', body)
        assert ">undone<" in tag_block(body, f'id="m{message_id}"', "header")
    assert ">compacted<" in tag_block(body, f'id="m{kept[0]}"', "header")
    toggle = link(body, "toggle", "href")
    assert toggle == detail(ref) + "?inactive=hide"
    hidden = client.get(toggle).content.decode()
    assert message_ids(hidden) == list(kept[1:2])
    assert link(hidden, "toggle", "href") == detail(ref)
    # The toggle works for htmx too: just the transcript section comes back.
    fragment = client.get(toggle, headers=HX).content.decode()
    assert "<html" not in fragment and 'id="transcript"' in fragment
    assert message_ids(fragment) == list(kept[1:2])


def test_around_starts_a_few_messages_before_the_message_and_highlights_it(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = append_in_batches(ref, conversation_messages(400))
    target = ids[250]
    client = signed_in("viewer")
    body = client.get(detail(ref) + f"?around={target}").content.decode()
    shown = message_ids(body)
    assert shown[:6] == ids[245:251]
    assert shown == ids[245:345]
    assert f'class="msg role-user highlight" id="m{target}"' in body
    earlier_url = link(body, "load-earlier", "hx-get")
    assert earlier_url is not None
    earlier = client.get(earlier_url, headers=HX).content.decode()
    assert message_ids(earlier) == ids[145:245]
    assert (
        message_ids(
            client.get(link(earlier, "load-earlier", "hx-get"), headers=HX).content.decode()
        )
        == ids[45:145]
    )
    # Search results link to the page with a fragment: the id is on the message element.
    assert f'id="m{target}"' in body


def test_around_a_message_of_another_conversation_is_ignored(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = append_in_batches(ref, conversation_messages(3))
    other = core.create_session(source="cli").session_id
    foreign = core.append_message(session_id=other, role="user", content="elsewhere").message_ids[0]
    body = signed_in("viewer").get(detail(ref) + f"?around={foreign}").content.decode()
    assert message_ids(body) == ids
    assert "highlight" not in body


def test_script_payloads_are_shown_as_text_everywhere(signed_in):
    ref = core.create_session(source="cli", title=SCRIPT, model=SCRIPT, user_id=SCRIPT).session_id
    core.append_message(session_id=ref, role="user", content=SCRIPT)
    _tool_turn(
        ref,
        name=SCRIPT,
        arguments=json.dumps({"q": SCRIPT}),
        result=SCRIPT,
    )
    core.append_message(
        session_id=ref,
        role="assistant",
        content=[{"type": "text", "text": SCRIPT}],
        reasoning=SCRIPT,
    )
    # tool_calls a runtime wrote as text that is not JSON (the core refuses it; Hermes may not).
    db.execute(
        "INSERT INTO messages (session_id, role, content, tool_calls, timestamp, active) "
        "VALUES (%s, 'assistant', 'x', %s, %s, 1)",
        [ref, SCRIPT, time.time()],
    )
    body = signed_in("viewer").get(detail(ref)).content.decode()
    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<title>&lt;script&gt;" in body
    call = tag_block(body, '<details class="tool-call"', "details")
    assert '<span class="tool-name">&lt;script&gt;alert(1)&lt;/script&gt;</span>' in call
    assert "&quot;q&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in call


def test_a_search_link_marks_its_words_as_the_search_parsed_them(signed_in):
    sid = core.create_session(source="cli").session_id
    [mid] = core.append_messages(
        session_id=sid, messages=[{"role": "user", "content": "the red apple"}]
    ).message_ids
    client = signed_in("viewer")
    body = client.get(detail(sid), {"around": mid, "q": '"red apple" -pear web_search <b>'}).content
    body = body.decode()
    terms = re.search(r'data-find-terms="([^"]*)"', body)
    assert terms and json.loads(html.unescape(terms.group(1))) == ["red apple", "web search", "b"]
    assert 'src="/static/js/find.js"' in body
    # Without a search, no bar and no script.
    body = client.get(detail(sid)).content.decode()
    assert "data-find-terms" not in body and "find.js" not in body
    body = client.get(detail(sid), {"q": "-only -excluded"}).content.decode()
    assert "data-find-terms" not in body


@pytest.mark.skipif(connections[store_alias()].vendor != "postgresql", reason="PostgreSQL's plan")
def test_the_latest_end_of_sessions_merged_into_a_segment_is_read_through_an_index():
    """The detail page asks it of every ended segment (store/health, core/stray): without
    the partial index it was a scan of every session (47 ms at 100,000 sessions)."""
    from sessions_admin.core import lineage

    sql = (
        "EXPLAIN SELECT MAX(a.ended_at) FROM sessions a WHERE a.end_reason = 'merged' "
        f"AND {lineage.marker('_merged_into', 'a')} = %s"
    )
    with transaction.atomic(using=store_alias()), connections[store_alias()].cursor() as c:
        c.execute("SET LOCAL enable_seqscan = off")
        c.execute(sql, ["some-session"])
        plan = " ".join(r[0] for r in c.fetchall())
    assert "idx_sa_sessions_merged" in plan, plan


def test_the_page_of_an_ended_segment_walks_its_chain_forward_twice_not_four_times(signed_in):
    """The page, its actions panel and its stray-message check each ask where the segment
    continues; within one request (db.memoized_reads) the walk is read once."""
    parent = core.create_session(source="cli", session_key="k:walks").session_id
    core.append_message(session_id=parent, role="user", content="hello")
    child = core.rotate_for_compression(
        session_id=parent, summary="Summary", carry_messages=[]
    ).new_session_id
    client = signed_in("viewer")
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        response = client.get(detail(parent))
    assert response.status_code == 200
    assert child in response.content.decode()
    forward_walks = [q for q in queries.captured_queries if "RECURSIVE chain(" in q["sql"]]
    # One for the page's chain, one for where the segment continues.
    assert len(forward_walks) == 2
