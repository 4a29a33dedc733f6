"""Flags and helpers shared by every `colocation` subcommand."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from colocation import logs

F = TypeVar("F", bound=Callable[..., Any])


def common_options(func: F) -> F:
    """The flags every subcommand shares: where the cluster is, and how to log."""

    @click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        envvar="KUBECONFIG",
        show_envvar=True,
        help="Kubeconfig file to reach the Kubernetes API. Default: in-cluster configuration, "
        "else ~/.kube/config.",
    )
    @click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
        default="info",
        show_default=True,
        help="Least severe log level printed.",
    )
    @click.option(
        "--log-format",
        type=click.Choice(["json", "text"]),
        default="json",
        show_default=True,
        help="json: one JSON object per line (for log collectors); text: readable lines.",
    )
    @functools.wraps(func)
    def wrapper(*args: Any, log_level: str, log_format: logs.LogFormat, **kwargs: Any) -> Any:
        logs.configure(log_level, log_format)
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


