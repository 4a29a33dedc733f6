"""The leader's cost of one report, stage by stage, in one process (no HTTP, no TLS).

    PYTHONPATH=operator:. python -m benchmarks.ingest_stages [--nodes 1000 --repeats 7] [--label after]

Each stage runs the operator's own code on the same reports the load client of
`benchmarks.operator_ingest` sends (the agent's builder, 30 pods, each report a change), one
node after the other, with every cache warm as in sustained ingest:

- parse and validate: `report_schema.validate_report` (pydantic-core parse and checks, the
  canonical status written by orjson);
- authentication: `DelegatingAuthenticator.authenticate` of each node's own bound token (ES256),
  checked locally (a hit in the verified-token cache, then the pod cache);
- authorization: `DelegatingAuthorizer.authorize` as the report handler asks it (a hit in the
  SubjectAccessReview cache) and the node rule;
- store: `NodeMetricStore.put` (render, compare, the event line in the window), with no watcher,
  and with 2 watchers of the collection (a standby's replication watch and one informer);
- request metrics: the latency histogram and the accepted-reports counter, as each report costs;
- whole: the server's middleware around the report handler (all of the above, the body read,
  the answer built), on a stand-in for aiohttp's request.

Each stage is timed over every node's report, `repeats` times: µs per report as min / median /
p90 / max of the repeats, the raw samples kept in the results JSON under the run's label (a run
replaces its label's figures, so "before" and "after" sit side by side).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec
from multidict import CIMultiDict, CIMultiDictProxy

from benchmarks import workload
from benchmarks.ingest_figures import StageRun, StageRuns, StageTimings
from benchmarks.ingest_reports import Reports
from benchmarks.stats import percentile
from colocation.apimachinery.jws import jwk, sign_es256
from colocation.apimachinery.served_apigroups import Caller
from colocation.apimachinery.tables import metadata_only_accept
from colocation.apimachinery.userinfo import Extra
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec, check_node_rule
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.local_token_authentication import (
    BoundPod,
    IssuerDocument,
    IssuerKeys,
    LocalTokenAuthenticator,
)
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import COLLECTION_PATH, RESOURCE, ValidatedReport, validate_report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "ingest_stages.json"
ISSUER = "https://kubernetes.default.svc.cluster.local"
NAMESPACE = "colocation-system"
AGENT = f"system:serviceaccount:{NAMESPACE}:colocation-agent"
WATCHERS = 2
DEFAULT_NODES = 1000
DEFAULT_REPEATS = 7
_NO_EXTRA = Extra()


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[int], Awaitable[None]]  # one report, of node `index`


class _Pods:
    synced = True

    def __init__(self, pods: Mapping[tuple[str, str], BoundPod]) -> None:
        self._pods = dict(pods)

    def pod(self, namespace: str, name: str) -> BoundPod | None:
        return self._pods.get((namespace, name))

    def service_account_uid(self, namespace: str, name: str) -> str | None:
        return "sa-uid" if (namespace, name) == (NAMESPACE, "colocation-agent") else None


class _Leader:
    is_leader = True
    leader_identity = "bench"
    leader_endpoint = ""


class _Request(dict[str, Any]):
    """What the report handler and the middleware read of aiohttp's Request."""

    method = "PUT"
    transport = None

    def __init__(self, node: str, headers: CIMultiDictProxy[str], body: bytes) -> None:
        super().__init__()
        self.match_info = {"name": node}
        self.headers = headers
        self.path = f"{COLLECTION_PATH}/{node}/status"
        self.content_length = len(body)
        self.query: Mapping[str, str] = {}
        self._body = body

    async def read(self) -> bytes:
        return self._body


