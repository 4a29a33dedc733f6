"""The built-in printers of kube-apiserver (`pkg/printers/internalversion`), column for column.

Always in their wide form: the server sends every column and kubectl hides priority > 0 unless
`-o wide`. A printer is the column definitions and a function that makes one object's row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from colocation.apimachinery.objects import Obj
from colocation.apimachinery.tables import age, human_duration, parse_timestamp

Cell = str | int | float | bool | None


@dataclass(frozen=True, kw_only=True)
class Column:
    name: str
    type: str = "string"
    description: str = ""
    priority: int = 0
    format: str = ""

    def definition(self) -> Obj:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


NAME_DOC = ("Name must be unique within a namespace (or the cluster, for cluster-scoped objects); "
            "it identifies the object and cannot be updated.")
CREATED_DOC = ("CreationTimestamp is when the server created this object, in RFC 3339 form and UTC; "
               "set by the system, read-only.")
NAME_COLUMN = Column(name="Name", format="name", description=NAME_DOC)
AGE_COLUMN = Column(name="Age", description=CREATED_DOC)
CREATED_AT_COLUMN = Column(name="Created At", type="date", description=CREATED_DOC)

RowFunction = Callable[[Obj, datetime], tuple[list[Cell], list[Obj]]]
Printer = tuple[tuple[Column, ...], RowFunction]
Row = tuple[list[Cell], list[Obj]]


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _name(obj: Obj) -> str:
    return str(_meta(obj).get("name", ""))


def _age(obj: Obj, now: datetime) -> str:
    return age(timestamp=_meta(obj).get("creationTimestamp"), now=now)


def _since(*, at: datetime | None, now: datetime) -> str:
    return "<unknown>" if at is None else human_duration((now - at).total_seconds())


def format_labels(labels: Obj | None) -> str:
    """labels.FormatLabels: `k=v,...` sorted by key, `<none>` when empty."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def selector_string(selector: Obj | None) -> str | None:
    """A LabelSelector as its selector string (None when invalid), requirements sorted by key."""
    if not selector:
        return ""
    labels = selector.get("matchLabels") or {}
    requirements: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in labels.items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator")
        values = ",".join(sorted(expression.get("values") or []))
        if operator in ("In", "NotIn"):
            requirements.append((key, f"{key} {operator.lower()} ({values})"))
        elif operator == "Exists":
            requirements.append((key, key))
        elif operator == "DoesNotExist":
            requirements.append((key, f"!{key}"))
        else:
            return None
    return ",".join(text for _, text in sorted(requirements, key=lambda r: r[0]))


