"""`make release` with RELEASE_REGISTRY: the image index and the chart pushed, the index signed
with the release's key, and each platform's SBOM and the provenance attested; what a user pulls
verifies with the public key alone, and nothing else does."""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import tarfile
import tempfile

from tests.release.conftest import sha256
from tests.release.test_release_image import IMAGE, Layout
from tests.support import doc_commands, oci_registry
from tests.support.helm import helm

VERSION = "0.1.0"
REPOSITORY = "etcd-operator"


def cosign(published, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in published.cosign_env.items() if k != "COSIGN_KEY"}
    return subprocess.run(
        [str(oci_registry.testbin("cosign")), *args], capture_output=True, text=True, timeout=120, env=env, check=check
    )


def image_ref(published, digest: str) -> str:
    return f"{published.registry.host}/{REPOSITORY}@{digest}"


def released_index(out) -> tuple[str, dict]:

    with tempfile.TemporaryDirectory() as folder, tarfile.open(out / IMAGE) as archive:
        archive.extractall(folder, filter="data")
        layout = Layout(pathlib.Path(folder))
        digest = layout.index_descriptor()["digest"]
        return digest, layout.json(digest)


def test_the_tag_names_the_released_index_with_both_platforms(published, out):
    digest, index = released_index(out)
    pushed_digest, pushed = published.registry.manifest(REPOSITORY, VERSION)
    assert pushed_digest == digest and pushed == index


def verify(published, key: pathlib.Path, reference: str, check: bool = True) -> subprocess.CompletedProcess:
    return cosign(published, "verify", "--key", str(key), "--insecure-ignore-tlog=true", reference, check=check)


def attested(published, predicate_type: str, reference: str) -> dict:
    """The in-toto statement of the one attestation of that type, its signature verified."""
    found = cosign(
        published,
        "verify-attestation",
        "--key",
        str(published.public_key),
        "--insecure-ignore-tlog=true",
        "--type",
        predicate_type,
        reference,
    )
    (envelope,) = [json.loads(line) for line in found.stdout.splitlines() if line.startswith("{")]
    return json.loads(base64.b64decode(envelope["payload"]))


def test_the_index_verifies_with_the_release_key_only(published, out, tmp_path):
    digest, _ = released_index(out)
    verified = verify(published, published.public_key, image_ref(published, digest))
    (payload,) = json.loads(next(line for line in verified.stdout.splitlines() if line.startswith("[")))
    assert payload["critical"]["image"]["docker-manifest-digest"] == digest

    _, other_public_key = oci_registry.cosign_key_pair(tmp_path, "another-key")
    refused = verify(published, other_public_key, image_ref(published, digest), check=False)
    assert refused.returncode != 0, refused.stdout


def test_a_tag_moved_to_another_image_no_longer_verifies(published, out):
    """Whoever can write the registry can move the tag; the signature stays with the digest."""
    _, index = released_index(out)
    amd64 = index["manifests"][0]["digest"]
    crane = str(oci_registry.testbin("crane"))
    moved = f"{published.registry.host}/{REPOSITORY}:moved"
    subprocess.run([crane, "copy", image_ref(published, amd64), moved], check=True, capture_output=True, timeout=120)
    refused = verify(published, published.public_key, moved, check=False)
    assert refused.returncode != 0 and "no signatures found" in refused.stderr, refused.stderr


def test_each_platform_carries_its_sbom_and_the_index_its_provenance_as_signed_attestations(published, out):
    digest, index = released_index(out)
    statement = attested(published, "slsaprovenance1", image_ref(published, digest))
    assert statement["subject"][0]["digest"] == {"sha256": digest.removeprefix("sha256:")}
    released = json.loads((out / f"etcd-operator-{VERSION}.provenance.json").read_text())["predicate"]
    assert json.dumps(statement["predicate"], sort_keys=True) == json.dumps(released, sort_keys=True)
    for entry in index["manifests"]:
        arch = entry["platform"]["architecture"]
        statement = attested(published, "spdxjson", image_ref(published, entry["digest"]))
        expected = json.loads((out / f"etcd-operator-{VERSION}-linux-{arch}.spdx.json").read_text())
        assert statement["subject"][0]["digest"] == {"sha256": entry["digest"].removeprefix("sha256:")}
        assert statement["predicate"]["documentNamespace"] == expected["documentNamespace"]
        assert len(statement["predicate"]["packages"]) == len(expected["packages"])


def test_the_chart_pulled_from_the_registry_is_the_released_one(published, out, tmp_path):
    helm(
        "pull",
        f"oci://{published.registry.host}/charts/etcd-operator",
        "--version",
        VERSION,
        "--plain-http",
        "--destination",
        str(tmp_path),
    )
    assert sha256(tmp_path / f"etcd-operator-{VERSION}.tgz") == sha256(out / f"etcd-operator-{VERSION}.tgz")


def test_the_verify_commands_of_the_releasing_page_run_as_printed(published):
    """The page's image is the public one; here the same release is in the local registry."""
    for starts_with in ("cosign verify --key", "cosign verify-attestation --key"):
        env, command = doc_commands.command(
            "docs/operations/releasing.md",
            starts_with,
            cosign=str(oci_registry.testbin("cosign")),
            **{
                "cosign.pub": str(published.public_key),
                f"ghcr.io/etcd-operator/etcd-operator:{VERSION}": f"{published.registry.host}/{REPOSITORY}:{VERSION}",
            },
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=published.cosign_env | env)
        assert done.returncode == 0, (starts_with, done.stderr)