class Bench:
    """Every node's token, headers and labels, the servers' objects, and the reports to send."""

    def __init__(self, nodes: int, pods: int) -> None:
        self.names = [workload.node_name(index) for index in range(nodes)]
        self.reports = Reports(self.names, pods)
        key = ec.generate_private_key(ec.SECP256R1())
        now = int(time.time())
        self.tokens = [sign_es256(_claims(name, index, now), key) for index, name in enumerate(self.names)]
        self.headers = [_headers(token, name) for token, name in zip(self.tokens, self.names, strict=True)]
        self.labels: dict[str, Mapping[str, str]] = {
            name: MappingProxyType(workload.node(index)["metadata"]["labels"]) for index, name in enumerate(self.names)}
        self.metrics = ServerMetrics()

        async def fetch() -> IssuerDocument:
            return IssuerDocument(ISSUER, {"keys": [jwk(key.public_key())]})

        async def no_token_review(token: str) -> TokenReviewResult:
            raise AssertionError("every token is checked locally")

        async def allow(spec: SubjectAccessSpec) -> bool:
            return True

        self.local = LocalTokenAuthenticator(IssuerKeys(fetch))
        self.local.pods = _Pods({(NAMESPACE, f"agent-{index}"): BoundPod(f"pod-uid-{index}", name)
                                 for index, name in enumerate(self.names)})
        self.authenticator = DelegatingAuthenticator(no_token_review, local=self.local, metrics=self.metrics,
                                                     cache_ttl=120.0)
        self.authorizer = DelegatingAuthorizer(allow, allowed_ttl=300.0, metrics=self.metrics)
        self.store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic)
        self.watched_store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic,
                                             watcher_queue=nodes + 1)
        self.watchers = [self.watched_store.watch("", send_initial_events=False) for _ in range(WATCHERS)]
        self.group = NodeMetricGroup(self.store, self.authorizer, _Leader(), known_node=self.labels.__contains__,
                                     node_labels=self.labels.get, metrics=self.metrics)
        self.server = AggregatedApiServer(self.authenticator, self.authorizer, lambda: None, leadership=_Leader(),
                                          metrics=self.metrics, groups=[self.group])
        self.server.application()  # the group learns how to authenticate
        self.callers: list[Caller] = []
        self.prepare: Callable[[], None] = lambda: None

    def body(self, index: int) -> bytes:
        return self.reports.next_body(index)

    def drain_watchers(self) -> None:
        # A standby reads its events as they come; here they are dropped between repeats.
        for watcher in self.watchers:
            while watcher.pending:
                watcher.take(10_000)

    def stages(self) -> list[Stage]:
        headers, names = self.headers, self.names
        bodies: list[bytes] = [b""] * len(names)

        async def validate(i: int) -> None:
            validate_report(bodies[i], names[i])

        async def authenticate(i: int) -> None:
            await self.authenticator.authenticate(headers[i], None, None)

        async def authorize(i: int) -> None:
            caller = self.callers[i]
            await self.authorizer.authorize(Caller(username=caller.username, uid=caller.uid, groups=caller.groups,
                                                   extra=_NO_EXTRA), "update", RESOURCE, subresource="status")
            check_node_rule(caller, names[i])

        reports: list[ValidatedReport] = []

        async def put(i: int) -> None:
            self.store.put(reports[i], self.labels[names[i]])

        async def put_watched(i: int) -> None:
            self.watched_store.put(reports[i], self.labels[names[i]])

        requests = self.metrics.requests
        accepted = self.metrics.reports_accepted

        child = getattr(self.metrics, "child", None)  # labelled children looked up once, where the server does

        async def request_metrics(i: int) -> None:
            latency = child(requests, "update", "200") if child is not None else requests.labels("update", "200")
            latency.observe(0.001)
            accepted.inc()

        async def whole(i: int) -> None:
            request = cast(web.Request, _Request(names[i], headers[i], bodies[i]))
            await self.server._errors(request, self.group._report)

        def fresh_reports() -> None:
            # Every report a change for the store, as in sustained ingest.
            bodies[:] = [self.body(i) for i in range(len(names))]
            reports[:] = [validate_report(body, name) for body, name in zip(bodies, names, strict=True)]

        self.prepare = fresh_reports
        return [Stage("parse and validate", validate), Stage("authentication (cache hit)", authenticate),
                Stage("authorization (cache hit) and node rule", authorize),
                Stage("store: put and event, no watcher", put),
                Stage(f"store: put and event, {WATCHERS} watchers", put_watched),
                Stage("request metrics", request_metrics),
                Stage("whole: middleware and report handler", whole)]

    async def warm(self) -> None:
        await self.local.keys.refresh()
        self.callers = [await self.authenticator.authenticate(h, None, None) for h in self.headers]
        for name, caller in zip(self.names, self.callers, strict=True):
            await self.authorizer.authorize(Caller(username=caller.username, uid=caller.uid, groups=caller.groups),
                                            "update", RESOURCE, subresource="status")
            check_node_rule(caller, name)


