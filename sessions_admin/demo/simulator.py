"""A runtime simulator: many chats driving the store core the way an agent gateway does.

``manage.py simulate_runtime`` runs it (README, "Commands"; the demo runs a slow one, the
concurrency tests several while operators act). Everything goes through ``sessions_admin.core``,
never SQL. Gateway chats send turns and now and then reset, compress, branch, undo/retry/redo,
resume, expire or take a title from a small pool; API chats continue a slug, and a fraction of
their turns cold-start a new unlinked session (the pre-#16517 fork the dashboard repairs).
Errors are handled as a runtime would: ``SessionEnded`` follows the live session it names,
``SessionNotFound`` starts anew, ``StoreBusy`` backs off. Switches are followed both by a
listener and by the event log's cursor (gaps counted). As a hostile runtime (``stale_rate``)
chats keep stale ids and transcripts (an accepted save must append nothing:
``stale_saves_appended``) and ``slow_listener`` hangs a listener. The optional acknowledgement
log (``--acks``, JSONL: ``ack`` per acknowledged message, ``refused``) is for ``check_acks``."""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from django.db import OperationalError, connections
from django.db.utils import DatabaseError

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.errors import StoreError

T = TypeVar("T")

GATEWAY_SOURCES = ("telegram", "discord", "cli")
API_SOURCE = "api_server"
MODELS = ("gpt-4.1", "claude-sonnet-4", "llama-3.3-70b")
TOOLS = ("web_search", "read_file", "terminal", "calendar", "send_message")
TOPICS = (
    "the quarterly budget spreadsheet",
    "a flight to Lisbon next Tuesday",
    "why the nightly backup failed",
    "a recipe for vegetable curry",
    "renaming the staging database",
    "the flaky integration test",
    "invoice numbers for October",
    "a birthday present for my sister",
    "deploying the new landing page",
    "the noisy fan in the server room",
)
TITLES = (
    "Budget review",
    "Trip planning",
    "Backup failure",
    "Dinner ideas",
    "Database rename",
    "Flaky test",
    "Invoices",
    "Gift ideas",
)
# How many times one append follows a switch or retries a busy store before giving up.
MAX_APPEND_ATTEMPTS = 6
BUSY_RETRIES = 8
EVENT_POLL_SECONDS = 1.0
SAVE_SHARE = 0.08  # of a hostile gateway chat's actions, a save of its in-memory history


