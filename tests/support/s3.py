"""Test-side access to the substrate's real MinIO."""

from __future__ import annotations

import json

import boto3
from botocore.config import Config

from localkube import controlplane
from localkube.layout import Layout
from tests.support.kubectl import kubectl


def s3_client(substrate: Layout):
    env = controlplane.s3_environment(substrate)
    return boto3.client(
        "s3", endpoint_url=env["S3_ENDPOINT"], region_name=env["S3_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )


def create_credentials_secret(substrate: Layout, namespace: str, name: str = "s3-credentials",
                              access_key: str | None = None, secret_key: str | None = None) -> str:
    env = controlplane.s3_environment(substrate)
    kubectl("create", "secret", "generic", name, "-n", namespace,
            f"--from-literal=accessKeyID={access_key or env['AWS_ACCESS_KEY_ID']}",
            f"--from-literal=secretAccessKey={secret_key or env['AWS_SECRET_ACCESS_KEY']}")
    return name


def s3_storage_spec(substrate: Layout, prefix: str, secret: str = "s3-credentials", bucket: str | None = None,
                    **extra) -> dict:
    env = controlplane.s3_environment(substrate)
    return {"s3": {"bucket": bucket or env["S3_BUCKET"], "prefix": prefix, "endpoint": env["S3_ENDPOINT"],
                   "region": env["S3_REGION"], "forcePathStyle": True,
                   "insecure": env["S3_ENDPOINT"].startswith("http://"),
                   "credentialsSecretRef": {"name": secret}, **extra}}


def list_keys(client, bucket: str, prefix: str) -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return sorted(keys)


def pending_uploads(client, bucket: str, prefix: str) -> list[dict]:
    return client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])


def read_json(client, bucket: str, key: str) -> dict:
    return json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
