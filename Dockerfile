# syntax=docker/dockerfile:1
# The colocation image: one console script, `colocation operator|agent|sandbox`.
#
# Two stages: the builder turns the source tree into wheels (the project's and every
# dependency's, fetched once at build time); the final stage installs them with --no-index,
# so the image never reaches a package index, and runs as a non-root user with no build tools.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (see .dockerignore), so edits to tests or docs do not
# invalidate this layer.
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --wheel-dir /wheels . \
    && ls /wheels/colocation-*.whl

FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TZ=UTC
# The wheels are bind-mounted, not copied, so they take no space in the image. pip compiles
# the bytecode at install time: the root filesystem is read-only at run time.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels colocation \
    && groupadd --system --gid 65532 colocation \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin colocation \
    && colocation --version
# Numeric, so that the kubelet can verify runAsNonRoot without looking the name up.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["colocation"]
CMD ["--help"]
