# syntax=docker/dockerfile:1
# The colocation image: one console script, `colocation operator|agent|cleanup`. The sandbox
# (sandbox/, the colocation-sandbox distribution) is a test harness: not in the build context, the
# wheel or the image, so `colocation sandbox` here says it is not installed.
#
# Two stages: the builder fetches every dependency as a wheel, each checked against the sha256 in
# requirements/image.txt (pip-compile --generate-hashes from pyproject.toml; docs/development.md,
# "The image locks", says how to refresh it), and builds the project's own wheel with the
# build backend pinned the same way (requirements/build.txt). The final stage installs exactly the
# locked set with --no-index and --require-hashes, so the image never reaches a package index and
# holds nothing that was not pinned; it runs as a numeric non-root user, with no build tools.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/image.txt requirements/build.txt ./requirements/
# Binary wheels only (--only-binary): nothing is compiled, so the builder needs no compiler either.
RUN pip install --require-hashes --only-binary=:all: --no-deps -r requirements/build.txt \
    && pip download --require-hashes --only-binary=:all: --no-deps --dest /wheels -r requirements/image.txt
# Only what the wheel is built from (see .dockerignore), so edits to tests or docs do not
# invalidate the layers above.
COPY pyproject.toml README.md ./
COPY operator ./operator
# --no-build-isolation: the backend is the pinned one installed above, not one pip would fetch.
RUN pip wheel --no-deps --no-build-isolation --no-index --wheel-dir /wheels . \
    && ls /wheels/colocation-*.whl

FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TZ=UTC
# The wheels and the lock file are bind-mounted, not copied, so they take no space in the image.
# pip compiles the bytecode at install time: the root filesystem is read-only at run time. The
# project's own wheel was built from this source tree in the builder, so there is no published hash
# to check it against; --no-deps keeps it from bringing anything the lock file did not pin, and
# `pip check` proves the locked set satisfies every requirement. Then the installers go: the
# image runs Python, it never installs into itself.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,source=requirements/image.txt,target=/requirements/image.txt \
    pip install --no-index --find-links=/wheels --require-hashes --only-binary=:all: --no-deps \
        -r /requirements/image.txt \
    && pip install --no-index --no-deps /wheels/colocation-*.whl \
    && pip check \
    && groupadd --system --gid 65532 colocation \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin colocation \
    && colocation --version \
    && python -m pip uninstall --yes setuptools wheel pip
# Numeric, so that the kubelet can verify runAsNonRoot without looking the name up.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["colocation"]
CMD ["--help"]
