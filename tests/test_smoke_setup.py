from __future__ import annotations

from sessions_admin import core
from sessions_admin.store.models import Session


def test_it_creates_a_session_in_the_store_database():
    ref = core.create_session(source="cli")
    assert Session.objects.filter(id=ref.session_id).exists()
