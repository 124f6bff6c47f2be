"""Which ``resource.k8s.io/v1`` resources the API server serves, asked once at a service's
start (the DRA caches, and the extender's DeviceTaintRule cache and steer, start only for what
is served). Only an answer decides: a 200 lists the resources, a 404 says DRA is not served.
An API server that cannot be reached, or that answers 5xx or 429, is asked again with backoff
until it answers: a service started while it was away would otherwise run for good without
the caches and the steer it ought to have (neither service is ready before its caches list
anyway). Any other refusal (401, 403) leaves the DRA caches on, to retry and report."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from migslice.kube.informer import RELIST_BACKOFF, Backoff
from migslice.kube.transport import ApiError, KubeError, Transport
from migslice.names import DRA_API

log = logging.getLogger(__name__)

DISCOVERY_BACKOFF = Backoff(initial_s=0.5, max_s=5.0, jitter=RELIST_BACKOFF.jitter)


def dra_resources(
    transport: Transport,
    *,
    sleep: Callable[[float], None] = time.sleep,
    backoff: Backoff = DISCOVERY_BACKOFF,
) -> frozenset[str] | None:
    """The resources ``resource.k8s.io/v1`` serves (DeviceTaintRules from Kubernetes 1.37);
    None when it is not served; an empty set when the API server refused to say (which are
    served is not known: the DRA caches start, a DeviceTaintRule cache does not)."""
    failures = 0
    while True:
        try:
            found = transport.get_json(DRA_API, {})
        except ApiError as error:
            if error.status == 404:
                log.info("%s not served; DRA objects are not read", DRA_API)
                return None
            if error.status and error.status < 500 and error.status != 429:
                log.warning(
                    "%s discovery refused (%s); starting the DRA caches anyway", DRA_API, error
                )
                return frozenset()
            problem = str(error)
        except KubeError as error:
            problem = str(error)
        else:
            listed = found.get("resources") if isinstance(found, dict) else None
            names = (r.get("name") for r in listed or () if isinstance(r, dict))
            return frozenset(n for n in names if isinstance(n, str))
        failures += 1
        delay = backoff.wait_s(failures, random.random())
        log.warning(
            "%s discovery failed (%s); asking again in %.1fs (the DRA caches start once the "
            "API server answers)",
            DRA_API,
            problem,
            delay,
        )
        sleep(delay)
