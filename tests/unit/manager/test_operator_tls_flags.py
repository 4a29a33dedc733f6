"""`colocation operator`'s TLS flags: bad values get one clear line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from colocation.apimachinery import certificates
from colocation.cli import main


def test_files_that_are_no_certificate_and_key_are_named_in_the_error(tmp_path: Path) -> None:
    ca = certificates.new_ca("ca")
    cert_path, _ = certificates.issue_certificate(ca, "one").write(tmp_path, "one")
    _, other_key = certificates.issue_certificate(ca, "two").write(tmp_path, "two")
    result = CliRunner().invoke(main, ["operator", "--tls-cert-file", str(cert_path), "--tls-key-file", str(other_key)])
    assert result.exit_code == 2
    assert f"--tls-cert-file {cert_path} and --tls-key-file {other_key} are not a PEM certificate and its key" \
        in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--ca-validity", "30", "--cert-renew-fraction", "0.5"], "must leave at least 20 s"),
    (["--cert-renew-fraction", "1"], "--cert-renew-fraction"),
    (["--tls-ca-file", __file__], "--tls-ca-file goes with --tls-cert-file"),
])
def test_lifetimes_that_cannot_work_are_refused(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["operator", *args])
    assert result.exit_code == 2 and message in result.output, result.output
