"""Trash entries name the operator action they belong to (``TrashEntry.operation``).

An existing entry of a bulk delete job joins its job's operation (the batches a
job wrote are one action); any other entry is an operation of its own, as the
trash showed it before.
"""

from django.db import migrations, models

import sessions_admin.ledger.models


def name_operations(apps, schema_editor):
    TrashEntry = apps.get_model("ledger", "TrashEntry")
    for pk, job_id in TrashEntry.objects.values_list("pk", "job_id").iterator():
        operation = f"job-{job_id}" if job_id else f"entry-{pk}"
        TrashEntry.objects.filter(pk=pk).update(operation=operation)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0004_audit_client_and_refusals"),
    ]

    operations = [
        # Nullable first: a callable default on AddField would give every old row one value.
        migrations.AddField(
            model_name="trashentry",
            name="operation",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.RunPython(name_operations, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="trashentry",
            name="operation",
            field=models.CharField(
                db_index=True,
                default=sessions_admin.ledger.models.new_trash_operation,
                max_length=64,
            ),
        ),
    ]
