"""Read models over the runtime's tables.

``managed = False``: Django never creates, migrates or flushes these tables;
the runtime owns them and ``sessions_admin.core.schema`` creates them
additively. Writes go through ``sessions_admin.core`` only.
"""

from __future__ import annotations

from django.db import models

from sessions_admin.core.rows import parse_model_config
from sessions_admin.routers import responses_alias


class Session(models.Model):
    id = models.TextField(primary_key=True)
    source = models.TextField()
    user_id = models.TextField(null=True)
    session_key = models.TextField(null=True)
    chat_id = models.TextField(null=True)
    chat_type = models.TextField(null=True)
    thread_id = models.TextField(null=True)
    model = models.TextField(null=True)
    model_config = models.TextField(null=True)
    parent = models.ForeignKey(
        "self",
        db_column="parent_session_id",
        null=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="children",
    )
    started_at = models.FloatField()
    ended_at = models.FloatField(null=True)
    end_reason = models.TextField(null=True)
    message_count = models.IntegerField(default=0)
    tool_call_count = models.IntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    estimated_cost_usd = models.FloatField(null=True)
    title = models.TextField(null=True)
    archived = models.IntegerField(default=0)
    rewind_count = models.IntegerField(default=0)

    class Meta:
        managed = False
        db_table = "sessions"
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return self.title or self.id

    @property
    def is_live(self) -> bool:
        return self.ended_at is None

    @property
    def config(self) -> dict:
        return parse_model_config(self.model_config)


class Message(models.Model):
    # The id is the ordering authority within a session, never the timestamp.
    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(
        Session,
        db_column="session_id",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="messages",
    )
    role = models.TextField()
    content = models.TextField(null=True)
    tool_call_id = models.TextField(null=True)
    tool_calls = models.TextField(null=True)
    tool_name = models.TextField(null=True)
    timestamp = models.FloatField()
    token_count = models.IntegerField(null=True)
    finish_reason = models.TextField(null=True)
    reasoning = models.TextField(null=True)
    active = models.IntegerField(default=1)
    compacted = models.IntegerField(default=0)

    class Meta:
        managed = False
        db_table = "messages"
        ordering = ["id"]


class Conversation(models.Model):
    store_alias = staticmethod(responses_alias)

    name = models.TextField(primary_key=True)
    response_id = models.TextField()
    session_id = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "conversations"


class SwitchEvent(models.Model):
    """The persisted, ordered log of session switches (ours, additive to the store)."""

    seq = models.BigIntegerField(primary_key=True)
    created_at = models.FloatField()
    new_session_id = models.TextField()
    previous_session_id = models.TextField(null=True)
    parent_session_id = models.TextField(null=True)
    reset = models.IntegerField(default=0)
    reason = models.TextField()
    session_key = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "sessions_admin_switch_events"
        ordering = ["seq"]