def _claims(node: str, index: int, now: int) -> dict[str, Any]:
    return {"aud": [ISSUER], "exp": now + 24 * 3600, "iat": now, "nbf": now, "iss": ISSUER, "jti": f"jti-{index}",
            "sub": AGENT,
            "kubernetes.io": {"namespace": NAMESPACE, "serviceaccount": {"name": "colocation-agent", "uid": "sa-uid"},
                              "pod": {"name": f"agent-{index}", "uid": f"pod-uid-{index}"},
                              "node": {"name": node, "uid": f"node-uid-{index}"}}}


def _headers(token: str, node: str) -> CIMultiDictProxy[str]:
    # What the load client sends (aiohttp's client with these headers).
    return CIMultiDictProxy(CIMultiDict({
        "Host": "127.0.0.1:8443", "Authorization": f"Bearer {token}", "Content-Type": "application/json",
        "Accept": metadata_only_accept(), "User-Agent": "colocation-agent", "Accept-Encoding": "gzip, deflate",
        "Content-Length": "6043"}))


async def measure(nodes: int, pods: int, repeats: int) -> dict[str, list[float]]:
    """µs per report of each stage, one sample per repeat."""
    bench = Bench(nodes, pods)
    await bench.warm()
    stages = bench.stages()
    samples: dict[str, list[float]] = {stage.name: [] for stage in stages}
    for _ in range(repeats):
        for stage in stages:
            bench.prepare()
            bench.drain_watchers()
            gc.collect()
            started = time.perf_counter()
            for index in range(nodes):
                await stage.run(index)
            samples[stage.name].append((time.perf_counter() - started) / nodes * 1e6)
    return samples


def summary(samples: list[float]) -> StageTimings:
    return StageTimings(samples_us=samples, min=min(samples), median=percentile(samples, 0.5),
                        p90=percentile(samples, 0.9), max=max(samples))


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "operator"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, e.g. "1.62 1.41 1.20": the machine may be shared."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def run(nodes: int, pods: int, repeats: int, label: str, results: Path, commit: str | None = None) -> StageRun:
    """Time every stage, and keep the run under `label` in `results` (beside the runs of other labels)."""
    load_before = load_average()
    samples = asyncio.run(measure(nodes, pods, repeats))
    record = StageRun(label=label, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      commit=commit or _commit(), python=platform.python_version(), nodes=nodes, pods=pods,
                      repeats=repeats, load_average=f"{load_before} before, {load_average()} after",
                      stages={name: summary(values) for name, values in samples.items()})
    kept = StageRuns.from_file(results).root if results.exists() else {}
    StageRuns({**kept, label: record}).to_file(results)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ingest_stages", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="Nodes, each with its own token and report.")
    p.add_argument("--pods-per-node", type=int, default=30)
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="Timings of each stage (at least 5).")
    p.add_argument("--label", default="after", help="Kept under this name in the results (e.g. before, after).")
    p.add_argument("--commit", default=None, help="The commit measured, when not this checkout's.")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.repeats < 5:
        p.error("--repeats must be at least 5")
    record = run(args.nodes, args.pods_per_node, args.repeats, args.label, args.results, args.commit)
    for name, figures in record.stages.items():
        print(f"{name:45s} min {figures.min:7.1f}  median {figures.median:7.1f}  "
              f"p90 {figures.p90:7.1f}  max {figures.max:7.1f} µs/report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
