"""Test-side access to the substrate's real MinIO, or to a MinIO of a test's own.

Each helper takes the store: the substrate (its Layout, for its MinIO) or a `PrivateMinio`."""

from __future__ import annotations

import json
import shutil
import socket
import time
import urllib.request

import boto3
from botocore.config import Config

from localkube import controlplane, processes
from localkube.layout import Layout
from tests.support.kubectl import kubectl


class PrivateMinio:
    """A MinIO of one test's own, for a test that stops the store: the substrate's MinIO serves
    other runs' backups meanwhile. It listens where the substrate's does (pods reach that
    address) on a port of its own, with the same credentials and bucket."""

    def __init__(self, substrate: Layout, name: str):
        self.substrate = substrate
        self.name = f"minio-{name}"
        self.host = controlplane.apiserver_host(substrate)
        with socket.socket() as s:
            s.bind((self.host, 0))
            self.port = s.getsockname()[1]
        self.data_dir = substrate.data_dir / self.name

    def s3_environment(self) -> dict[str, str]:
        return {**controlplane.s3_environment(self.substrate), "S3_ENDPOINT": f"http://{self.host}:{self.port}"}

    def start(self) -> PrivateMinio:
        argv = [
            str(self.substrate.binary("minio", "minio")),
            "server",
            str(self.data_dir),
            f"--address={self.host}:{self.port}",
            "--quiet",
        ]
        pid = processes.start(
            self.substrate.run_dir,
            self.substrate.logs_dir,
            self.name,
            argv,
            controlplane.minio_environment(self.substrate),
        )
        deadline = time.monotonic() + 60
        while not _live(self.s3_environment()["S3_ENDPOINT"]):
            if not processes.alive(pid) or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start; see {self.substrate.logs_dir / self.name}.log")
            time.sleep(0.2)
        client = s3_client(self)
        if controlplane.S3_BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=controlplane.S3_BUCKET)
        return self

    def stop(self) -> None:
        processes.stop(self.substrate.run_dir, self.name, grace=0.1)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


Store = Layout | PrivateMinio


def _live(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2):
            return True
    except OSError:
        return False


def s3_environment(store: Store) -> dict[str, str]:
    return store.s3_environment() if isinstance(store, PrivateMinio) else controlplane.s3_environment(store)


def s3_client(store: Store):
    env = s3_environment(store)
    return boto3.client(
        "s3",
        endpoint_url=env["S3_ENDPOINT"],
        region_name=env["S3_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )


def create_credentials_secret(
    store: Store,
    namespace: str,
    name: str = "s3-credentials",
    access_key: str | None = None,
    secret_key: str | None = None,
) -> str:
    env = s3_environment(store)
    kubectl(
        "create",
        "secret",
        "generic",
        name,
        "-n",
        namespace,
        f"--from-literal=accessKeyID={access_key or env['AWS_ACCESS_KEY_ID']}",
        f"--from-literal=secretAccessKey={secret_key or env['AWS_SECRET_ACCESS_KEY']}",
    )
    return name


def s3_storage_spec(
    store: Store, prefix: str, secret: str = "s3-credentials", bucket: str | None = None, **extra
) -> dict:
    env = s3_environment(store)
    return {
        "s3": {
            "bucket": bucket or env["S3_BUCKET"],
            "prefix": prefix,
            "endpoint": env["S3_ENDPOINT"],
            "region": env["S3_REGION"],
            "forcePathStyle": True,
            "insecure": env["S3_ENDPOINT"].startswith("http://"),
            "credentialsSecretRef": {"name": secret},
            **extra,
        }
    }


def list_keys(client, bucket: str, prefix: str) -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return sorted(keys)


def pending_uploads(client, bucket: str, prefix: str) -> list[dict]:
    return client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])


def read_json(client, bucket: str, key: str) -> dict:
    return json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
