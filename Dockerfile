# syntax=docker/dockerfile:1
# One image for every role: hub worker, site worker, beat, API, Flower, and the CLI.
# The role is the command: `docker run … IMAGE daemon worker`, `… daemon api`, and so on
# (docs/production.md, "Containers"). No Slurm client is bundled: Slurm talks only to
# releases close to its own, so a site worker bind-mounts its head node's sacctmgr,
# libslurm and slurm.conf.
ARG PYTHON_IMAGE=python:3.13-slim-bookworm

# -- build: the virtualenv, with Poetry (the same major release that wrote poetry.lock) --
FROM ${PYTHON_IMAGE} AS builder
ARG POETRY_VERSION=2.5.1
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    POETRY_NO_INTERACTION=1 POETRY_VIRTUALENVS_IN_PROJECT=1 POETRY_CACHE_DIR=/tmp/poetry
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential libldap-dev libsasl2-dev \
        libkrb5-dev \
 && rm -rf /var/lib/apt/lists/*
RUN pip install "poetry==${POETRY_VERSION}"
WORKDIR /app
# dependencies first: this layer is rebuilt only when the lock changes
COPY pyproject.toml poetry.lock README.md ./
RUN poetry install --only main --no-root && rm -rf /tmp/poetry
COPY cheeto_like ./cheeto_like
RUN poetry install --only main && rm -rf /tmp/poetry \
 && /app/.venv/bin/cheeto --version

# -- runtime ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG CHEETO_UID=10001
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libldap-2.5-0 libsasl2-2 \
        libkrb5-3 libgssapi-krb5-2 libgomp1 munge git openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && rm -f /etc/munge/munge.key \
 && groupadd --system --gid "${CHEETO_UID}" cheeto \
 && useradd --system --uid "${CHEETO_UID}" --gid cheeto --home-dir /var/lib/cheeto \
        --shell /usr/sbin/nologin cheeto \
 && install -d -o cheeto -g cheeto -m 0750 /var/lib/cheeto \
 && install -d -o cheeto -g cheeto -m 0700 /var/lib/cheeto/ssh \
 && install -d -o cheeto -g cheeto -m 0700 /var/lib/cheeto/store \
 && install -d -o cheeto -g cheeto -m 0700 /var/lib/cheeto/state \
 && install -d -m 0755 /etc/cheeto /etc/cheeto/ssh /run/cheeto
# the app lives at the path it was built at (the venv's entry points point there)
COPY --from=builder /app /app
COPY deploy/known_hosts.github /etc/cheeto/ssh/known_hosts.github
COPY --chmod=0755 docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/cheeto XDG_DATA_HOME=/var/lib/cheeto \
    CHEETO_CONFIG=/etc/cheeto/config.yaml \
    STATE_DIRECTORY=/var/lib/cheeto/state \
    LD_LIBRARY_PATH=/usr/lib64:/usr/lib64/slurm \
    SLURM_CONF=/etc/slurm/slurm.conf
WORKDIR /var/lib/cheeto
# The state that must outlive a container: the API's token key (jwt.key, unless
# api.jwt_key: store) and beat's schedule file. Mount a NAMED volume or a host directory
# here (docker run -v cheeto-api-state:/var/lib/cheeto/state): the entrypoint refuses
# to start an API whose key would be on the container's layer or an anonymous volume.
# docs/deployment-containers.md.
VOLUME ["/var/lib/cheeto/state"]
# Non-root by default. Only a site worker starts as root (--user 0), to run munged as
# the munge user; the entrypoint then drops to CHEETO_RUN_AS (default cheeto).
USER cheeto
EXPOSE 8000 5555
# the API role: GET /healthz; Flower: /healthcheck; workers and beat: store + broker
HEALTHCHECK --interval=30s --timeout=20s --start-period=60s --retries=3 \
    CMD ["cheeto", "daemon", "healthcheck", "-q"]
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["--help"]
