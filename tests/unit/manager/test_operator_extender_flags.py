"""`colocation operator --scheduler-extender-*`: flags that cannot work get one clear line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from colocation.cli import main


@pytest.mark.parametrize(("args", "message"), [
    (["--scheduler-extender-client-ca-file", "{ca}"], "--scheduler-extender-client-ca-file goes with "
                                                      "--scheduler-extender-port"),
    (["--scheduler-extender-port", "8443"], "--scheduler-extender-port must differ from --port"),
    (["--scheduler-extender-port", "70000"], "--scheduler-extender-port"),
])
def test_extender_flags_that_cannot_work_are_refused(args: list[str], message: str, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not used")
    result = CliRunner().invoke(main, ["operator", *(arg.format(ca=ca) for arg in args)])
    assert result.exit_code == 2 and message in result.output, result.output
