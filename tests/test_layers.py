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
