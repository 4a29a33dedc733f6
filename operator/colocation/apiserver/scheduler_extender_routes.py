"""The scheduler extender's HTTP endpoints: POST /scheduler/filter and /scheduler/prioritize.

kube-scheduler calls them with `urlPrefix: https://<replica>:<port>/scheduler`, `filterVerb:
filter`, `prioritizeVerb: prioritize` (docs/install.md#load-aware-scheduling). Every Ready
replica answers from memory (`loadaware.extender_answers`); a replica that is not ready answers
503, which an `ignorable` extender's scheduler skips. A body that is no ExtenderArgs is answered
400. The listener, and who may call it, is the manager's (`--scheduler-extender-port`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from colocation.loadaware.extender_answers import LoadAwareExtender
from colocation.loadaware.extender_wire import ExtenderArgsError, encoded, parse_extender_args

log = logging.getLogger(__name__)

PATH_PREFIX = "/scheduler"
FILTER_VERB = "filter"
PRIORITIZE_VERB = "prioritize"
# ExtenderArgs with NodeNames: 5,000 names and a large pod fit many times over.
MAX_EXTENDER_ARGS_BYTES = 4 * 1024 * 1024
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ExtenderMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Histogram("colocation_scheduler_extender_request_duration_seconds",
                                  "Scheduler extender requests by verb (filter, prioritize) and response code.",
                                  ["verb", "code"], buckets=_LATENCY_BUCKETS, registry=r)
        self.stale = Counter("colocation_scheduler_extender_stale_nodes_total",
                             "Candidate nodes judged neutral because their NodeMetric is older than the "
                             "expiration, by verb.", ["verb"], registry=r)
        self.missing = Counter("colocation_scheduler_extender_missing_nodes_total",
                               "Candidate nodes judged neutral because they have no NodeMetric (or no known "
                               "allocatable), by verb.", ["verb"], registry=r)
        self.filtered = Counter("colocation_scheduler_extender_filtered_nodes_total",
                                "Candidate nodes the filter refused for their load (answered unresolvable).",
                                registry=r)
        self.placed = Counter("colocation_scheduler_extender_tentative_placements_total",
                              "Pods counted on the node prioritize ranked first until the pod watch shows "
                              "them bound.", registry=r)
        self._children = {(verb, name): metric.labels(verb) for verb in (FILTER_VERB, PRIORITIZE_VERB)
                          for name, metric in (("stale", self.stale), ("missing", self.missing))}

    def count(self, verb: str, *, stale: int, missing: int) -> None:
        if stale:
            self._children[(verb, "stale")].inc(stale)
        if missing:
            self._children[(verb, "missing")].inc(missing)


class SchedulerExtenderRoutes:
    def __init__(self, extender: LoadAwareExtender, *, ready: Callable[[], bool], metrics: ExtenderMetrics) -> None:
        self.extender = extender
        self.ready = ready  # this replica's copies are current: else 503, and the scheduler goes on without us
        self.metrics = metrics

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_EXTENDER_ARGS_BYTES)
        app.router.add_post(f"{PATH_PREFIX}/{FILTER_VERB}", self._filter)
        app.router.add_post(f"{PATH_PREFIX}/{PRIORITIZE_VERB}", self._prioritize)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _filter(self, request: web.Request) -> web.Response:
        return await self._answer(request, FILTER_VERB)

    async def _prioritize(self, request: web.Request) -> web.Response:
        return await self._answer(request, PRIORITIZE_VERB)

    async def _answer(self, request: web.Request, verb: str) -> web.Response:
        started = time.perf_counter()
        response = await self._respond(request, verb)
        self.metrics.requests.labels(verb, str(response.status)).observe(time.perf_counter() - started)
        return response

    async def _respond(self, request: web.Request, verb: str) -> web.Response:
        if not self.ready():
            return web.Response(status=503, text="not ready: this replica has no current copy of the NodeMetrics "
                                                 "and pods yet")
        try:
            args = parse_extender_args(await request.read())
        except ExtenderArgsError as error:
            return web.Response(status=400, text=str(error))
        if verb == FILTER_VERB:
            body, outcome = self.extender.filter(args)
            self.metrics.count(verb, stale=outcome.stale, missing=outcome.missing)
            if outcome.failed:
                self.metrics.filtered.inc(len(outcome.failed))
            return web.Response(body=encoded(body), content_type="application/json")
        answer = self.extender.prioritize(args)
        self.metrics.count(verb, stale=answer.outcome.stale, missing=answer.outcome.missing)
        if answer.placed_on is not None:
            self.metrics.placed.inc()
        return web.Response(body=encoded(answer.body), content_type="application/json")