def format_label_selector(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector: `<none>` when empty, `<error>` when invalid."""
    text = selector_string(selector)
    return "<error>" if text is None else text or "<none>"


def _container_cells(pod_spec: Obj) -> list[Cell]:
    containers = pod_spec.get("containers") or []
    return [",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)]


def _template_spec(obj: Obj) -> Obj:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


_POD_SUCCEEDED = {"type": "Completed", "status": "True", "reason": "Succeeded",
                  "message": "The pod has completed successfully."}
_POD_FAILED = {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}


def _finished_at(container_status: Obj) -> datetime | None:
    terminated = (container_status.get("lastState") or {}).get("terminated")
    return parse_timestamp(terminated.get("finishedAt")) if terminated is not None else None


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None or (b is not None and b > a) else a


def _condition_true(conditions: list[Obj] | None, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions or [])


def _terminated_reason(terminated: Obj, prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _pod_row(pod: Obj, now: datetime) -> Row:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    conditions = status.get("conditions") or []
    phase = status.get("phase", "")
    reason = status.get("reason") or phase
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    sidecars = {name for name, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or []) + len(sidecars)
    ready = restarts = sidecar_restarts = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None

    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += cs.get("restartCount", 0)
        last_restart = _later(last_restart, _finished_at(cs))
        is_sidecar = cs.get("name") in sidecars
        if is_sidecar:
            sidecar_restarts += cs.get("restartCount", 0)
            last_sidecar_restart = _later(last_sidecar_restart, _finished_at(cs))
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and terminated.get("exitCode", 0) == 0:
            continue
        if is_sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if terminated is not None:
            reason = _terminated_reason(terminated, "Init:")
        elif waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _condition_true(conditions, "Initialized"):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += cs.get("restartCount", 0)
            last_restart = _later(last_restart, _finished_at(cs))
            state = cs.get("state") or {}
            terminated, waiting = state.get("terminated"), state.get("waiting")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None:
                reason = _terminated_reason(terminated)
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(conditions, "Ready") else "NotReady"

    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({_since(at=last_restart, now=now)} ago)"
    pod_ips = status.get("podIPs") or ([{"ip": status["podIP"]}] if status.get("podIP") else [])
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        by_type: dict[str, Obj] = {}
        for condition in conditions:
            by_type.setdefault(condition.get("type"), condition)
        passed = len([g for g in gates
                      if by_type.get(g.get("conditionType", ""), {}).get("status") == "True"])
        gates_text = f"{passed}/{len(gates)}"
    cells: list[Cell] = [
        _name(pod), f"{ready}/{total}", reason, restarts_text, _age(pod, now),
        (pod_ips[0].get("ip") if pod_ips else "") or "<none>", spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>", gates_text,
    ]
    row_conditions = [_POD_SUCCEEDED] if phase == "Succeeded" else [_POD_FAILED] if phase == "Failed" else []
    return cells, row_conditions


def _node_row(node: Obj, now: datetime) -> Row:
    status = node.get("status") or {}
    ready = {c.get("type"): c for c in status.get("conditions") or []}.get("Ready")
    states = ["Unknown"] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (_meta(node).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        addresses = status.get("addresses") or []
        return next((a.get("address", "") for a in addresses if a.get("type") == kind), "<none>")

    return [
        _name(node), ",".join(states), ",".join(sorted(roles)) or "<none>", _age(node, now),
        info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
        info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ], []


def _service_external_ip(service: Obj, kind: str) -> str:
    spec = service.get("spec") or {}
    external = spec.get("externalIPs") or []
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        balancers = sorted({i.get("ip") or i.get("hostname") for i in ingress} - {None, ""})
        if external:
            return ",".join([*balancers, *external])
        return ",".join(balancers) or "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName", ""))
    return "<unknown>"


def _service_row(service: Obj, now: datetime) -> Row:
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"  # the apiserver defaults it on create
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol") or "TCP"
        node_port = port.get("nodePort") or 0
        ports.append(f"{port.get('port', 0)}:{node_port}/{protocol}" if node_port > 0
                     else f"{port.get('port', 0)}/{protocol}")
    return [
        _name(service), kind, cluster_ips[0] if cluster_ips else "<none>",
        _service_external_ip(service, kind), ",".join(ports) or "<none>", _age(service, now),
        format_labels(spec.get("selector")),
    ], []


def _more(items: list[str], count: int, limit: int = 3, *, empty: str = "") -> str:
    text = ",".join(items[:limit])
    if count > limit:
        return f"{text} + {count - limit} more..."
    return text or empty


def _endpoints_row(endpoints: Obj, now: datetime) -> Row:
    subsets = endpoints.get("subsets") or []
    shown: list[str] = []
    count = 0
    for subset in subsets:
        addresses = [a.get("ip", "") for a in subset.get("addresses") or []]
        ports = subset.get("ports") or []
        if not ports:
            count += len(addresses)
            shown.extend(addresses)
        for port in ports:
            count += len(addresses)
            shown.extend(f"[{ip}]:{port.get('port', 0)}" if ":" in ip else f"{ip}:{port.get('port', 0)}"
                         for ip in addresses)
    return [_name(endpoints), _more(shown, count) if subsets else "<none>", _age(endpoints, now)], []


def _endpoint_slice_row(endpoint_slice: Obj, now: datetime) -> Row:
    ports = [str(p["port"]) if p.get("port") is not None else p.get("name") or "*"
             for p in endpoint_slice.get("ports") or []]
    addresses = [a for e in endpoint_slice.get("endpoints") or [] for a in e.get("addresses") or []]
    return [_name(endpoint_slice), endpoint_slice.get("addressType", ""),
            _more(ports, len(ports), empty="<unset>"), _more(addresses, len(addresses), empty="<unset>"),
            _age(endpoint_slice, now)], []


def _core_event(event: Obj) -> Obj:
    """An events.k8s.io/v1 Event in core/v1 field names, as the apiserver converts it to print."""
    if "involvedObject" in event or not any(k in event for k in ("regarding", "note", "reportingController")):
        return event
    return {
        "metadata": event.get("metadata") or {}, "involvedObject": event.get("regarding") or {},
        "reason": event.get("reason", ""), "message": event.get("note", ""), "type": event.get("type", ""),
        "source": event.get("deprecatedSource") or {},
        "firstTimestamp": event.get("deprecatedFirstTimestamp"),
        "lastTimestamp": event.get("deprecatedLastTimestamp"), "count": event.get("deprecatedCount", 0),
        "eventTime": event.get("eventTime"), "series": event.get("series"),
        "reportingComponent": event.get("reportingController", ""),
        "reportingInstance": event.get("reportingInstance", ""),
    }


def _event_row(raw: Obj, now: datetime) -> Row:
    event = _core_event(raw)
    first_at = parse_timestamp(event.get("firstTimestamp"))
    first = _since(at=first_at or parse_timestamp(event.get("eventTime")), now=now)
    last_at = parse_timestamp(event.get("lastTimestamp"))
    last = first if last_at is None else _since(at=last_at, now=now)
    count = event.get("count") or 0
    series = event.get("series")
    if series is not None:
        last = _since(at=parse_timestamp(series.get("lastObservedTime")), now=now)
        count = series.get("count", 0)
    elif count == 0:
        count = 1  # singleton events of the new API carry no count
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [
        last, event.get("type", ""), event.get("reason", ""), target, involved.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component, str(event.get("message", "")).strip(),
        first, count, _name(event),
    ], []


def _int_or_string(value: Any) -> str:
    return "N/A" if value is None else str(value)


def _binding_row(binding: Obj, now: datetime) -> Row:
    ref = binding.get("roleRef") or {}
    users, groups, accounts = [], [], []
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}/{name}")
        elif kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
    return [_name(binding), f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(binding, now),
            ", ".join(users), ", ".join(groups), ", ".join(accounts)], []


def _apiservice_row(apiservice: Obj, now: datetime) -> Row:
    service = (apiservice.get("spec") or {}).get("service")
    where = f"{service.get('namespace', '')}/{service.get('name', '')}" if service is not None else "Local"
    available = "Unknown"
    for condition in (apiservice.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Available":
            state = condition.get("status", "")
            reason = condition.get("reason") if state != "True" else ""
            available = f"{state} ({reason})" if reason else state
            break
    return [_name(apiservice), where, available, _age(apiservice, now)], []


def _deployment_row(deployment: Obj, now: datetime) -> Row:
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    desired = spec.get("replicas", 1)  # defaulted to 1 on create
    selector = selector_string(spec.get("selector"))
    return [_name(deployment), f"{status.get('readyReplicas', 0)}/{desired}",
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0), _age(deployment, now),
            *_container_cells(_template_spec(deployment)), "<invalid>" if selector is None else selector], []


def _daemonset_row(daemonset: Obj, now: datetime) -> Row:
    status, pod_spec = daemonset.get("status") or {}, _template_spec(daemonset)
    return [_name(daemonset), *(status.get(k, 0) for k in (
        "desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled",
        "numberAvailable")), format_labels(pod_spec.get("nodeSelector")), _age(daemonset, now),
        *_container_cells(pod_spec), format_label_selector((daemonset.get("spec") or {}).get("selector"))], []


def _replicaset_row(replicaset: Obj, now: datetime) -> Row:
    spec, status = replicaset.get("spec") or {}, replicaset.get("status") or {}
    return [_name(replicaset), spec.get("replicas", 1), status.get("replicas", 0), status.get("readyReplicas", 0),
            _age(replicaset, now), *_container_cells(_template_spec(replicaset)),
            format_label_selector(spec.get("selector"))], []


def _statefulset_row(statefulset: Obj, now: datetime) -> Row:
    spec, status = statefulset.get("spec") or {}, statefulset.get("status") or {}
    return [_name(statefulset), f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            _age(statefulset, now), *_container_cells(_template_spec(statefulset))], []


def _resource_quota_row(quota: Obj, now: datetime) -> Row:
    status = quota.get("status") or {}
    used = status.get("used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for resource, hard in sorted((status.get("hard") or {}).items()):
        usage = f"{resource}: {used.get(resource, '0')}/{hard}"
        (limits if resource.split(".")[0] == "limits" and "." in resource else requests).append(usage)
    return [_name(quota), ", ".join(requests), ", ".join(limits), _age(quota, now)], []


def _simple(*cells: Callable[[Obj], Cell]) -> RowFunction:
    """A row of the name, the given cells, then the age."""
    return lambda obj, now: ([_name(obj), *(cell(obj) for cell in cells), _age(obj, now)], [])


def _c(name: str, description: str, priority: int = 0, *, kind: str = "string") -> Column:
    return Column(name=name, type=kind, description=description, priority=priority)


_CONTAINERS = _c("Containers", "Names of each container in the template.", 1)
_IMAGES = _c("Images", "Images referenced by each container in the template.", 1)
_EVENT_COLUMNS = (
    _c("Last Seen", "Time when the most recent occurrence of this event was recorded."),
    _c("Type", "Type of this event (Normal, Warning)."),
    _c("Reason", "Short, machine-readable reason for the transition into the object's state."),
    _c("Object", "The object this event is about."),
    _c("Subobject", "The part of the object this event is about, if any.", 1),
    _c("Source", "The component reporting this event.", 1),
    _c("Message", "A human-readable description of this event."),
    _c("First Seen", "Time when this event was first recorded.", 1),
    _c("Count", "The number of times this event has occurred.", 1),
    Column(name="Name", type="string", description=NAME_DOC, priority=1, format="name"),
)
_BINDING_COLUMNS = (
    NAME_COLUMN, _c("Role", "The role this binding grants."), AGE_COLUMN,
    _c("Users", "Users in the binding", 1),
    _c("Groups", "Groups in the binding", 1), _c("ServiceAccounts", "ServiceAccounts in the binding", 1),
)


def _status(field: str, default: Any = 0) -> Callable[[Obj], Cell]:
    return lambda obj: (obj.get("status") or {}).get(field, default)


def _spec(field: str, default: Any = "") -> Callable[[Obj], Cell]:
    return lambda obj: (obj.get("spec") or {}).get(field, default)


BUILTIN_PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "pods"): ((
        NAME_COLUMN, _c("Ready", "The aggregate readiness state of this pod for accepting traffic."),
        _c("Status", "The aggregate status of the containers in this pod."),
        _c("Restarts", "The number of times the containers in this pod have been restarted and when the last "
                       "container in this pod has restarted."),
        AGE_COLUMN, _c("IP", "The IP address allocated to the pod.", 1),
        _c("Node", "The node the pod is scheduled onto.", 1),
        _c("Nominated Node", "The node the scheduler nominated for preemption.", 1),
        _c("Readiness Gates", "Readiness gates of the pod that are satisfied.", 1),
    ), _pod_row),
    ("", "nodes"): ((
        NAME_COLUMN, _c("Status", "The status of the node"), _c("Roles", "The roles of the node"), AGE_COLUMN,
        _c("Version", "Kubelet version reported by the node."),
        _c("Internal-IP", "The node's internal address.", 1),
        _c("External-IP", "The node's external address.", 1),
        _c("OS-Image", "OS image reported by the node.", 1),
        _c("Kernel-Version", "Kernel version reported by the node.", 1),
        _c("Container-Runtime", "Container runtime version reported by the node.", 1),
    ), _node_row),
    ("", "namespaces"): ((NAME_COLUMN, _c("Status", "The status of the namespace"), AGE_COLUMN),
                         _simple(_status("phase", ""))),
    ("", "configmaps"): ((NAME_COLUMN, _c("Data", "Number of data and binaryData keys."), AGE_COLUMN),
                         _simple(lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))),
    ("", "secrets"): ((NAME_COLUMN, _c("Type", "Used to facilitate programmatic handling of secret data."),
                       _c("Data", "Number of data keys."), AGE_COLUMN),
                      _simple(lambda o: o.get("type") or "Opaque", lambda o: len(o.get("data") or {}))),
    ("", "serviceaccounts"): ((NAME_COLUMN, _c("Secrets", "Number of secrets listed."), AGE_COLUMN),
                              _simple(lambda o: len(o.get("secrets") or []))),
    ("", "services"): ((
        NAME_COLUMN, _c("Type", "How the Service is exposed."),
        _c("Cluster-IP", "The IP address of the service, in the cluster."),
        _c("External-IP", "Addresses the service is reachable at from outside the cluster."),
        _c("Port(s)", "The ports the service exposes."), AGE_COLUMN,
        _c("Selector", "Labels of the pods the service routes to.", 1),
    ), _service_row),
    ("", "endpoints"): ((NAME_COLUMN, _c("Endpoints", "Addresses and ports of the endpoints."), AGE_COLUMN),
                        _endpoints_row),
    ("discovery.k8s.io", "endpointslices"): ((
        NAME_COLUMN, _c("AddressType", "The type of address carried by this EndpointSlice."),
        _c("Ports", "Network ports exposed by the endpoints."),
        _c("Endpoints", "Addresses of the endpoints."),
        AGE_COLUMN,
    ), _endpoint_slice_row),
    ("", "events"): (_EVENT_COLUMNS, _event_row),
    ("events.k8s.io", "events"): (_EVENT_COLUMNS, _event_row),
    ("coordination.k8s.io", "leases"): ((NAME_COLUMN, _c("Holder", "Identity of the holder."), AGE_COLUMN),
                                        _simple(lambda o: _spec("holderIdentity")(o) or "")),
    ("apps", "deployments"): ((
        NAME_COLUMN, _c("Ready", "Number of the pod with ready state"),
        _c("Up-to-date", "Total number of pods with the desired template."),
        _c("Available", "Total number of available pods."), AGE_COLUMN, _CONTAINERS, _IMAGES,
        _c("Selector", "Label query over the pods of the deployment.", 1),
    ), _deployment_row),
    ("apps", "daemonsets"): ((
        NAME_COLUMN, _c("Desired", "Number of nodes that should run the daemon pod.", kind="integer"),
        _c("Current", "Number of nodes running at least one daemon pod that should.", kind="integer"),
        _c("Ready", "Number of nodes whose daemon pod is ready.", kind="integer"),
        _c("Up-to-date", "Number of nodes running the updated daemon pod.", kind="integer"),
        _c("Available", "Number of nodes whose daemon pod is available.", kind="integer"),
        _c("Node Selector", "Nodes the daemon pods may run on."), AGE_COLUMN, _CONTAINERS, _IMAGES,
        _c("Selector", "Label query over the pods of the daemon set.", 1),
    ), _daemonset_row),
    ("policy", "poddisruptionbudgets"): ((
        NAME_COLUMN, _c("Min Available", "The minimum number of pods that must be available."),
        _c("Max Unavailable", "The maximum number of pods that may be unavailable."),
        _c("Allowed Disruptions", "Calculated number of pods that may be disrupted at this time.",
           kind="integer"),
        AGE_COLUMN,
    ), _simple(lambda o: _int_or_string(_spec("minAvailable", None)(o)),
               lambda o: _int_or_string(_spec("maxUnavailable", None)(o)), _status("disruptionsAllowed"))),
    ("apiregistration.k8s.io", "apiservices"): ((
        NAME_COLUMN, _c("Service", "The reference to the service that hosts this API endpoint."),
        _c("Available", "Whether this service is available."), AGE_COLUMN,
    ), _apiservice_row),
    ("apps", "replicasets"): ((
        NAME_COLUMN, _c("Desired", "Number of desired pods.", kind="integer"),
        _c("Current", "Number of pods currently running.", kind="integer"),
        _c("Ready", "Number of ready pods.", kind="integer"), AGE_COLUMN, _CONTAINERS, _IMAGES,
        _c("Selector", "Label query over the pods of the replica set.", 1),
    ), _replicaset_row),
    ("apps", "statefulsets"): ((
        NAME_COLUMN, _c("Ready", "Number of the pod with ready state"), AGE_COLUMN, _CONTAINERS, _IMAGES,
    ), _statefulset_row),
    ("", "resourcequotas"): ((
        NAME_COLUMN, _c("Request", "Used and hard quota of requests and other resources."),
        _c("Limit", "Used and hard quota of limits."), AGE_COLUMN,
    ), _resource_quota_row),
    ("scheduling.k8s.io", "priorityclasses"): ((
        NAME_COLUMN, _c("Value", "The priority of pods of this class.", kind="integer"),
        _c("Global-Default", "Whether this class is the default.", kind="boolean"), AGE_COLUMN,
        _c("PreemptionPolicy", "Whether pods of this class preempt lower-priority ones."),
    ), lambda o, now: ([_name(o), o.get("value", 0), bool(o.get("globalDefault")), _age(o, now),
                        o.get("preemptionPolicy") or ""], [])),
    ("rbac.authorization.k8s.io", "rolebindings"): (_BINDING_COLUMNS, _binding_row),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): (_BINDING_COLUMNS, _binding_row),
}
