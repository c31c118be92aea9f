from django.db import migrations, models


def mark_operators_tokens(apps, schema_editor):
    """A token with a creator account, or whose creator's name is not the command's
    ("system") though its account is gone, was created by an operator."""
    ApiToken = apps.get_model("ledger", "ApiToken")
    alias = schema_editor.connection.alias
    tokens = ApiToken.objects.using(alias)
    tokens.filter(created_by__isnull=False).update(created_by_operator=True)
    tokens.filter(created_by__isnull=True).exclude(created_by_name="system").update(
        created_by_operator=True
    )


class Migration(migrations.Migration):
    dependencies = [("ledger", "0011_long_deletes_as_jobs")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="created_by_operator",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_operators_tokens, migrations.RunPython.noop),
    ]
