# migslice: one image for the webhook, the extender (with the repartition controller), the node
# agent and the command line. `make image` (image/build.sh) builds it: it makes the base from
# Debian packages (image/base.sh) and passes BASE, VERSION and the secret below. docs/image.md.
#
# BASE: a Debian image with python3 and python3-venv. The runtime gets nothing else from Debian:
# no compilers, no pip, no apt, nothing NVIDIA (nvidia-ml-py loads libnvidia-ml at run time, and
# the NVIDIA container toolkit mounts it into the agent's container).
ARG BASE=migslice-base:bookworm

FROM ${BASE} AS build
# Two venvs: one with pip for building, and an empty one (no pip) that the runtime copies.
RUN python3 -m venv /opt/build && python3 -m venv --without-pip /opt/migslice
COPY . /src
# The wheel of this project, then the wheel into /opt/migslice with the dependencies its metadata
# names. kubernetes ships an asyncio twin of its client (kubernetes/aio, about 70 MB with
# bytecode) that migslice does not use; it goes. Then the bytecode of what migslice imports
# (image/bytecode.py imports every migslice module, so a missing import fails the build here).
# Secret "pip-cert" (optional): a CA bundle for pip, for builds behind a TLS-intercepting proxy.
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
    && export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore \
    && /opt/build/bin/pip wheel --no-deps --wheel-dir /dist /src \
    && /opt/build/bin/pip --python /opt/migslice/bin/python install --no-compile \
        /dist/migslice-*.whl \
    && rm -rf /opt/migslice/lib/python3*/site-packages/kubernetes/aio \
    && /opt/migslice/bin/python /src/image/bytecode.py migslice \
    && /opt/migslice/bin/migslice --help > /dev/null

FROM ${BASE}
ARG VERSION
ARG SOURCE=https://github.com/migslice/migslice
LABEL org.opencontainers.image.title="migslice" \
      org.opencontainers.image.description="Multi-tenant, hardware-isolated GPU slicing on NVIDIA MIG for Kubernetes: admission webhook, scheduler extender, repartition controller, node agent" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
RUN echo 'migslice:x:65532:65532:migslice:/tmp:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'migslice:x:65532:' >> /etc/group
COPY --from=build /opt/migslice /opt/migslice
# A read-only root works: Python writes no bytecode, and HOME and TMPDIR (gunicorn's worker
# heartbeat files and its control socket under $HOME) are /tmp, an emptyDir in the pod.
ENV PATH=/opt/migslice/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp \
    TMPDIR=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["migslice"]
CMD ["--help"]
