"""The dashboard's tables as migrations 0001 to 0009 left them, in one step.

``replaces`` keeps a database migrated to 0009 as it is (Django counts this one applied)
and lets a later migration still name 0009. A database left between 0001 and 0008
migrates first with a release that still has those files (before this squash).
0005's data step (old trash entries joining their job's operation) is left out: it had
rows to name only in a database older than 0005, which never runs this migration.
"""

import django.db.models.deletion
import sessions_admin.ledger.models
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    replaces = [
        ("ledger", "0001_initial"),
        ("ledger", "0002_text_session_ids"),
        ("ledger", "0003_audit_outcome_pending"),
        ("ledger", "0004_audit_client_and_refusals"),
        ("ledger", "0005_trash_operation"),
        ("ledger", "0006_retention_policies"),
        ("ledger", "0007_erasure_requests"),
        ("ledger", "0008_audit_partial_outcome"),
        ("ledger", "0009_trash_owner_and_restore_intent"),
    ]

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ErasureRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("reference", models.CharField(max_length=200)),
                ("subject", models.TextField(blank=True)),
                ("subject_hash", models.CharField(max_length=64)),
                ("salt", models.CharField(max_length=64)),
                ("fingerprint", models.CharField(blank=True, max_length=64)),
                ("state", models.CharField(db_index=True, default="pending", max_length=20)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("created_by", models.CharField(max_length=150)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("receipt", models.JSONField(default=dict)),
                ("error", models.TextField(blank=True)),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="RetentionPolicy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                ("source", models.CharField(blank=True, max_length=200)),
                ("older_than_days", models.FloatField()),
                ("status", models.CharField(default="ended", max_length=20)),
                ("end_reason", models.CharField(blank=True, max_length=200)),
                ("title", models.CharField(default="any", max_length=20)),
                ("mode", models.CharField(default="trash", max_length=10)),
                ("every_hours", models.FloatField(default=24.0)),
                ("enabled", models.BooleanField(default=False)),
                ("next_run_at", models.DateTimeField(blank=True, null=True)),
                ("last_run_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("created_by", models.CharField(max_length=150)),
            ],
            options={
                "ordering": ["name", "id"],
            },
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("actor_name", models.CharField(max_length=150)),
                ("action", models.CharField(db_index=True, max_length=40)),
                ("session_ids", models.JSONField(default=list)),
                ("before", models.JSONField(default=dict)),
                ("after", models.JSONField(default=dict)),
                ("reason", models.TextField(blank=True)),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("ok", "ok"),
                            ("failed", "failed"),
                            ("partial", "partly applied"),
                            ("pending", "pending (outcome unknown)"),
                            ("refused", "refused before it ran"),
                        ],
                        db_index=True,
                        default="ok",
                        max_length=20,
                    ),
                ),
                ("detail", models.TextField(blank=True)),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
                ("client_address", models.GenericIPAddressField(blank=True, null=True)),
                ("user_agent", models.CharField(blank=True, default="", max_length=512)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="AuditSession",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("session_id", models.TextField(db_index=True)),
                (
                    "entry",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sessions",
                        to="ledger.auditentry",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="DeleteJob",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("created_by", models.CharField(max_length=150)),
                ("reason", models.TextField()),
                ("description", models.TextField(blank=True)),
                ("include_live", models.BooleanField(default=False)),
                ("state", models.CharField(db_index=True, default="pending", max_length=20)),
                ("total", models.IntegerField(default=0)),
                ("done", models.IntegerField(default=0)),
                ("skipped", models.IntegerField(default=0)),
                ("deleted_messages", models.BigIntegerField(default=0)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("lease_owner", models.CharField(blank=True, max_length=100)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("error", models.TextField(blank=True)),
                ("purge", models.BooleanField(default=False)),
                (
                    "policy",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="runs",
                        to="ledger.retentionpolicy",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="TrashEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                (
                    "operation",
                    models.CharField(
                        db_index=True,
                        default=sessions_admin.ledger.models.new_trash_operation,
                        max_length=64,
                    ),
                ),
                ("state", models.CharField(db_index=True, default="pending", max_length=20)),
                ("actor_name", models.CharField(max_length=150)),
                ("reason", models.TextField(blank=True)),
                ("session_ids", models.JSONField(default=list)),
                ("session_count", models.IntegerField(default=0)),
                ("message_count", models.IntegerField(default=0)),
                ("payload", models.JSONField(default=dict)),
                ("restored_at", models.DateTimeField(blank=True, null=True)),
                ("restored_by", models.CharField(blank=True, max_length=150)),
                ("owner", models.JSONField(blank=True, default=dict)),
                ("restoring_since", models.DateTimeField(blank=True, null=True)),
                ("restoring_by", models.CharField(blank=True, max_length=150)),
                ("restore_audit", models.IntegerField(blank=True, null=True)),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="ledger.deletejob",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="TrashSession",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("session_id", models.TextField(db_index=True)),
                ("title", models.TextField(blank=True)),
                ("source", models.CharField(blank=True, max_length=200)),
                (
                    "entry",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sessions",
                        to="ledger.trashentry",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="DeleteJobItem",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("position", models.IntegerField()),
                ("session_id", models.TextField()),
                ("state", models.SmallIntegerField(default=0)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="items",
                        to="ledger.deletejob",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["job", "state", "position"], name="ledger_dele_job_id_a85e4a_idx"
                    )
                ],
            },
        ),
    ]