def message_hash(role: str, content: Any, tool_call_id: Any = None, tool_calls: Any = None) -> str:
    """The acknowledgement log's fingerprint of a stored message (the text columns as the store holds them)."""
    text = json.dumps([role, content, tool_call_id, tool_calls], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class SimulatorOptions:
    chats: int = 10
    duration: float = 10.0  # seconds; 0 runs until stopped
    seed: int | None = None
    think_time: float = 0.2  # mean seconds between two actions of one chat
    acks_path: Path | None = None
    label: str = ""  # keeps keys and slugs of concurrent simulators apart; default: the pid
    cold_start_rate: float = 0.05  # share of API turns that mint an unlinked session
    evict_keep: int = 500  # responses the LRU keeps; 0 never evicts
    api_share: float = 0.25  # share of chats that are API conversations
    max_actions: int | None = None
    stale_rate: float = 0.1  # share of chances to act on a stale id or history (0: never)
    slow_listener: float = 0.0  # seconds a slow listener hangs now and then; 0: none
    slow_listener_every: int = 5  # it hangs on every n-th switch it hears, the first included


@dataclass
class Chat:
    index: int
    source: str
    session_key: str | None
    chat_id: str
    user_id: str
    model: str
    session_id: str | None = None
    history: list[str] = field(default_factory=list)  # earlier sessions of this chat
    turns_since_compression: int = 0
    compress_after: int = 8
    slug: str | None = None
    previous_response_id: str | None = None
    slug_count: int = 0
    due: float = 0.0
    # What the runtime holds in memory: the history of memory_session as it last
    # knew it (None: not loaded), possibly stale.
    memory: list[dict[str, Any]] | None = None
    memory_session: str | None = None
    forgetting: bool = False  # the turn being sent is written by another worker
    save_due: bool = False  # its next action saves the history

    @property
    def is_api(self) -> bool:
        return self.source == API_SOURCE


class AckLog:
    """Append-only JSONL; one line per acknowledged or refused append, flushed at once."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class _SwitchListener:
    """What a memory provider registers: it hears of every switch this process makes."""

    def __init__(self, counts: Counter) -> None:
        self.counts = counts

    def on_session_switch(self, new_session_id: str, *, reason: str, **kwargs: Any) -> None:
        self.counts[f"listener_{reason}"] += 1


class _SlowListener:
    """A memory provider that now and then hangs longer than the listener time limit.

    It keeps its own tallies (it runs on a dispatcher thread, not the
    simulator's); ``wake`` ends a hang when the run is over.
    """

    def __init__(self, seconds: float, every: int) -> None:
        self.seconds = seconds
        self.every = max(1, every)
        self.wake = threading.Event()
        self.calls = 0
        self.hangs = 0

    def on_session_switch(self, new_session_id: str, **kwargs: Any) -> None:
        self.calls += 1
        if (self.calls - 1) % self.every == 0:
            self.hangs += 1
            self.wake.wait(self.seconds)


class RuntimeSimulator:
    def __init__(
        self,
        options: SimulatorOptions,
        *,
        stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self.stop_event = stop or threading.Event()
        self.log = log or (lambda _text: None)
        self.rng = random.Random(options.seed)
        # The hostile runtime's choices draw from their own stream, so the chats'
        # ordinary actions and content stay the run a seed gave before (and with
        # stale_rate 0 exactly that run).
        self.hostile_rng = random.Random(None if options.seed is None else options.seed + 7919)
        self.label = options.label or f"p{os.getpid()}"
        self.counts: Counter = Counter()
        self.acks = AckLog(options.acks_path)
        self.listener = _SwitchListener(self.counts)
        self.slow_listener = (
            _SlowListener(options.slow_listener, options.slow_listener_every)
            if options.slow_listener > 0
            else None
        )
        self.sessions_seen: set[str] = set()
        self.event_cursor = 0
        self.next_event_poll = 0.0
        self.started = 0.0
        self.finished = 0.0
        self.chats = [self._new_chat(n) for n in range(options.chats)]

    # ------------------------------------------------------------------ setup

    def _new_chat(self, n: int) -> Chat:
        api = self.rng.random() < self.options.api_share
        source = API_SOURCE if api else GATEWAY_SOURCES[n % len(GATEWAY_SOURCES)]
        return Chat(
            index=n,
            source=source,
            session_key=None if api else f"agent:main:{source}:{self.label}:{n}",
            chat_id=f"{self.label}-{n}",
            user_id=f"user-{self.label}-{n % 7}",
            model=self.rng.choice(MODELS),
            compress_after=self.rng.randint(6, 14),
        )

    def stop(self) -> None:
        self.stop_event.set()

    # --------------------------------------------------------------- running

    def run(self) -> Counter:
        """Act until the duration is over, ``stop()`` is called or ``max_actions`` ran."""
        core.register_listener(self.listener)
        if self.slow_listener is not None:
            core.register_listener(self.slow_listener)
        self.started = time.monotonic()
        deadline = self.started + self.options.duration if self.options.duration > 0 else None
        try:
            self._start_event_cursor()
            for chat in self.chats:
                chat.due = self.started + self.rng.random() * self.options.think_time
            while not self.stop_event.is_set():
                if self.options.max_actions is not None and (
                    self.counts["actions"] >= self.options.max_actions
                ):
                    break
                chat = min(self.chats, key=lambda c: c.due)
                now = time.monotonic()
                if deadline is not None and max(chat.due, now) >= deadline:
                    break
                if chat.due > now:
                    wait = chat.due - now
                    if deadline is not None:
                        wait = min(wait, max(0.0, deadline - now))
                    if self.stop_event.wait(wait):
                        break
                    continue
                self._poll_events()
                self._act(chat)
                if self.options.think_time > 0:
                    chat.due = time.monotonic() + self.rng.expovariate(
                        1.0 / self.options.think_time
                    )
                else:
                    # No pauses: take the chats in turn, so a seed repeats the same run.
                    chat.due = max(c.due for c in self.chats) + 1e-9
        finally:
            self.finished = time.monotonic()
            core.unregister_listener(self.listener)
            if self.slow_listener is not None:
                self.slow_listener.wake.set()
                core.unregister_listener(self.slow_listener)
                self.counts["slow_listener_calls"] = self.slow_listener.calls
                self.counts["slow_listener_hangs"] = self.slow_listener.hangs
            self.acks.close()
            connections.close_all()
        return self.counts

    def _act(self, chat: Chat) -> None:
        self.counts["actions"] += 1
        try:
            if chat.is_api:
                self._act_api(chat)
            else:
                self._act_gateway(chat)
        except StoreError as error:
            # A refusal the runtime reports to its user and moves on from.
            self.counts[f"refused_{type(error).__name__}"] += 1
        except Exception as error:  # noqa: BLE001 - counted and logged, the run goes on
            self.counts["unexpected_errors"] += 1
            self.log(f"unexpected error in chat {chat.index}: {type(error).__name__}: {error}")
            self.acks.write(
                {
                    "kind": "error",
                    "chat": chat.index,
                    "session_id": chat.session_id,
                    "error": type(error).__name__,
                    "detail": str(error)[:500],
                }
            )
            connections.close_all()

    # --------------------------------------------------------- store calls

    def _call(self, operation: Callable[..., T], **kwargs: Any) -> T:
        """One core call; a busy store is retried after a growing pause, as a runtime would."""
        for attempt in range(1, BUSY_RETRIES + 1):
            try:
                return operation(**kwargs)
            except core.StoreBusy:
                self.counts["busy_retries"] += 1
                if attempt == BUSY_RETRIES:
                    raise
            except (OperationalError, DatabaseError) as error:
                # Calls that are not store operations (eviction) see the raw lock error.
                if not db.is_busy_error(error) or attempt == BUSY_RETRIES:
                    raise
                self.counts["busy_retries"] += 1
                connections.close_all()
            time.sleep(min(1.0, 0.05 * 2**attempt) * (0.5 + self.rng.random()))
        raise AssertionError("unreachable")

    def _start_session(self, chat: Chat) -> str:
        if chat.is_api:
            return self._cold_start(chat)
        ref = self._call(
            core.create_session,
            source=chat.source,
            session_key=chat.session_key,
            chat_id=chat.chat_id,
            chat_type="dm" if chat.index % 2 else "group",
            user_id=chat.user_id,
            model=chat.model,
            model_config={"provider": "simulated", "temperature": 0.7},
        )
        self.counts["sessions_started"] += 1
        return self._switch(chat, ref.session_id)

    def _switch(self, chat: Chat, session_id: str) -> str:
        if chat.session_id and chat.session_id != session_id:
            if chat.session_id not in chat.history:
                chat.history.append(chat.session_id)
            del chat.history[:-20]
            # A runtime that follows a switch loads the new session's history when it needs it.
            chat.memory, chat.memory_session = None, None
        chat.session_id = session_id
        self.sessions_seen.add(session_id)
        return session_id

    def _rotated(self, chat: Chat, session_id: str) -> None:
        """The chat's own rotation made ``session_id`` live; a stale runtime keeps its cached id."""
        if chat.session_id and chat.session_id != session_id and self._stale():
            self.counts["stale_ids_kept"] += 1
            self.sessions_seen.add(session_id)
            if session_id not in chat.history:
                chat.history.append(session_id)
            return
        self._switch(chat, session_id)

    def _stale(self, share: float | None = None) -> bool:
        rate = self.options.stale_rate if share is None else share
        return self.options.stale_rate > 0 and self.hostile_rng.random() < rate

    def _follow(self, chat: Chat, error: core.SessionEnded) -> None:
        """Carry on where the ended session continues, or afresh."""
        if error.live_session_id:
            self.counts["followed_session_ended"] += 1
            self._switch(chat, error.live_session_id)
        else:
            self._start_session(chat)

    def _append(self, chat: Chat, message: dict[str, Any]) -> str:
        """Append one message to the chat's session, following switches; returns where it landed."""
        if chat.session_id is None:
            self._start_session(chat)
        for _attempt in range(MAX_APPEND_ATTEMPTS):
            target = chat.session_id
            try:
                result = self._call(core.append_messages, session_id=target, messages=[message])
            except core.SessionEnded as error:
                self._refused(chat, target, error)
                if error.live_session_id:
                    self.counts["followed_session_ended"] += 1
                    self._switch(chat, error.live_session_id)
                else:
                    self._start_session(chat)
                continue
            except core.SessionNotFound as error:
                self._refused(chat, target, error)
                self.counts["restarted_after_delete"] += 1
                chat.session_id = None
                self._start_session(chat)
                continue
            except StoreError as error:
                self._refused(chat, target, error)
                raise
            self.counts["appends"] += 1
            self._remember(chat, result.session_id, message, result.message_ids)
            for message_id in result.message_ids:
                self.acks.write(
                    {
                        "kind": "ack",
                        "chat": chat.index,
                        "session_id": result.session_id,
                        "message_id": message_id,
                        "hash": message_hash(
                            message["role"],
                            message.get("content"),
                            message.get("tool_call_id"),
                            message.get("tool_calls"),
                        ),
                    }
                )
            return result.session_id
        raise core.StoreBusy("append_messages (the session kept switching)", MAX_APPEND_ATTEMPTS)

    def _refused(
        self,
        chat: Chat,
        session_id: str | None,
        error: Exception,
        *,
        operation: str = "append_messages",
    ) -> None:
        self.counts["append_refusals" if operation == "append_messages" else "other_refusals"] += 1
        self.acks.write(
            {
                "kind": "refused",
                "chat": chat.index,
                "session_id": session_id,
                "operation": operation,
                "error": type(error).__name__,
                "detail": str(error)[:300],
            }
        )

    # -------------------------------------------------------------- memory

    def _remember(self, chat: Chat, session_id: str, message: Mapping[str, Any], ids: Any) -> None:
        """The runtime's in-memory history gains what it wrote (unless another worker wrote it)."""
        if chat.forgetting or chat.memory is None or chat.memory_session != session_id:
            return
        for message_id in ids:
            chat.memory.append({**message, "id": message_id})

    def _reload_memory(self, chat: Chat) -> None:
        """Load the history as the runtime does at start or after a refusal."""
        chat.memory, chat.memory_session = None, None
        if chat.session_id is None:
            return
        try:
            chat.memory = self._call(core.active_transcript, session_id=chat.session_id)
        except core.SessionNotFound:
            return
        chat.memory_session = chat.session_id
        self.counts["histories_loaded"] += 1

    def _save_history(self, chat: Chat) -> None:
        """Save the in-memory history, stale or not; refusals reload it from the store."""
        if chat.memory is None or chat.memory_session is None:
            self._reload_memory(chat)
            return
        session_id, memory = chat.memory_session, chat.memory
        remembered = [int(m["id"]) for m in memory if m.get("id") is not None]
        undone = self._inactive(session_id, remembered)
        try:
            result = self._call(core.save_transcript, session_id=session_id, messages=memory)
        except (core.TruncationRefused, core.SessionEnded) as error:
            self._refused(chat, session_id, error, operation="save_transcript")
            self.counts[f"stale_saves_refused_{type(error).__name__}"] += 1
            if isinstance(error, core.SessionEnded) and chat.session_id == session_id:
                self._follow(chat, error)
            self._reload_memory(chat)
            return
        except core.SessionNotFound:
            chat.memory, chat.memory_session = None, None
            return
        self.counts["saves"] += 1
        if result.appended:
            # Every remembered message was once a row of this session: only an
            # operator's unmerge (rows moved back out) makes them new again.
            self.counts["stale_saves_appended"] += 1
        if undone:
            self.counts["stale_saves_holding_undone"] += 1
            if len(self._inactive(session_id, sorted(undone))) != len(undone):
                # An undone turn came back (or an operator redid it meanwhile).
                self.counts["undone_rows_active_after_save"] += 1

    def _inactive(self, session_id: str, ids: list[int]) -> set[int]:
        found: set[int] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            found.update(
                int(r[0])
                for r in db.fetchall(
                    "SELECT id FROM messages WHERE session_id = %s AND active = 0 "
                    f"AND id IN ({db.placeholders(chunk)})",
                    [session_id, *chunk],
                )
            )
        return found

    # -------------------------------------------------------------- content

    def _turn_messages(self, chat: Chat) -> list[dict[str, Any]]:
        n = self.counts["turns"]
        tag = f"[{self.label}-{chat.index}-{n}]"
        topic = self.rng.choice(TOPICS)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"Can you help me with {topic}? {tag}"}
        ]
        if self.rng.random() < 0.6:
            calls = []
            for k in range(self.rng.randint(1, 2)):
                tool = self.rng.choice(TOOLS)
                calls.append(
                    {
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "function",
                        "function": {"name": tool, "arguments": db.dumps({"query": topic, "n": k})},
                    }
                )
            messages.append({"role": "assistant", "content": None, "tool_calls": db.dumps(calls)})
            for call in calls:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "tool_name": call["function"]["name"],
                        "content": f"{call['function']['name']} found 3 results about {topic} {tag}",
                    }
                )
        messages.append(
            {
                "role": "assistant",
                "content": f"Here is what I found about {topic}: it is sorted. {tag}",
                "finish_reason": "stop",
            }
        )
        return messages

    def _send_turn(self, chat: Chat) -> str:
        self.counts["turns"] += 1
        landed = chat.session_id
        # Another worker of the same chat writes this turn: this one's memory misses it.
        chat.forgetting = chat.memory is not None and self._stale()
        if chat.forgetting:
            self.counts["turns_missed_by_memory"] += 1
        try:
            for message in self._turn_messages(chat):
                landed = self._append(chat, message)
        finally:
            chat.forgetting = False
        chat.turns_since_compression += 1
        try:
            self._call(
                core.add_usage,
                session_id=landed,
                input_tokens=self.rng.randint(200, 4000),
                output_tokens=self.rng.randint(50, 800),
                cost_usd=round(self.rng.random() / 100, 5),
            )
        except core.SessionNotFound:
            pass  # deleted in between: the next turn starts a new session
        return landed

    # ------------------------------------------------------------- gateway

    def _act_gateway(self, chat: Chat) -> None:
        if chat.session_id is None:
            self._start_session(chat)
        if chat.save_due or self._stale(SAVE_SHARE):
            chat.save_due = False
            self._save_history(chat)
            return
        roll = self.rng.random()
        if chat.turns_since_compression >= chat.compress_after and roll < 0.5:
            self._compress(chat)
        elif roll < 0.03:
            self._reset(chat)
        elif roll < 0.05:
            self._branch(chat)
        elif roll < 0.08:
            self._rewrite(chat, "undo")
        elif roll < 0.11:
            self._rewrite(chat, "retry")
        elif roll < 0.13:
            self._rewrite(chat, "redo")
        elif roll < 0.15:
            self._resume_older(chat)
        elif roll < 0.17:
            self._expire(chat)
        elif roll < 0.18:
            self._set_title(chat)
        else:
            self._send_turn(chat)

    def _compress(self, chat: Chat) -> None:
        try:
            rotated = self._rotate(
                chat,
                "compressions",
                core.rotate_for_compression,
                session_id=chat.session_id,
                summary=f"Summary of the conversation so far ({chat.turns_since_compression} turns).",
            )
        except core.SessionEnded as error:
            # Someone else ended it first (or the id was stale): carry on where it continues.
            self._refused(chat, chat.session_id, error, operation="rotate_for_compression")
            self._follow(chat, error)
            return
        if rotated:
            chat.turns_since_compression = 0

    def _reset(self, chat: Chat) -> None:
        if self._rotate(chat, "resets", core.reset_session_key, session_key=chat.session_key):
            chat.turns_since_compression = 0

    def _branch(self, chat: Chat) -> None:
        self._rotate(chat, "branches", core.branch_session, session_id=chat.session_id)

    def _rotate(
        self, chat: Chat, counted: str, operation: Callable[..., Any], **kwargs: Any
    ) -> bool:
        """A rotation (``operation`` returns the ``new_session_id``) the chat then follows;
        False when its session was deleted meanwhile: a new one is started instead."""
        try:
            result = self._call(operation, **kwargs)
        except core.SessionNotFound:
            chat.session_id = None
            self._start_session(chat)
            return False
        self.counts[counted] += 1
        self._rotated(chat, result.new_session_id)
        return True

    def _rewrite(self, chat: Chat, action: str) -> None:
        operation = {
            "undo": core.undo_last_turn,
            "retry": core.retry_last_turn,
            "redo": core.redo_turn,
        }[action]
        # Done from the console by an operator, the runtime unaware: its memory keeps the turn.
        unseen = self._stale()
        if unseen and chat.memory is None:
            self._reload_memory(chat)
        try:
            self._call(operation, session_id=chat.session_id)
        except core.NothingToUndo:
            self.counts[f"{action}_nothing"] += 1
            return
        except core.SessionEnded as error:
            # A stale id: only the live session's transcript is rewound.
            self._refused(chat, chat.session_id, error, operation=f"{action}_turn")
            self._follow(chat, error)
            return
        except core.SessionNotFound:
            chat.session_id = None
            self._start_session(chat)
            return
        self.counts[action] += 1
        if unseen:
            self.counts[f"{action}_unseen_by_memory"] += 1
            chat.save_due = True  # the runtime saves its history when its turn ends
        else:
            chat.memory, chat.memory_session = None, None
        if action == "retry":
            self._append(
                chat,
                {
                    "role": "assistant",
                    "content": f"Let me try that again. [{self.label}-{chat.index}-r{self.counts['retry']}]",
                    "finish_reason": "stop",
                },
            )

    def _resume_older(self, chat: Chat) -> None:
        older = [sid for sid in chat.history if sid != chat.session_id]
        if not older:
            self._send_turn(chat)
            return
        ref = self.rng.choice(older)
        try:
            result = self._call(core.resume_session, ref=ref)
        except (core.SessionNotFound, core.AmbiguousSessionRef):
            chat.history.remove(ref)
            return
        self.counts["resumes"] += 1
        self._rotated(chat, result.session_id)

    def _expire(self, chat: Chat) -> None:
        # The gateway's idle expiry: the session ends; the stale id stays cached, so
        # the next append is refused (SessionEnded) and a new session starts.
        try:
            self._call(core.end_session, session_id=chat.session_id, end_reason="idle_timeout")
        except core.SessionNotFound:
            chat.session_id = None
            return
        self.counts["expiries"] += 1

    def _set_title(self, chat: Chat) -> None:
        title = f"{self.rng.choice(TITLES)} {self.rng.randint(1, 30)}"
        try:
            self._call(core.set_title, session_id=chat.session_id, title=title)
        except core.TitleTaken:
            self.counts["titles_taken"] += 1
            return
        except core.SessionNotFound:
            chat.session_id = None
            return
        self.counts["titles"] += 1

    # ----------------------------------------------------------------- API

    def _new_slug(self, chat: Chat) -> None:
        chat.slug_count += 1
        chat.slug = f"{self.label}-conv-{chat.index}-{chat.slug_count}"
        chat.previous_response_id = None
        if chat.session_id:
            chat.history.append(chat.session_id)
        chat.session_id = None

    def _act_api(self, chat: Chat) -> None:
        if chat.slug is None:
            self._new_slug(chat)
        roll = self.rng.random()
        if chat.previous_response_id and roll < self.options.cold_start_rate:
            chat.session_id = None
            self._cold_start(chat)
            self._api_turn(chat, resolve=False)
        elif roll < self.options.cold_start_rate + 0.02:
            self._new_slug(chat)
            self._api_turn(chat)
        elif roll < self.options.cold_start_rate + 0.05 and self.options.evict_keep > 0:
            evicted = self._call(core.evict_responses, keep_latest=self.options.evict_keep)
            self.counts["responses_evicted"] += evicted
        else:
            self._api_turn(chat)

    def _cold_start(self, chat: Chat) -> str:
        """The old runtime's cold start: a new unlinked session for a slug it already knows."""
        ref = self._call(
            core.create_session, source=API_SOURCE, user_id=chat.user_id, model=chat.model
        )
        self.counts["sessions_started"] += 1
        if chat.previous_response_id:
            self.counts["cold_starts"] += 1
        return self._switch(chat, ref.session_id)

    def _api_turn(self, chat: Chat, *, resolve: bool = True) -> None:
        if resolve:
            try:
                target = self._call(
                    core.resolve_conversation,
                    conversation=chat.slug,
                    previous_response_id=chat.previous_response_id,
                    source=API_SOURCE,
                    user_id=chat.user_id,
                    model=chat.model,
                )
            except core.ConversationNotFound:
                # The slug or its last response was deleted: the client starts over.
                self.counts["conversations_lost"] += 1
                self._new_slug(chat)
                target = self._call(
                    core.resolve_conversation,
                    conversation=chat.slug,
                    source=API_SOURCE,
                    user_id=chat.user_id,
                    model=chat.model,
                )
            self._switch(chat, target.session_id)
            if target.created:
                self.counts["sessions_started"] += 1
        self.counts["turns"] += 1
        landed = chat.session_id
        for message in self._turn_messages(chat):
            landed = self._append(chat, message)
        response_id = f"resp_{uuid.uuid4().hex}"
        try:
            self._call(
                core.record_turn,
                response_id=response_id,
                session_id=landed,
                conversation=chat.slug,
                data={
                    "response": {
                        "id": response_id,
                        "previous_response_id": chat.previous_response_id,
                        "model": chat.model,
                    }
                },
            )
        except core.SessionNotFound:
            self._new_slug(chat)
            return
        chat.previous_response_id = response_id

    # -------------------------------------------------------------- events

    def _start_event_cursor(self) -> None:
        row = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
        self.event_cursor = int(row[0])
        self.next_event_poll = time.monotonic() + EVENT_POLL_SECONDS

    def _poll_events(self) -> None:
        """Follow the switch-event log as a runtime in another process would, by cursor."""
        if time.monotonic() < self.next_event_poll:
            return
        self.next_event_poll = time.monotonic() + EVENT_POLL_SECONDS
        by_session = {chat.session_id: chat for chat in self.chats if chat.session_id}
        while True:
            events = core.read_switch_events(after_seq=self.event_cursor, limit=1000)
            for event in events:
                if event.seq != self.event_cursor + 1:
                    self.counts["event_log_gaps"] += 1
                self.event_cursor = event.seq
                self.counts["events_read"] += 1
                chat = by_session.get(event.previous_session_id or "")
                if chat is not None and chat.session_id != event.new_session_id:
                    # An operator (or another process) switched this chat's session.
                    self.counts["followed_event_log"] += 1
                    del by_session[chat.session_id]
                    self._switch(chat, event.new_session_id)
                    by_session[event.new_session_id] = chat
            if len(events) < 1000:
                return

    # ------------------------------------------------------------- summary

    def summary(self) -> str:
        elapsed = max(1e-9, (self.finished or time.monotonic()) - self.started)
        c = self.counts
        refusals = sum(v for k, v in c.items() if k.startswith("refused_")) + c["append_refusals"]
        lines = [
            f"Simulated {len(self.chats)} chats for {elapsed:.1f}s: {c['turns']} turns, "
            f"{c['appends']} appends ({c['appends'] / elapsed:.1f}/s), "
            f"{c['actions'] / elapsed:.1f} actions/s, {len(self.sessions_seen)} sessions, "
            f"{refusals} refusals, {c['unexpected_errors']} unexpected errors.",
        ]
        detail = ", ".join(
            f"{k} {v}"
            for k, v in sorted(c.items())
            if k not in {"turns", "appends", "actions", "unexpected_errors"} and v
        )
        if detail:
            lines.append(f"  {detail}")
        return "\n".join(lines)
