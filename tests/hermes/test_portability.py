"""Hermes's own session exports import into a Hermes store, and Hermes reads them back the same."""

from __future__ import annotations

import json

import pytest
from django.db import connections

from sessions_admin.core import db, portability
from tests.hermes import scenario
from tests.hermes.checks import assert_healthy, search
from tests.hermes.conftest import Hermes, call

EXPORTED = ["tg-old", "cli-1", "cli-2", "sub-1", "tui-1", "api-a"]


@pytest.fixture
def source_store(hermes, tmp_path) -> Hermes:
    """Another Hermes home, written by Hermes: the scenario plus a multimodal message."""
    home = tmp_path / "source-home"
    home.mkdir()
    source = Hermes(
        python=hermes.python,
        home=home,
        state=home / "state.db",
        responses=home / "response_store.db",
    )
    scenario.build(source)
    parts = [
        {"type": "text", "text": "a picture of an okapi"},
        {"type": "image_url", "image_url": {"url": "data:x"}},
    ]
    source.one(call("state.append_message", "tui-1", "user", parts))
    return source


def _hermes_view(hermes: Hermes, session_ids: list[str]) -> dict[str, list[tuple]]:
    """What Hermes loads for each session, without the ids (an import gives new ones)."""
    results = hermes.run([call("state.get_messages", sid) for sid in session_ids])
    return {
        sid: [(m["role"], m["content"], m["tool_calls"], m["tool_name"]) for m in found]
        for sid, found in zip(session_ids, results, strict=True)
    }


def test_a_hermes_export_imports_and_hermes_reads_it_back(source_store, hermes, attach):
    exports = source_store.run([call("state.export_session", sid) for sid in EXPORTED])
    expected = _hermes_view(source_store, EXPORTED)
    jsonl = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in exports)
    hermes.one(call("state.session_count"))  # an empty store Hermes created
    attach()
    result = portability.import_sessions(sessions=portability.read_export(jsonl))
    assert set(result.imported) == set(EXPORTED)
    # cli-1's parent is in the file; sub-1's parent (cli-2) too; nothing detached.
    assert result.detached == ()
    assert _hermes_view(hermes, EXPORTED) == expected
    assert search(hermes, "okapi", "elephant", "gazelle") == {
        "okapi": {"tui-1"},
        "elephant": {"cli-1", "cli-2"},
        "gazelle": {"sub-1"},
    }
    assert hermes.one(call("state.get_session", "cli-1"))["title"] == "Refactor plan"
    assert_healthy(hermes, counted=set(EXPORTED))
    # The same file again is refused, clearly, and changes nothing.
    with pytest.raises(portability.ImportRefused, match="already exist in the store"):
        portability.import_sessions(sessions=portability.read_export(jsonl))


def test_our_export_of_a_hermes_store_imports_into_another(source_store, hermes, attach):
    # Export from the source store (attached for the export), import into a fresh one.
    expected = _hermes_view(source_store, EXPORTED)
    home = source_store.home
    hermes.one(call("state.session_count"))
    attach(init=False)
    connections["store"].close()
    connections.settings["store"]["NAME"] = str(home / "state.db")
    try:
        exported = "".join(portability.export_jsonl(EXPORTED))
    finally:
        connections["store"].close()
        connections.settings["store"]["NAME"] = str(hermes.state)
    assert db.fetchone("SELECT COUNT(*) FROM sessions")[0] == 0
    result = portability.import_sessions(sessions=portability.read_export(exported))
    assert set(result.imported) == set(EXPORTED)
    # Hermes reads the active transcript the same; the undone rows came along inactive.
    assert _hermes_view(hermes, EXPORTED) == expected
    undone = hermes.one(call("state.get_messages", "tui-1", include_inactive=True))
    assert [m["active"] for m in undone].count(0) == 2
    assert_healthy(hermes, counted=set(EXPORTED))
