"""The legacy discovery documents and the success Status, as every server of the project writes them."""

from __future__ import annotations

import orjson
import pytest

from colocation.apimachinery import discovery_documents as docs
from colocation.apimachinery.errors import success_status


def test_a_group_prefers_its_first_version() -> None:
    assert docs.api_group("custom.metrics.k8s.io", ["v1beta2", "v1beta1"]) == {
        "kind": "APIGroup", "apiVersion": "v1", "name": "custom.metrics.k8s.io",
        "versions": [{"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"},
                     {"groupVersion": "custom.metrics.k8s.io/v1beta1", "version": "v1beta1"}],
        "preferredVersion": {"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"}}
    with pytest.raises(ValueError, match="serves no version"):
        docs.api_group_body("empty.example.dev", [])


def test_a_group_list_lists_group_bodies_in_the_order_given() -> None:
    groups = [docs.api_group_body("metrics.colocation.dev", ["v1alpha1"]), docs.api_group_body("metrics.k8s.io",
                                                                                                ["v1beta1"])]
    document = docs.api_group_list(groups)
    assert list(document) == ["kind", "apiVersion", "groups"]
    assert [g["name"] for g in document["groups"]] == ["metrics.colocation.dev", "metrics.k8s.io"]
    assert "kind" not in document["groups"][0]


def test_api_versions_name_the_core_versions_and_addresses() -> None:
    address = {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
    assert docs.api_versions(["v1"], [address]) == {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"],
                                                    "serverAddressByClientCIDRs": [address]}


def test_resources_are_written_in_the_go_field_order_without_empty_options() -> None:
    nodemetrics = docs.api_resource("nodemetrics", "NodeMetric", ("get", "list", "watch"), namespaced=False,
                                    singular_name="nodemetric", short_names=["nm"])
    status = docs.api_resource("nodemetrics/status", "NodeMetric", ["get", "update"], namespaced=False)
    eviction = docs.api_resource("pods/eviction", "Eviction", ["create"], namespaced=True, group="policy",
                                 version="v1")
    pods = docs.api_resource("pods", "Pod", ["get"], namespaced=True, singular_name="pod", short_names=["po"],
                             categories=["all"])
    assert orjson.dumps(nodemetrics) == (b'{"name":"nodemetrics","singularName":"nodemetric","namespaced":false,'
                                         b'"kind":"NodeMetric","verbs":["get","list","watch"],"shortNames":["nm"]}')
    assert status == {"name": "nodemetrics/status", "singularName": "", "namespaced": False, "kind": "NodeMetric",
                      "verbs": ["get", "update"]}
    assert list(eviction) == ["name", "singularName", "namespaced", "group", "version", "kind", "verbs"]
    assert list(pods)[-2:] == ["shortNames", "categories"]


def test_a_resource_list_names_its_group_version() -> None:
    resource = docs.api_resource("nodes", "NodeMetrics", ["get", "list"], namespaced=False)
    assert docs.api_resource_list("metrics.k8s.io", "v1beta1", [resource]) == {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1",
        "resources": [resource]}
    assert docs.api_resource_list("", "v1", [])["groupVersion"] == "v1"


def test_success_status_leaves_out_what_is_zero() -> None:
    assert success_status(201) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "code": 201}
    detailed = success_status(message="stored 3 of 4 samples", details={"name": "node-1", "causes": []})
    assert list(detailed) == ["kind", "apiVersion", "metadata", "status", "message", "details"]
    assert success_status() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
