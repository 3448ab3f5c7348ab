# The operator image: multi-stage on a slim Python base, non-root, works with a
# read-only root filesystem (give it an emptyDir at /tmp), starts `python -m etcd_operator`.
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
RUN pip install --no-compile /wheels/*.whl \
 && rm -rf /wheels /root/.cache \
 && find /usr/local/lib/python3.11 -name '__pycache__' -prune -exec rm -rf {} + \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["python", "-m", "etcd_operator"]
