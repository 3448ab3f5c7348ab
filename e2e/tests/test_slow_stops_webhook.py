"""The webhook behind the real nodes' slow stops (tests/support/slow_stops.py), as the
kube-apiserver calls it: over TLS with the CA it is given, an AdmissionReview in, a JSON patch
out that gives the etcd container a preStop sleep, and no patch for any other pod."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request

from tests.support import slow_stops


def review(pod: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-1", "object": pod}}


def ask(port: int, ca: bytes, pod: dict) -> dict:
    context = ssl.create_default_context(cadata=ca.decode())
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/mutate",
        data=json.dumps(review(pod)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return json.loads(answer.read())["response"]


def test_an_etcd_container_gets_a_pre_stop_sleep_and_other_pods_nothing():
    member = {"spec": {"containers": [{"name": "sidecar"}, {"name": "etcd"}]}}
    other = {"spec": {"containers": [{"name": "web"}]}}
    with slow_stops.serving(3) as (port, ca):
        patched, untouched = ask(port, ca, member), ask(port, ca, other)
    assert patched["uid"] == "u-1" and patched["allowed"] and patched["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(patched["patch"])) == [
        {"op": "add", "path": "/spec/containers/1/lifecycle", "value": {"preStop": {"sleep": {"seconds": 3}}}}
    ]
    assert untouched == {"uid": "u-1", "allowed": True}
