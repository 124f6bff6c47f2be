"""Who may call a service: the client certificate a request came with.

With ``--client-ca-file`` the TLS handshake verifies a certificate the client presents (and
accepts one that presents none, for kubelet probes and Prometheus scrapers); a service then
answers its callers' verbs (the webhook's admission reviews, the extender's filter and
prioritize) only when the certificate was presented and, with ``--client-name``, names one of
the allowed clients. kube-apiserver presents one through its AdmissionConfiguration's
``kubeConfigFile``; migslice-scheduler through its extender ``tlsConfig`` (docs/policy.md,
"Who may call the webhook").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migslice.serving.server import ServerOptions
from migslice.serving.wsgi import CLIENT_NAMES


@dataclass(frozen=True, slots=True)
class ClientPolicy:
    """``verify``: a client CA is configured; ``names``: the names one of which a client's
    certificate must carry (empty: any certificate the CA signed)."""

    verify: bool = False
    names: frozenset[str] = frozenset()

    @staticmethod
    def of(options: ServerOptions) -> ClientPolicy:
        return ClientPolicy(bool(options.client_ca), options.client_names)

    def refusal(self, environ: Mapping[str, Any]) -> str | None:
        """Why the request's client may not call the service, or None when it may."""
        if not self.verify:
            return None
        presented = tuple(environ.get(CLIENT_NAMES) or ())
        if not presented:
            return (
                "a client certificate signed by the service's --client-ca-file is required; "
                "none was presented"
            )
        if self.names and not self.names.intersection(presented):
            return (
                f"client certificate names {', '.join(dict.fromkeys(presented))} are not among "
                f"the allowed --client-name {', '.join(sorted(self.names))}"
            )
        return None
