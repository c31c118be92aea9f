"""The runtime simulator drives the core as a gateway does; the consistency checks catch what they claim to."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.core.management import CommandError, call_command

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.demo.consistency import check_acks, check_store, read_acks
from sessions_admin.demo.simulator import RuntimeSimulator, SimulatorOptions
from sessions_admin.ledger.models import TrashEntry
from tests.builders import foreign_keys_off
from tests.helpers import count, one, rows


def _run(tmp_path, **options) -> RuntimeSimulator:
    simulator = RuntimeSimulator(
        SimulatorOptions(
            chats=options.pop("chats", 8),
            duration=60,
            seed=options.pop("seed", 3),
            think_time=0,
            acks_path=tmp_path / "ledger.jsonl",
            label="t",
            max_actions=options.pop("max_actions", 300),
            api_share=options.pop("api_share", 0.4),
            cold_start_rate=options.pop("cold_start_rate", 0.1),
            **options,
        )
    )
    simulator.run()
    return simulator


def test_a_run_leaves_a_consistent_store_and_a_ledger_that_matches_it(tmp_path):
    # 800 actions: with 300 the run made a single undo, and one timing-dependent refusal left
    # none (a CI run failed on "undo"); 800 give each lifecycle kind several.
    simulator = _run(tmp_path, max_actions=800)
    counts = simulator.counts
    assert counts["unexpected_errors"] == 0
    # It exercised the lifecycle, not just appends.
    for kind in ("turns", "compressions", "resets", "branches", "cold_starts", "undo", "retry"):
        assert counts[kind] > 0, kind
    assert counts["listener_compression"] == counts["compressions"]
    assert check_store() == []
    assert check_acks([tmp_path / "ledger.jsonl"]) == []
    acked, refused, errors = read_acks([tmp_path / "ledger.jsonl"])
    assert errors == []
    assert len(acked) == counts["appends"] > 0
    # Every acknowledged message is in the store, in the session the ledger names.
    stored = dict(rows("SELECT id, session_id FROM messages"))
    assert all(stored[mid] == record["session_id"] for mid, record in acked.items())
    # An expired session's stale id was refused and the chat went on elsewhere.
    assert counts["expiries"] > 0 and any(r["error"] == "SessionEnded" for r in refused)
    # Cold starts left the forks the dashboard repairs.
    assert any(g.kind == "conversation" for g in core.find_fork_groups())


def test_the_ledger_check_counts_the_trash_and_flags_lost_or_changed_messages(tmp_path):
    _run(tmp_path, max_actions=80)
    ledger = tmp_path / "ledger.jsonl"
    acked, _, _ = read_acks([ledger])
    victim = next(iter(acked.values()))["session_id"]
    plan = core.plan_cascade_delete(session_ids=[victim])
    core.execute_cascade_delete(
        session_ids=[victim], expected_fingerprint=plan.fingerprint, actor="t", reason="test"
    )
    assert one("SELECT 1 FROM sessions WHERE id = %s", [victim]) is None
    # Deleted messages are in the trash: still accounted for exactly once.
    assert check_acks([ledger]) == []
    assert check_store() == []

    # A trash entry purged: its acknowledged messages are reported lost.
    TrashEntry.objects.all().delete()
    assert "neither in the store nor in the trash" in " ".join(check_acks([ledger]))


def test_the_ledger_check_flags_a_message_whose_content_changed(tmp_path):
    _run(tmp_path, max_actions=60)
    ledger = tmp_path / "ledger.jsonl"
    message_id = next(iter(read_acks([ledger])[0]))
    db.execute("UPDATE messages SET content = 'tampered' WHERE id = %s", [message_id])
    assert any("differs from what was acked" in p for p in check_acks([ledger]))


def test_the_store_check_names_each_broken_invariant(tmp_path):
    _run(tmp_path, max_actions=60)
    assert check_store() == []
    (session_id,) = one("SELECT session_id FROM messages ORDER BY id LIMIT 1")
    db.execute(
        "UPDATE sessions SET message_count = message_count + 1, tool_call_count = 99 WHERE id = %s",
        [session_id],
    )
    with foreign_keys_off():
        db.execute("UPDATE sessions SET parent_session_id = 'gone' WHERE id = %s", [session_id])
    db.execute(
        "UPDATE conversations SET session_id = 'gone' WHERE name IN "
        "(SELECT name FROM conversations ORDER BY name LIMIT 1)"
    )
    db.execute(
        "UPDATE sessions_admin_switch_events SET seq = seq + 1000 "
        "WHERE seq = (SELECT MAX(seq) FROM sessions_admin_switch_events)"
    )
    problems = " | ".join(check_store())
    assert "message_count differs" in problems
    assert "tool_call_count differs" in problems
    assert "parent is missing" in problems
    assert "conversation(s) recording a missing session" in problems
    assert "switch-event log has gaps" in problems
    assert session_id in problems


def test_the_store_check_finds_a_search_index_out_of_step(tmp_path):
    from django.db import connections

    if connections["store"].vendor != "sqlite":
        pytest.skip("PostgreSQL searches an expression over the row itself: nothing to drift")
    _run(tmp_path, max_actions=40)
    (message_id,) = one("SELECT MIN(id) FROM messages")
    db.execute("DELETE FROM messages_fts WHERE rowid = %s", [message_id])
    assert any("missing from messages_fts" in p for p in check_store())


def test_the_command_runs_briefly_and_prints_a_summary(tmp_path, capsys):
    ledger = tmp_path / "cmd.jsonl"
    call_command(
        "simulate_runtime",
        "--chats",
        "4",
        "--duration",
        "30",
        "--max-actions",
        "80",
        "--think-time",
        "0",
        "--seed",
        "5",
        "--ledger",
        str(ledger),
    )
    out = capsys.readouterr().out
    assert "Simulated 4 chats" in out and "turns" in out
    assert count("messages") > 0
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert {line["kind"] for line in lines} <= {"ack", "refused"}
    assert check_store() == []
    assert check_acks([ledger]) == []


@pytest.mark.parametrize(
    "args",
    [["--chats", "0"], ["--duration", "-1"], ["--rate", "0"], ["--cold-start-rate", "2"]],
)
def test_the_command_refuses_bad_options_and_writes_nothing(args):
    with pytest.raises(CommandError):
        call_command("simulate_runtime", *args)
    assert count("sessions") == 0


def test_a_run_without_pauses_still_ends_when_its_duration_is_over():
    simulator = RuntimeSimulator(
        SimulatorOptions(chats=2, duration=1.5, seed=1, think_time=0, label="d")
    )
    # A guard against a run that never ends (the test fails instead of hanging).
    worker = threading.Thread(target=simulator.run, daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():
        simulator.stop()
        worker.join(30)
        pytest.fail("the run went on past its duration")
    assert simulator.counts["actions"] > 0


def test_the_check_command_reports_a_consistent_store_then_a_broken_one(tmp_path, capsys):
    _run(tmp_path, max_actions=40)
    call_command("check_consistency", "--ledger", str(tmp_path / "ledger.jsonl"))
    assert "consistent with the acks" in capsys.readouterr().out
    db.execute("UPDATE sessions SET message_count = 999")
    with pytest.raises(CommandError, match="consistency problem"):
        call_command("check_consistency")
    assert "message_count differs" in capsys.readouterr().out
    with pytest.raises(CommandError, match="No such acks file"):
        call_command("check_consistency", "--ledger", str(tmp_path / "nope.jsonl"))


# --------------------------------------------------------------------------- a hostile runtime


def test_a_stale_runtime_is_refused_follows_the_live_session_and_resurrects_nothing(tmp_path):
    simulator = _run(tmp_path, chats=6, max_actions=700, api_share=0.2, stale_rate=0.3, seed=4)
    counts = simulator.counts
    assert counts["unexpected_errors"] == 0
    # It kept rotated ids and wrote with them: refused, then it followed the live session.
    assert counts["stale_ids_kept"] > 0
    assert counts["followed_session_ended"] > 0
    acked, refused, errors = read_acks([tmp_path / "ledger.jsonl"])
    assert errors == []
    stale_refusals = [r for r in refused if r["error"] == "SessionEnded"]
    assert stale_refusals
    # Every session a stale write was refused on had ended (or was deleted since): if it is
    # live now, a later resume (or unmerge) brought it back, as the switch log shows.
    for sid in {r["session_id"] for r in stale_refusals}:
        row = one("SELECT ended_at FROM sessions WHERE id = %s", [sid])
        reopened = one(
            "SELECT 1 FROM sessions_admin_switch_events WHERE new_session_id = %s "
            "AND reason IN ('resume', 'unmerge')",
            [sid],
        )
        assert row is None or row[0] is not None or reopened, sid
    # Stale histories: one missing turns was refused and reloaded ...
    assert counts["turns_missed_by_memory"] > 0
    assert counts["stale_saves_refused_TruncationRefused"] > 0
    assert any(r.get("operation") == "save_transcript" for r in refused)
    # ... and one holding a turn undone behind its back was accepted, the turn left undone.
    assert counts["stale_saves_holding_undone"] > 0
    assert counts["stale_saves_appended"] == 0
    assert counts["undone_rows_active_after_save"] == 0
    assert len(acked) == counts["appends"]
    assert check_store() == []
    assert check_acks([tmp_path / "ledger.jsonl"]) == []


def test_a_listener_that_hangs_does_not_hold_the_runtime_up(tmp_path):
    hang = 20.0
    started = time.monotonic()
    simulator = _run(
        tmp_path, chats=6, max_actions=250, slow_listener=hang, slow_listener_every=3, seed=5
    )
    elapsed = time.monotonic() - started
    counts = simulator.counts
    assert counts["slow_listener_hangs"] >= 1
    assert counts["unexpected_errors"] == 0
    # On the caller's path the first hang alone would take longer than the whole run.
    assert elapsed < hang, elapsed
    # Every switch was still told to the well-behaved listener, in spite of the hung one.
    assert counts["listener_compression"] == counts["compressions"] > 0
    assert check_store() == []
    assert check_acks([tmp_path / "ledger.jsonl"]) == []


def test_a_hung_listener_costs_the_runtime_little_throughput(tmp_path):
    timings = {}
    for hang in (0.0, 20.0):
        started = time.monotonic()
        simulator = _run(
            tmp_path / str(hang),
            chats=6,
            max_actions=250,
            slow_listener=hang,
            slow_listener_every=3,
            seed=5,
        )
        timings[hang] = time.monotonic() - started
        assert simulator.counts["unexpected_errors"] == 0
    assert timings[20.0] < 2 * timings[0.0] + 1.0, timings


def test_the_command_takes_the_hostile_options_and_refuses_bad_ones(tmp_path, capsys):
    ledger = tmp_path / "hostile.jsonl"
    call_command(
        "simulate_runtime",
        *("--chats", "3", "--duration", "30", "--max-actions", "60", "--think-time", "0"),
        *("--seed", "2", "--stale-rate", "0.5", "--slow-listener", "3", "--ledger", str(ledger)),
    )
    assert "slow_listener_hangs" in capsys.readouterr().out
    assert check_acks([ledger]) == []
    for args in (["--stale-rate", "1.5"], ["--stale-rate", "nan"], ["--slow-listener", "-1"]):
        with pytest.raises(CommandError):
            call_command("simulate_runtime", *args)
