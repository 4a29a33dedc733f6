"""Protobuf request bodies decode to the JSON object the same client would have sent.

The fixtures are bodies kubectl 1.32 really sent (see fixtures/protobuf/README.md); for the
generator commands, the JSON next to them is what `--dry-run=client -o json` printed for the same
command, i.e. kubectl's own JSON rendering of the object it encoded.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import zlib
from pathlib import Path
from typing import Any

import pytest

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server import protobuf

FIXTURES = Path(__file__).parent / "fixtures" / "protobuf"

GENERATED = ["namespace", "configmap", "secret", "secret-saveconfig", "serviceaccount", "deployment-web",
             "deployment-api", "clusterrole-r", "clusterrole-r2", "clusterrole-r3", "clusterrole-agg",
             "role-ro", "rolebinding-b", "rolebinding-b2", "clusterrolebinding-cb"]


def decode_fixture(name: str) -> dict[str, Any]:
    return protobuf.decode_object((FIXTURES / f"{name}.pb").read_bytes())


@pytest.mark.parametrize("name", GENERATED)
def test_kubectl_create_bodies_match_their_json_rendering(name: str) -> None:
    expected = json.loads((FIXTURES / f"{name}.json").read_text())
    assert decode_fixture(name) == expected


def test_configmap_keeps_text_and_binary_data_apart() -> None:
    body = decode_fixture("configmap")
    assert body["data"] == {"a": "b", "empty": "", "text.txt": "hello"}
    assert body["binaryData"] == {"blob": "AAH+/2Jpbg=="}  # base64 of fixtures/protobuf/blob.bin


def test_deployment_carries_replicas_command_and_port() -> None:
    spec = decode_fixture("deployment-api")["spec"]
    assert spec["replicas"] == 3
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"] == ["sleep", "3600"]
    assert container["ports"] == [{"containerPort": 8080}]


# Bodies of commands that have no --dry-run: the expectations are the Go structs kubectl filled in,
# rendered with their JSON tags by hand.

UNSET_META = {"creationTimestamp": None}


def test_auth_can_i_list_pods() -> None:
    assert decode_fixture("ssar-list-pods") == {
        "kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "metadata": UNSET_META,
        "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}},
        "status": {"allowed": False},  # `json:"allowed"` has no omitempty
    }


def test_auth_can_i_on_a_named_subresource() -> None:
    assert decode_fixture("ssar-scale")["spec"] == {"resourceAttributes": {
        "namespace": "x", "verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale",
        "name": "web"}}


def test_auth_can_i_on_a_non_resource_url() -> None:
    assert decode_fixture("ssar-nonresource")["spec"] == {"nonResourceAttributes": {"path": "/logs", "verb": "get"}}


def test_auth_can_i_list() -> None:
    assert decode_fixture("ssrr") == {
        "kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1", "metadata": UNSET_META,
        "spec": {"namespace": "x"},
        "status": {"resourceRules": None, "nonResourceRules": None, "incomplete": False},
    }


def test_auth_whoami() -> None:
    assert decode_fixture("ssr") == {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                                     "metadata": UNSET_META, "status": {"userInfo": {}}}


def test_create_token_with_defaults_leaves_audiences_and_expiry_unset() -> None:
    assert decode_fixture("token") == {
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "metadata": UNSET_META,
        "spec": {"audiences": None}, "status": {"token": "", "expirationTimestamp": None},
    }


def test_create_token_with_audiences_duration_and_bound_object() -> None:
    assert decode_fixture("token-bound")["spec"] == {
        "audiences": ["a", "b"], "expirationSeconds": 7200,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "1234"},
    }


def test_delete_options_of_a_server_side_dry_run_drain() -> None:
    assert decode_fixture("deleteoptions-dryrun") == {"kind": "DeleteOptions", "apiVersion": "v1",
                                                      "gracePeriodSeconds": 5, "dryRun": ["All"]}
    assert decode_fixture("deleteoptions-empty") == {"kind": "DeleteOptions", "apiVersion": "v1"}


# Hand-built bodies, for what kubectl never sends as protobuf: a minimal encoder of the wire format.

def varint(number: int) -> bytes:
    number &= (1 << 64) - 1  # negative int32/int64 travel as ten-byte two's complement
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def num(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def raw(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return varint(field << 3 | 2) + varint(len(data)) + data


def msg(field: int, *parts: bytes) -> bytes:
    return raw(field, b"".join(parts))


def entry(field: int, key: str, value: bytes | str) -> bytes:
    return msg(field, raw(1, key), raw(2, value))


def envelope(api_version: str, kind: str, body: bytes, encoding: str = "") -> bytes:
    return b"k8s\x00" + msg(1, raw(1, api_version), raw(2, kind)) + raw(2, body) + raw(3, encoding) + raw(4, "")


def test_eviction_matches_the_json_kubectl_drain_sends() -> None:
    # ObjectMeta: name=1, namespace=3, creationTimestamp=8; Eviction: metadata=1, deleteOptions=2;
    # DeleteOptions: gracePeriodSeconds=1, dryRun=5.
    meta = msg(1, raw(1, "p1"), raw(3, "default"), raw(8, b""))
    plain = envelope("policy/v1", "Eviction", meta + msg(2))
    dry_run = envelope("policy/v1", "Eviction", meta + msg(2, num(1, 5), raw(5, "All")))
    assert protobuf.decode_object(plain) == json.loads((FIXTURES / "eviction.json").read_text())
    assert protobuf.decode_object(dry_run) == json.loads((FIXTURES / "eviction-dryrun.json").read_text())


def test_object_meta_in_full() -> None:
    fields_v1 = b'{"f:data":{"f:a":{}}}'
    meta = b"".join([
        raw(1, "c"), raw(3, "x"), raw(5, "uid-1"), raw(6, "42"), num(7, 3),
        msg(8, num(1, 1795309323)),  # 2026-11-22T01:02:03Z
        msg(9, num(1, 1795309323), num(2, 999_999_999)),  # JSON drops the nanoseconds
        num(10, 0),  # a pointer set to zero is kept: deletion is immediate
        entry(11, "app", "web"), entry(11, "tier", ""), entry(12, "note", "hi"),
        msg(13, raw(1, "Deployment"), raw(3, "web"), raw(4, "uid-0"), raw(5, "apps/v1"), num(6, 1)),
        raw(14, "example.com/keep"), raw(14, "example.com/also"),
        msg(17, raw(1, "kubectl"), raw(2, "Update"), raw(3, "v1"), msg(4, num(1, 0)), raw(6, "FieldsV1"),
            msg(7, raw(1, fields_v1))),
    ])
    body = protobuf.decode_object(envelope("v1", "ConfigMap", msg(1, meta) + num(4, 0)))
    assert body == {
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {
            "name": "c", "namespace": "x", "uid": "uid-1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-11-22T01:02:03Z", "deletionTimestamp": "2026-11-22T01:02:03Z",
            "deletionGracePeriodSeconds": 0,
            "labels": {"app": "web", "tier": ""}, "annotations": {"note": "hi"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-0",
                                 "controller": True}],
            "finalizers": ["example.com/keep", "example.com/also"],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                               "time": "1970-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:data": {"f:a": {}}}}],
        },
        "immutable": False,
    }


def test_container_env_resources_and_rollout_strategy() -> None:
    container = b"".join([
        raw(1, "app"), raw(2, "busybox"),
        # SecretKeySelector's LocalObjectReference (field 1) is inline in JSON.
        msg(7, raw(1, "PASSWORD"), msg(3, msg(4, msg(1, raw(1, "creds")), raw(2, "password"), num(3, 1)))),
        msg(7, raw(1, "EMPTY"), raw(2, "")),
        msg(8, msg(1, raw(1, "cpu"), msg(2, raw(1, "500m"))), msg(2, raw(1, "memory"), msg(2, raw(1, "64Mi")))),
    ])
    spec = b"".join([
        num(1, 2), msg(2, entry(1, "app", "api")),
        msg(3, msg(1, raw(8, b"")), msg(2, msg(2, container), num(4, 30), num(11, 0))),
        msg(4, raw(1, "RollingUpdate"), msg(2, msg(1, num(1, 1), raw(3, "25%")), msg(2, num(1, 0), num(2, 1)))),
    ])
    body = protobuf.decode_object(envelope("apps/v1", "Deployment", msg(1, raw(1, "api")) + msg(2, spec)))
    assert body["spec"] == {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "api"}},
        "template": {"metadata": {"creationTimestamp": None}, "spec": {
            "containers": [{
                "name": "app", "image": "busybox",
                "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {
                    "name": "creds", "key": "password", "optional": True}}},
                        {"name": "EMPTY"}],
                "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "64Mi"}},
            }],
            "terminationGracePeriodSeconds": 30,
        }},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
    }
    assert "status" not in body


def test_negative_integers_round_trip() -> None:
    body = protobuf.decode_object(envelope("v1", "DeleteOptions", num(1, -1)))
    assert body["gracePeriodSeconds"] == -1


def test_self_subject_access_review_with_selectors() -> None:
    attributes = b"".join([
        raw(2, "list"), raw(5, "pods"),
        msg(8, raw(1, "spec.nodeName=n1")),
        msg(9, msg(2, raw(1, "app"), raw(2, "In"), raw(3, "web"), raw(3, "api"))),
    ])
    body = protobuf.decode_object(envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview",
                                           msg(2, msg(1, attributes))))
    assert body["spec"]["resourceAttributes"] == {
        "verb": "list", "resource": "pods", "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
        "labelSelector": {"requirements": [{"key": "app", "operator": "In", "values": ["web", "api"]}]},
    }
    assert "status" not in body  # a pointer-free struct that was not on the wire


# Errors: a clear refusal naming the kind, never a half-decoded object.

def refused(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as info:
        protobuf.decode_object(body)
    return info.value


def test_body_without_the_magic_prefix_is_a_bad_request() -> None:
    error = refused(b'{"kind":"Namespace"}')
    assert error.code == 400
    assert "k8s" in error.message


def test_unknown_kind_is_unsupported_and_named() -> None:
    error = refused(envelope("apps/v1", "StatefulSet", msg(1, raw(1, "db"))))
    assert error.code == 415
    assert "StatefulSet (apps/v1)" in error.message


def test_compressed_content_is_unsupported() -> None:
    error = refused(envelope("v1", "Namespace", gzip.compress(b"x"), encoding="gzip"))
    assert error.code == 415


@pytest.mark.parametrize("cut", [5, 20, 40])
def test_truncated_body_is_a_bad_request_naming_the_kind(cut: int) -> None:
    whole = (FIXTURES / "deployment-web.pb").read_bytes()
    error = refused(whole[:-cut])
    assert error.code == 400
    assert "Deployment" in error.message


def test_fields_beyond_the_table_are_refused_unless_zero() -> None:
    unset_volumes = raw(1, b"")  # PodSpec.volumes as an empty message: Go's zero value, tolerated
    toleration = msg(22, raw(1, "dedicated"))  # PodSpec.tolerations: not understood, so refused
    template = msg(3, msg(2, unset_volumes, num(11, 0)))
    accepted = protobuf.decode_object(envelope("apps/v1", "Deployment", msg(2, template)))
    assert accepted["spec"]["template"]["spec"] == {"containers": None}
    error = refused(envelope("apps/v1", "Deployment", msg(2, msg(3, msg(2, toleration)))))
    assert error.code == 400
    assert "field 22 of core.PodSpec" in error.message


def test_wrong_wire_type_is_a_bad_request() -> None:
    error = refused(envelope("v1", "Namespace", msg(1, num(1, 7))))  # a number where the name should be
    assert error.code == 400
    assert "Namespace" in error.message


# The table against the descriptors compiled into kubectl itself: every field number, name, type and
# cardinality, and exactly the documented fields missing from the partial messages.

PACKAGES = {"meta": "k8s.io.apimachinery.pkg.apis.meta.v1", "core": "k8s.io.api.core.v1",
            "apps": "k8s.io.api.apps.v1", "authentication": "k8s.io.api.authentication.v1",
            "authorization": "k8s.io.api.authorization.v1", "policy": "k8s.io.api.policy.v1",
            "rbac": "k8s.io.api.rbac.v1"}
SPECIAL_TYPES = {protobuf.TIME: "Time", protobuf.QUANTITY: "Quantity", protobuf.INT_OR_STRING: "IntOrString",
                 protobuf.FIELDS_V1: "FieldsV1", protobuf.EXTRA_VALUE: "ExtraValue"}
SCALAR_TYPES = {9: protobuf.STRING, 12: protobuf.BYTES, 3: protobuf.INT, 5: protobuf.INT, 8: protobuf.BOOL}
NOT_DECODED = {
    "core.PodSpec": {"volumes", "ephemeralContainers", "securityContext", "affinity", "tolerations",
                     "hostAliases", "dnsConfig", "readinessGates", "overhead", "topologySpreadConstraints",
                     "os", "schedulingGates", "resourceClaims", "resources"},
    "core.Container": {"resizePolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe",
                       "startupProbe", "lifecycle", "securityContext"},
}


def fields_of(data: bytes) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for number, _, value in protobuf._fields(data):
        found.setdefault(number, []).append(value)
    return found


def kubectl_descriptors() -> dict[str, dict[str, Any]]:
    """message full name → {"fields": {number: (name, type, type_name, repeated)}, "nested": {...}}."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed")
    image = Path(binary).resolve().read_bytes()
    messages: dict[str, dict[str, Any]] = {}
    for start in (m.start() for m in re.finditer(rb"\x1f\x8b\x08\x00\x00\x00\x00\x00", image)):
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(image[start:start + 1_000_000])
            file = fields_of(data)
        except (zlib.error, protobuf.Malformed):
            continue
        package = bytes(file.get(2, [b""])[0]).decode(errors="replace")
        if not package.startswith("k8s.io."):
            continue
        for descriptor in file.get(4, []):
            message = fields_of(descriptor)
            name = bytes(message[1][0]).decode()
            fields = {}
            for raw_field in message.get(2, []):
                field = fields_of(raw_field)
                type_name = bytes(field.get(6, [b""])[0]).decode().rsplit(".", 1)[-1]
                fields[field[3][0]] = (bytes(field[1][0]).decode(), field[5][0], type_name, field[4][0] == 3)
            maps = {}
            for nested in message.get(3, []):  # map<string, X> entries: {1: key, 2: value}
                entry_fields = {fields_of(f)[3][0]: fields_of(f) for f in fields_of(nested).get(2, [])}
                value = entry_fields[2]
                maps[bytes(fields_of(nested)[1][0]).decode()] = (
                    value[5][0], bytes(value.get(6, [b""])[0]).decode().rsplit(".", 1)[-1])
            messages[f"{package}.{name}"] = {"fields": fields, "maps": maps}
    if not messages:
        pytest.skip("this kubectl carries no protobuf descriptors")
    return messages


