"""Run one operator action (``ledger.actions``) in a process of its own, for the audit crash tests.

``python -m tests.core.audit_child ACTION JSON_ARGUMENTS`` with the databases'
URLs and ``SESSIONS_ADMIN_CRASH_AT`` in the environment (see
tests/ledger/test_audit_atomicity.py). The actor is the operator named by the
``actor`` argument (created if missing). Prints the audit entries it left on
success; a crash point kills the process before it gets there.
"""

from __future__ import annotations

import json
import os
import sys


def main(action: str, arguments: dict) -> None:
    from django.contrib.auth.models import User

    from sessions_admin.ledger import actions
    from sessions_admin.ledger.models import AuditEntry

    actor, _ = User.objects.get_or_create(username=arguments.pop("actor"))
    getattr(actions, action)(actor=actor, **arguments)
    print(json.dumps(list(AuditEntry.objects.values_list("action", "outcome"))))


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    main(sys.argv[1], json.loads(sys.argv[2]))
