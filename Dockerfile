# Container image for the ipscheduler operator.
#
#   docker build -t ipscheduler:0.1.0 \
#     --build-arg VERSION="$(cat VERSION)" --build-arg REVISION="$(git rev-parse HEAD)" .
#
# The tag is the project version (the file VERSION), as in deploy/kustomization.yaml
# and the Helm chart's appVersion; `make deploy IMG=...` deploys another. Load it
# into the cluster's runtime afterwards (e.g. `kind load docker-image
# ipscheduler:0.1.0`); see deploy/README.md.

# ---------------------------------------------------------------------------
# Builder: build the project wheel plus wheels of all its dependencies, so the
# runtime stage installs from local files only (no network, no compiler).
# ---------------------------------------------------------------------------
FROM python:3.11.14-slim-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src

# Set by reproducible builds (make images: the commit's time): wheel timestamps follow it.
ARG SOURCE_DATE_EPOCH

# VERSION: pyproject.toml reads the package version from it.
COPY pyproject.toml README.md VERSION LICENSE ./
COPY operator ./operator

RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# ---------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------
FROM python:3.11.14-slim-bookworm

# The default is the file VERSION (tests/unit/test_packaging.py checks it);
# REVISION is the commit built (git rev-parse HEAD).
ARG VERSION=0.1.0
ARG REVISION=unknown

LABEL org.opencontainers.image.title="ipscheduler" \
      org.opencontainers.image.description="An underlay-IP-aware pod scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/ipscheduler/ipscheduler"

# HOME points at /tmp, which is the only writable path in the pod
# (emptyDir; the root filesystem is mounted read-only).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    HOME=/tmp

# Set by reproducible builds (make images: the commit's time): with it, pip's compiled
# .pyc files are hash-based instead of stamped with the install time.
ARG SOURCE_DATE_EPOCH

# Install the project wheel by path; its dependencies are resolved only from
# the wheels built above (--no-index), so their versions are fixed by the
# builder stage. The wheels are mounted for this step only: no layer keeps them.
RUN --mount=type=bind,from=builder,source=/wheels,target=/tmp/wheels \
    pip install --no-cache-dir --no-index --find-links=/tmp/wheels /tmp/wheels/ipscheduler-*.whl \
    && groupadd --system --gid 10001 ipscheduler \
    && useradd --system --no-log-init --uid 10001 --gid 10001 \
        --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin ipscheduler

WORKDIR /tmp

USER 10001:10001

ENTRYPOINT ["ipscheduler"]
CMD ["run"]
