"""Hermes Agent compatibility tests: stores written by hermes-agent's own code.

hermes-agent (0.19.0, SQLite only) runs in a Python of its own (its pinned
dependencies conflict with ours): ``python3 -m sessions_admin test`` installs
it under var/ and passes its interpreter in ``SESSIONS_ADMIN_HERMES_PYTHON``.
``driver.py`` runs Hermes's ``SessionDB`` and ``ResponseStore`` there, as the
runtime process would. These tests skip, with the reason, only when no such
Python exists, and on the PostgreSQL pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.helpers import file_bytes

BASE_DIR = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.py")
HERMES_VERSION = "0.19.0"


def _has_hermes(python: str) -> bool:
    probe = (
        "import importlib.metadata as m, hermes_state; "
        "from gateway.platforms.api_server import ResponseStore; "
        f"assert m.version('hermes-agent') == {HERMES_VERSION!r}"
    )
    try:
        return subprocess.call([python, "-c", probe], stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


# ``python3 -m sessions_admin test`` installs hermes-agent while the suite starts and names
# the file it writes the interpreter's path to once done (devtools.run_tests).
INSTALL_WAIT_SECONDS = 900


def _installed_meanwhile() -> str:
    ready = os.environ.get("SESSIONS_ADMIN_HERMES_READY_FILE")
    if not ready:
        return ""
    deadline = time.monotonic() + INSTALL_WAIT_SECONDS
    while not Path(ready).exists():
        if time.monotonic() > deadline:
            return ""
        time.sleep(0.5)
    return Path(ready).read_text().strip()


def find_hermes_python() -> str | None:
    candidates = [
        os.environ.get("SESSIONS_ADMIN_HERMES_PYTHON", ""),
        _installed_meanwhile(),
        str(BASE_DIR / "var" / f"hermes-agent-{HERMES_VERSION}" / "bin" / "python"),
        sys.executable,
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists() and _has_hermes(candidate):
            return candidate
    return None


_HERMES_PYTHON: list[str | None] = []


def hermes_python() -> str | None:
    if not _HERMES_PYTHON:
        _HERMES_PYTHON.append(find_hermes_python())
    return _HERMES_PYTHON[0]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/hermes" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.hermes)


class HermesError(AssertionError):
    pass


@dataclass
class Hermes:
    """hermes-agent's own code on one state.db (and response_store.db), in its own process."""

    python: str
    home: Path
    state: Path
    responses: Path
    max_responses: int = 100
    calls: int = field(default=0)

    def run(self, ops: list[dict], *, strict: bool = True) -> list[Any]:
        request = {
            "home": str(self.home),
            "state": str(self.state),
            "responses": str(self.responses),
            "max_responses": self.max_responses,
            "ops": ops,
        }
        done = subprocess.run(
            [self.python, str(DRIVER)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HERMES_HOME": str(self.home)},
        )
        self.calls += 1
        if done.returncode != 0:
            raise HermesError(f"hermes driver failed:\n{done.stderr[-4000:]}")
        results = json.loads(done.stdout)["results"]
        if strict:
            for op, result in zip(ops, results, strict=True):
                if isinstance(result, dict) and set(result) == {"error"}:
                    raise HermesError(f"{op} -> {result['error']}")
        return results

    def one(self, op: dict, *, strict: bool = True) -> Any:
        return self.run([op], strict=strict)[0]


def call(target: str, *args: Any, **kwargs: Any) -> dict:
    """A driver op calling ``SessionDB``/``ResponseStore`` method ``target`` ("state.x")."""
    return {"call": target, "args": list(args), "kwargs": kwargs}


def sql(text: str, *params: Any, on: str = "state", commit: bool = False) -> dict:
    return {"sql": text, "params": list(params), "on": on, "commit": commit}


@pytest.fixture
def hermes_home(tmp_path) -> Path:
    """A Hermes home directory for state.db and response_store.db (SQLite pass only)."""
    if connections["store"].vendor != "sqlite":
        pytest.skip("Hermes Agent's store is SQLite: these tests run in the SQLite pass")
    home = tmp_path / "hermes-home"
    home.mkdir()
    return home


@pytest.fixture
def hermes(hermes_home) -> Hermes:
    python = hermes_python()
    if python is None:
        pytest.skip(
            f"hermes-agent {HERMES_VERSION} is not installed: `python3 -m sessions_admin test` "
            "installs it (var/hermes-agent-*), or set SESSIONS_ADMIN_HERMES_PYTHON"
        )
    return Hermes(
        python=python,
        home=hermes_home,
        state=hermes_home / "state.db",
        responses=hermes_home / "response_store.db",
    )


@dataclass
class Attached:
    home: Path
    read_only: bool


def _point_aliases(state: Path, responses: Path, *, read_only: bool) -> dict:
    """Re-point the ``store`` alias at ``state`` and add a ``responses`` alias; return what to undo."""
    store = connections.settings["store"]
    saved = {"NAME": store["NAME"], "OPTIONS": dict(store["OPTIONS"])}
    for alias in ("store", "responses"):
        if alias in connections.settings:
            connections[alias].close()
    store["NAME"] = str(state)
    responses_settings = {
        **store,
        "NAME": str(responses),
        "OPTIONS": dict(store["OPTIONS"]),
        "TEST": {"NAME": str(responses)},
    }
    if read_only:
        from sessions_admin.store.attach import read_only_uri

        for entry, path in ((store, state), (responses_settings, responses)):
            entry["NAME"] = read_only_uri(str(path))
            entry["OPTIONS"] = {
                **entry["OPTIONS"],
                "transaction_mode": "DEFERRED",
                "init_command": "",
            }
    connections.settings["responses"] = responses_settings
    return saved


def _restore_aliases(saved: dict) -> None:
    for alias in ("store", "responses"):
        try:
            connections[alias].close()
        except Exception:  # noqa: BLE001 - best effort on teardown
            pass
    try:
        del connections["responses"]
    except (AttributeError, KeyError):
        pass
    connections.settings.pop("responses", None)
    connections.settings["store"]["NAME"] = saved["NAME"]
    connections.settings["store"]["OPTIONS"].clear()
    connections.settings["store"]["OPTIONS"].update(saved["OPTIONS"])
    connections["store"].close()


def _allow_alias_in_this_test(monkeypatch, alias: str) -> None:
    """Add ``alias`` to the running Django test case's databases (it was created after setup).

    Django blocks connections to aliases outside ``databases``; the test case
    class is reachable from the ``ensure_connection`` patch it installs.
    """
    from django.db.backends.base.base import BaseDatabaseWrapper

    patched = BaseDatabaseWrapper.ensure_connection
    cells = dict(
        zip(
            patched.__code__.co_freevars,
            (c.cell_contents for c in patched.__closure__ or ()),
            strict=True,
        )
    )
    case = cells.get("cls")
    if case is not None:
        monkeypatch.setattr(case, "databases", frozenset(case.databases) | {alias})


@pytest.fixture
def attach(hermes_home, settings, monkeypatch):
    """Point our aliases at the home's state.db and response_store.db (call it once they exist).

    Undone on teardown. ``init`` runs ``ensure_store_schema`` as ``init_store`` would.
    """
    saved: list[dict] = []

    def do_attach(*, read_only: bool = False, init: bool = True) -> Attached:
        settings.SESSIONS_ADMIN_READ_ONLY = read_only
        _allow_alias_in_this_test(monkeypatch, "responses")
        saved.append(
            _point_aliases(
                hermes_home / "state.db", hermes_home / "response_store.db", read_only=read_only
            )
        )
        if init and not read_only:
            from sessions_admin.core.schema import ensure_store_schema

            ensure_store_schema()
        return Attached(hermes_home, read_only)

    yield do_attach
    if saved:
        _restore_aliases(saved[0])


def file_digest(path: Path) -> str:
    return hashlib.sha256(file_bytes(path)).hexdigest()


def raw_rows(path: Path, query: str, params: tuple = ()) -> list[tuple]:
    """Read a Hermes file with plain sqlite3 (read-only), outside Django."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
def admin(client, db):
    """A signed-in admin operator (every action) and the client signed in as them."""
    from django.contrib.auth.models import User

    from sessions_admin.signin.roles import assign_role

    user = User.objects.create_user("hermes-admin", password="correct horse battery staple")
    assign_role(user, "admin")
    client.force_login(user)
    return user
