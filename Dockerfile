# The operator image: multi-stage on a slim Python base, non-root, works with a
# read-only root filesystem (give it an emptyDir at /tmp), starts `python -m etcd_operator`.
# `make image` builds the same image without Docker (packaging/image/build.sh: Debian
# bookworm's Python 3.11, etcd-replay-apply from the local Go, user nonroot 65532:65532,
# the same entrypoint and port); tests/image/test_oci_image.py checks that both agree.
FROM golang:1.26 AS replay-apply
WORKDIR /src
COPY cmd/etcd-replay-apply ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/etcd-replay-apply .

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY etcd_operator ./etcd_operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=build /wheels /wheels
COPY --from=replay-apply /out/etcd-replay-apply /usr/local/bin/etcd-replay-apply
# Bytecode is shipped: compiling every import at start (read-only root) costs ~26 MiB of RSS.
RUN pip install /wheels/*.whl \
 && rm -rf /wheels /root/.cache \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["python", "-m", "etcd_operator"]
