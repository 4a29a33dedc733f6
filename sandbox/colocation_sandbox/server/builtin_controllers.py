"""The sandbox's built-in controllers: what kube-controller-manager and the apiextensions server do.

CRDs register their resources and become Established; namespaces get a default ServiceAccount and
are emptied before they go; Deployments, DaemonSets and PodDisruptionBudgets get the status their
controllers would report (no pods are run: the sandbox has no kubelet, so workloads are reported
available as soon as they are observed). Listeners run synchronously after each committed change.
"""

from __future__ import annotations

import logging

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.selectors import LabelSelector
from colocation_sandbox.server.disruption_budgets import budget_status
from colocation_sandbox.server.object_store import Change, Store
from colocation_sandbox.server.resource_types import PrinterColumn, ResourceType

log = logging.getLogger(__name__)

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")


def crd_resource_types(crd: Obj) -> list[ResourceType]:
    """The resource types a CRD serves, one per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    types = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        columns = tuple(
            PrinterColumn(name=c["name"], type=c.get("type", "string"), json_path=c.get("jsonPath", ""),
                          description=c.get("description", ""), priority=int(c.get("priority", 0)),
                          format=c.get("format", ""))
            for c in version.get("additionalPrinterColumns") or ())
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}
        types.append(ResourceType(
            group=spec["group"], version=version["name"], resource=names["plural"], kind=names["kind"],
            namespaced=spec.get("scope") == "Namespaced", singular=names.get("singular", names["kind"].lower()),
            short_names=tuple(names.get("shortNames") or ()), categories=tuple(names.get("categories") or ()),
            subresources=frozenset(k for k in ("status", "scale") if k in subresources), tracks_generation=True,
            printer_columns=columns, schema=schema, scale_paths=dict(subresources.get("scale") or {}),
            strategic=False))
    return types


ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as "
    "the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of "
    "Kubernetes clusters.")


class Controllers:
    def __init__(self, store: Store, *, root_ca_pem: bytes | None = None) -> None:
        self.store = store
        self.registry = store.registry
        self.root_ca = root_ca_pem.decode() if root_ca_pem is not None else None
        store.subscribe(self.on_change)

    def rt(self, group: str, resource: str) -> ResourceType:
        rt = self.registry.get(group, "v1", resource)
        assert rt is not None, f"{resource}.{group} is built in"
        return rt

    def on_change(self, change: Change) -> None:
        key = change.rt.storage_key
        try:
            if key == CRD_KEY:
                self._crd(change)
            elif key == ("", "namespaces"):
                self._namespace(change)
            elif key in (("apps", "deployments"), ("apps", "daemonsets")) and change.type != "DELETED":
                self._workload_status(change.rt, change.new)
            elif key == ("policy", "poddisruptionbudgets") and change.type != "DELETED":
                self._budget_status(change.new)
            if key == ("", "pods"):
                self._pod_changed(change)
            elif key == ("", "configmaps") and change.new["metadata"]["name"] == ROOT_CA_CONFIGMAP:
                self._publish_root_ca(change.new["metadata"].get("namespace", ""))
            elif key == ("", "nodes") and change.type in ("ADDED", "DELETED"):
                for ds in self.store.objects(self.rt("apps", "daemonsets")):
                    self._workload_status(self.rt("apps", "daemonsets"), ds)
            if change.type == "DELETED" and change.rt.namespaced:
                self._maybe_finish_namespace(change.new["metadata"].get("namespace", ""))
        except ApiError as error:  # a controller's write lost a race: the next change retries it
            log.debug("controller write skipped", extra={"error": str(error)})

    # ---- CRDs ---------------------------------------------------------------------------------

    def _crd(self, change: Change) -> None:
        crd = change.new
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        if change.type == "DELETED":
            for rt in [r for r in self.registry if r.group == group and r.resource == plural]:
                self.store.drop_type(rt)
            self.registry.remove(group, plural)
            return
        if crd["metadata"].get("deletionTimestamp"):
            return
        old_spec = (change.old or {}).get("spec")
        if change.type == "MODIFIED" and old_spec == spec:
            return
        self.registry.remove(group, plural)
        for rt in crd_resource_types(crd):
            self.registry.add(rt)
        now = format_time(self.store.clock())
        storage = [v["name"] for v in spec.get("versions") or () if v.get("storage")]
        status = {
            "acceptedNames": spec.get("names") or {},
            "storedVersions": sorted(set((crd.get("status") or {}).get("storedVersions") or ()) | set(storage)),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
        }
        old_status = crd.get("status") or {}
        if old_status.get("conditions") and old_status.get("acceptedNames") == status["acceptedNames"]:
            status["conditions"] = old_status["conditions"]
        self.store.update(self.rt(*CRD_KEY), "", crd["metadata"]["name"], obj={**crd, "status": status},
                          subresource="status", check_rv=False)

    # ---- namespaces ---------------------------------------------------------------------------

    def _namespace(self, change: Change) -> None:
        ns = change.new
        name = ns["metadata"]["name"]
        if change.type == "ADDED":
            sa_rt = self.rt("", "serviceaccounts")
            if self.store.find(sa_rt, name, "default") is None:
                self.store.create(sa_rt, {"metadata": {"name": "default", "namespace": name}})
            self._publish_root_ca(name)
            return
        if change.type == "MODIFIED" and ns["metadata"].get("deletionTimestamp"):
            if (ns.get("status") or {}).get("phase") != "Terminating":
                self.store.update(self.rt("", "namespaces"), "", name,
                                  obj={**ns, "status": {**(ns.get("status") or {}), "phase": "Terminating"}},
                                  subresource="status", check_rv=False)
                self._empty_namespace(name)
            self._maybe_finish_namespace(name)

    def _publish_root_ca(self, namespace: str) -> None:
        """kube-controller-manager's root-ca-cert-publisher: every namespace has ConfigMap
        kube-root-ca.crt with the cluster CA, put back when deleted and reset when changed."""
        if self.root_ca is None:
            return
        ns = self.store.find(self.rt("", "namespaces"), "", namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        cm_rt = self.rt("", "configmaps")
        data = {"ca.crt": self.root_ca}
        current = self.store.find(cm_rt, namespace, ROOT_CA_CONFIGMAP)
        if current is None:
            self.store.create(cm_rt, {"metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace,
                                                   "annotations": {DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION}},
                                      "data": data})
            return
        annotations = current["metadata"].get("annotations") or {}
        if current.get("data") == data and annotations.get(DESCRIPTION_ANNOTATION):
            return
        self.store.update(cm_rt, namespace, ROOT_CA_CONFIGMAP, obj={
            **current, "data": data, "metadata": {
                **current["metadata"], "annotations": {**annotations, DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION}}})

    def _empty_namespace(self, namespace: str) -> None:
        for rt in self.registry:
            if rt.namespaced and not rt.virtual and self.registry.get(rt.group, rt.version, rt.resource) is rt:
                for obj in list(self.store.objects(rt, namespace)):
                    if self.store.find(rt, namespace, obj["metadata"]["name"]) is not None:
                        self.store.delete(rt, namespace, obj["metadata"]["name"])

    def _maybe_finish_namespace(self, namespace: str) -> None:
        if not namespace:
            return
        ns_rt = self.rt("", "namespaces")
        ns = self.store.find(ns_rt, "", namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        storage_keys = {rt.storage_key for rt in self.registry if rt.namespaced and not rt.virtual}
        for key in storage_keys:
            rt = next(r for r in self.registry if r.storage_key == key)
            if next(self.store.objects(rt, namespace), None) is not None:
                return
        spec = {**(ns.get("spec") or {}), "finalizers": []}
        self.store.update(ns_rt, "", namespace, obj={**ns, "spec": spec}, subresource="finalize", check_rv=False)

    # ---- workloads ----------------------------------------------------------------------------

    def _workload_status(self, rt: ResourceType, obj: Obj) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        generation = meta.get("generation", 1)
        if rt.resource == "deployments":
            replicas = int(spec.get("replicas", 1))
            status: Obj = {"observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                           "readyReplicas": replicas, "availableReplicas": replicas,
                           "conditions": self._conditions(obj, [
                               ("Available", "MinimumReplicasAvailable", "Deployment has minimum availability."),
                               ("Progressing", "NewReplicaSetAvailable", "ReplicaSet has successfully progressed.")])}
        else:
            selector = (spec.get("template") or {}).get("spec", {}).get("nodeSelector") or {}
            nodes_rt = self.rt("", "nodes")
            if selector:
                matcher = LabelSelector.from_api({"matchLabels": selector})
                count = sum(1 for n in self.store.objects(nodes_rt)
                            if matcher.matches(n["metadata"].get("labels") or {}))
            else:
                count = self.store.count(nodes_rt)  # O(1): re-counted on every Node added or deleted
            status = {"observedGeneration": generation, "desiredNumberScheduled": count,
                      "currentNumberScheduled": count, "numberReady": count, "updatedNumberScheduled": count,
                      "numberAvailable": count, "numberMisscheduled": 0}
        if {k: v for k, v in (obj.get("status") or {}).items()} != status:
            self.store.update(rt, meta.get("namespace", ""), meta["name"], obj={**obj, "status": status},
                              subresource="status", check_rv=False)

    def _conditions(self, obj: Obj, wanted: list[tuple[str, str, str]]) -> list[Obj]:
        old = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
        now = format_time(self.store.clock())
        result = []
        for type_, reason, message in wanted:
            previous = old.get(type_)
            if previous and previous.get("status") == "True" and previous.get("reason") == reason:
                result.append(previous)
            else:
                result.append({"type": type_, "status": "True", "reason": reason, "message": message,
                               "lastUpdateTime": now, "lastTransitionTime": now})
        return result

    def _budget_status(self, budget: Obj) -> None:
        meta = budget["metadata"]
        pods = list(self.store.objects(self.rt("", "pods"), meta["namespace"]))
        status = budget_status(budget, pods, format_time(self.store.clock()))
        if budget.get("status") != status:
            self.store.update(self.rt("policy", "poddisruptionbudgets"), meta["namespace"], meta["name"],
                              obj={**budget, "status": status}, subresource="status", check_rv=False)

    def _pod_changed(self, change: Change) -> None:
        """Recount the budgets that select the pod (before or after the change), and only those:
        counting every budget of a namespace on every pod change was quadratic at scale."""
        namespace = change.new["metadata"].get("namespace", "")
        labels = [change.new["metadata"].get("labels") or {}]
        if change.old is not None:
            labels.append(change.old["metadata"].get("labels") or {})
        for budget in list(self.store.objects(self.rt("policy", "poddisruptionbudgets"), namespace)):
            selector = LabelSelector.from_api((budget.get("spec") or {}).get("selector"))
            if any(selector.matches(pod_labels) for pod_labels in labels):
                self._budget_status(budget)