@pytest.mark.kubectl
def test_table_matches_the_generated_proto_kubectl_was_built_with() -> None:
    descriptors = kubectl_descriptors()
    for name, table in protobuf.MESSAGES.items():
        group, short = name.split(".")
        upstream = descriptors[f"{PACKAGES[group]}.{short}"]
        for number, field in table.items():
            assert number in upstream["fields"], f"{name}: no field {number} upstream"
            proto_name, proto_type, type_name, repeated = upstream["fields"][number]
            where = f"{name}.{proto_name} ({number})"
            if field.inline:
                assert type_name == field.kind.split(".")[1], where
                continue
            assert field.json.lower() == proto_name.lower(), where  # BoundObjectReference's uID is "uid"
            if field.map_of is not None:
                assert repeated and type_name in upstream["maps"], where
                value_type, value_type_name = upstream["maps"][type_name]
                if value_type == 11:
                    assert SPECIAL_TYPES[field.map_of] == value_type_name, where
                else:
                    assert SCALAR_TYPES[value_type] == field.map_of, where
                continue
            assert repeated == field.repeated, where
            if proto_type == 11:  # a message
                expected = SPECIAL_TYPES.get(field.kind) or field.kind.split(".")[1]
                assert type_name == expected, where
            else:
                assert SCALAR_TYPES[proto_type] == field.kind, where
        missing = {upstream["fields"][n][0] for n in upstream["fields"].keys() - table.keys()}
        assert missing == NOT_DECODED.get(name, set()), name
