"""The packages keep their layers: core < store < ledger < demo | signin < console, no cycles.

The contracts are import-linter's, in pyproject.toml ([tool.importlinter]); this runs them
as part of the suite so a change that imports upwards or closes a circle fails CI.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.own_db
def test_the_import_contracts_hold():
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "lint-imports is missing: the test extra installs import-linter"
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout, result.stdout[-3000:]


def test_the_writes_contract_sees_a_view_calling_a_core_write(tmp_path):
    from sessions_admin.import_contracts import core_writes, write_calls

    writes = core_writes()
    # Decorated, or calling a decorated function through another module (a cascade's batches).
    assert {"merge_sessions", "execute_cascade_delete", "restore_trash_entry"} <= writes
    assert not {"plan_merge", "plan_cascade_delete", "merge_record"} & writes  # reads
    view = tmp_path / "view.py"
    view.write_text(
        "from sessions_admin import core\n"
        "from sessions_admin.core.merge import merge_sessions as merge, plan_merge\n"
        "from sessions_admin.ledger import actions\n"
        "def v(request):\n"
        "    core.plan_merge(session_ids=[])\n"
        "    actions.merge(actor=None, session_ids=[])\n"
        "    core.execute_cascade_delete(session_ids=[])\n"
        "    merge(session_ids=[])\n"
    )
    assert write_calls(view, writes) == [(7, "core.execute_cascade_delete"), (8, "merge")]
