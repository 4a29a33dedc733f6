"""`colocation cleanup`: what an uninstall leaves on the cluster, removed (the chart's post-delete hook runs it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from colocation.clicommon import common_options


@click.command("cleanup")
@click.option("--wait-for-leader", type=click.FloatRange(min=0), default=0.0,
              help="Seconds to wait for a leading operator to stop (its Lease released, or not renewed for a "
                   "lease duration) before refusing. 0: refuse at once.")
@click.option("--settle", type=click.FloatRange(min=0), default=0.0,
              help="Seconds a clean cluster must stay clean: one more pass this much later must find nothing. "
                   "For an operator still stopping whose Lease went with its namespace: more than its "
                   "--renew-deadline, after which it writes nothing.")
@click.option("--force", is_flag=True, default=False,
              help="Clean up even while an operator leads: it writes the resources back at its next evaluation.")
@click.option("--delete-custom-resources", is_flag=True, default=False,
              help="Also delete every NodeSLO and NodeResource (helm never deletes the CRDs, so these stay).")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0,
              help="Seconds the whole cleanup may take; exits 1 if the cluster is not clean by then.")
@click.option("--request-timeout", type=click.FloatRange(min=0.1), default=10.0,
              help="Seconds one API call may take.")
@click.option("--page-size", type=click.IntRange(1, 5000), default=250, help="Objects per list request.")
@click.option("--concurrency", type=click.IntRange(1, 256), default=16, help="API calls in flight at most.")
@common_options
def cleanup_command(kubeconfig: Path | None, wait_for_leader: float, settle: float, *, force: bool,
                    delete_custom_resources: bool, timeout: float, request_timeout: float, page_size: int,
                    concurrency: int) -> None:
    """Remove what colocation leaves on the cluster once the operator is stopped: kubernetes.io/batch-cpu,
    batch-memory, mid-cpu and mid-memory from every Node's capacity and allocatable, the agents' Leases in
    colocation-node-lease and the leader Lease colocation-system/colocation-operator.

    Refuses while an operator leads. Prints a line per page of progress; exits 0 once a pass finds
    nothing left, 1 with a one-line error otherwise.
    """
    from colocation.kube.client import KubeConfigError, api_client
    from colocation.manager.cleanup import Cleanup, CleanupError, CleanupOptions

    options = CleanupOptions(timeout=timeout, call_timeout=request_timeout, page_size=page_size,
                             concurrency=concurrency, wait_for_leader=wait_for_leader, settle=settle, force=force,
                             delete_custom_resources=delete_custom_resources)

    async def clean() -> str:
        async with await api_client(kubeconfig) as api:
            done = await Cleanup(api, options, say=click.echo).run()
        extra = f", {done.custom_resources} NodeSLOs and NodeResources deleted" if delete_custom_resources else ""
        return (f"clean: no Node offers batch or mid resources and no colocation Lease is left "
                f"({done.nodes} Nodes stripped, {done.leases} Leases deleted{extra})")

    try:
        click.echo(asyncio.run(clean()))
    except (KubeConfigError, CleanupError) as error:
        raise click.ClickException(str(error)) from None
