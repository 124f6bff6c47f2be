"""``migslice certs``: a CA and a serving certificate for a Service, and what to do with them.

Without ``--secret`` it writes files and prints the follow-up for the Service: for the
webhook, the TLS Secret and the command that puts its CA into both webhook configurations; for the
extender, the TLS Secret (kube-scheduler trusts its ``ca.crt``) and the ``caData`` of a
scheduler configuration. With ``--secret`` it does the same in the cluster (the Helm chart's
certificate Jobs): keeps or makes the Secret and, with ``--webhook-configuration``, injects
the CA; with ``--client NAME --client-secret SECRET`` it also keeps a client certificate of
that name, issued from the same CA, in that Secret (the scheduler's for the extender,
kube-apiserver's for the webhook).
"""

from __future__ import annotations

import argparse
import base64
import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from migslice import console
from migslice.console import CommandError
from migslice.serving.certs import (
    TlsBundle,
    make_client_cert,
    service_dns_names,
    write_client_cert,
    write_tls_bundle,
)

if TYPE_CHECKING:
    from migslice.kube import KubernetesTransport
    from migslice.kube.certs import PemBundle

WEBHOOK_CONFIGURATION = "migslice-webhook"
_BUNDLE_FILES = {"ca": "CA", "tls": "serving certificate"}
"""The stems of the files ``--out`` holds (ca.crt/ca.key, tls.crt/tls.key), which a client
certificate of that name would overwrite."""


def register(commands: Any) -> None:
    certs = commands.add_parser(
        "certs",
        help="make a CA and a serving certificate for the webhook or extender Service",
        description=(
            "Writes ca.crt, ca.key, tls.crt and tls.key to --out. An existing CA there is "
            "reused, so running it again renews the serving certificate without changing "
            "caBundle; the servers pick renewed files up without a restart. With --secret, "
            "the certificate lives in that TLS Secret of --namespace instead: kept while it "
            "serves the Service's names for more than 30 days, made anew otherwise."
        ),
    )
    certs.add_argument(
        "--service",
        required=True,
        type=console.dns_label,
        help="Service name, e.g. migslice-webhook",
    )
    certs.add_argument(
        "--namespace",
        required=True,
        type=console.dns_label,
        help="Service namespace, e.g. migslice-system",
    )
    certs.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        type=console.path_name,
        help="directory to write into",
    )
    certs.add_argument(
        "--dns-name",
        action="append",
        default=[],
        type=console.dns_subdomain,
        help="extra DNS SAN",
    )
    certs.add_argument(
        "--ip", action="append", default=[], type=console.ip_address, help="extra IP SAN"
    )
    certs.add_argument(
        "--days",
        type=console.count(1, 36500),
        default=365,
        help="validity of the serving certificate in days (1 to 36500)",
    )
    certs.add_argument(
        "--for",
        dest="server",
        choices=("webhook", "extender"),
        help="which server the Service is, for the printed follow-up (default: from the name)",
    )
    certs.add_argument(
        "--client",
        metavar="NAME",
        action="append",
        default=[],
        type=console.dns_subdomain,
        help="also issue a client certificate NAME.crt/NAME.key from the CA (with --secret: "
        "into the --client-secret at the same position), for the caller the server will accept "
        "with --client-ca-file ca.crt --client-name NAME (kube-apiserver for the webhook, "
        "migslice-scheduler for the extender); repeatable",
    )
    certs.add_argument(
        "--print-ca-bundle",
        action="store_true",
        help="print the base64 caBundle of the CA in --out and exit (writes nothing)",
    )
    _add_cluster_arguments(certs)
    certs.set_defaults(handler=run_certs)


def _add_cluster_arguments(certs: argparse.ArgumentParser) -> None:
    cluster = certs.add_argument_group(
        "in the cluster", "keep the certificate in a Secret and inject the CA (the chart's Jobs)"
    )
    cluster.add_argument(
        "--secret",
        metavar="NAME",
        type=console.dns_subdomain,
        help="TLS Secret in --namespace that holds tls.crt, tls.key and ca.crt",
    )
    cluster.add_argument(
        "--client-secret",
        metavar="NAME",
        action="append",
        default=[],
        type=console.dns_subdomain,
        help="with --secret: keep the client certificate of the --client at the same position "
        "in this TLS Secret of --namespace (tls.crt, tls.key, and ca.crt: the server's CA), "
        "issued from the serving Secret's CA; kept while that CA issued it for long enough, "
        "and made anew with a new CA (so with the serving certificate) otherwise; repeatable",
    )
    cluster.add_argument(
        "--webhook-configuration",
        metavar="NAME",
        type=console.dns_subdomain,
        help="put ca.crt into caBundle of the webhooks calling the Service in the Mutating- and "
        "ValidatingWebhookConfiguration NAME (needs --secret)",
    )
    cluster.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )


def run_certs(args: argparse.Namespace) -> int:
    if args.print_ca_bundle:
        ca_path = Path(args.out) / "ca.crt"
        if not ca_path.is_file():
            raise CommandError(
                f"{ca_path} does not exist; run `migslice certs` without --print-ca-bundle first"
            )
        print(base64.b64encode(ca_path.read_bytes()).decode("ascii"))
        return 0
    if args.webhook_configuration and not args.secret:
        raise CommandError("--webhook-configuration needs --secret (the CA comes from it)")
    if args.client_secret and not args.secret:
        raise CommandError("--client-secret needs --secret (the client's CA is the Secret's)")
    if args.secret and len(args.client) != len(args.client_secret):
        raise CommandError(
            f"with --secret, each --client needs its --client-secret (got {len(args.client)} "
            f"--client and {len(args.client_secret)} --client-secret)"
        )
    if args.secret:
        return _in_cluster(args)
    for client in args.client:  # NAME.crt and NAME.key go beside the bundle's own files
        if client in _BUNDLE_FILES:
            raise CommandError(
                f"--client {client} would write {client}.crt and {client}.key over the "
                f"{_BUNDLE_FILES[client]} in {args.out}; give the client another name "
                "(kube-apiserver, migslice-scheduler)"
            )
    bundle = _write_files(args)
    names = ", ".join((*service_dns_names(args.service, args.namespace), *args.dns_name, *args.ip))
    print(f"wrote {bundle.ca_cert}, {bundle.cert}, {bundle.key} (SANs: {names})")
    server = args.server or ("extender" if "extender" in args.service else "webhook")
    for line in follow_up(server, args.service, args.namespace, args.out, bundle):
        print(line)
    for client in args.client:
        try:
            cert, key = write_client_cert(bundle, client, args.days)
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot write the client certificate {client}: {error}") from None
        print(f"wrote client certificate {cert} and key {key} (name {client})")
        for line in client_follow_up(
            server, client, bundle, cert, key, args.service, args.namespace
        ):
            print(line)
    return 0


def _write_files(args: argparse.Namespace) -> TlsBundle:
    try:
        return write_tls_bundle(
            args.out, args.service, args.namespace, args.dns_name, args.ip, args.days
        )
    except (OSError, ValueError) as error:
        raise CommandError(f"cannot write certificates to {args.out}: {error}") from None


def follow_up(server: str, service: str, namespace: str, out: str, bundle: TlsBundle) -> list[str]:
    """The commands that put the certificate to use, for the webhook or the extender."""
    secret = (
        f"  kubectl -n {namespace} create secret generic {service}-tls --type=kubernetes.io/tls "
        f"--from-file=tls.crt={bundle.cert} --from-file=tls.key={bundle.key} "
        f"--from-file=ca.crt={bundle.ca_cert}"
    )
    print_ca = (
        f"migslice certs --service {service} --namespace {namespace} --out {out} --print-ca-bundle"
    )
    if server == "extender":
        return [
            "create the Secret the extender serves from; migslice-scheduler trusts its ca.crt "
            "(tlsConfig.caFile):",
            secret,
            "for a KubeSchedulerConfiguration of your own, set the extender's tlsConfig.caData "
            "to the output of:",
            f"  {print_ca}",
        ]
    # Every webhook of both configurations that calls the Service (the mutating one has two
    # where fail-open namespaces are installed), as the chart's Job does: one command, not a
    # patch per index.
    return [
        "create the Secret the webhook serves from, and put its CA into every webhook of both "
        "webhook configurations (with your kubeconfig):",
        secret,
        f"  migslice certs --service {service} --namespace {namespace} --out {out} "
        f"--secret {service}-tls --webhook-configuration {WEBHOOK_CONFIGURATION}",
        f"(the caBundle alone: {print_ca})",
    ]


def client_follow_up(
    server: str, client: str, bundle: TlsBundle, cert: Path, key: Path, service: str = "",
    namespace: str = "",
) -> list[str]:  # fmt: skip
    """How the client presents its certificate, and how the server is told to ask for it."""
    flags = f"--client-ca-file {bundle.ca_cert} --client-name {client}"
    if server == "extender":
        return [
            f"run the extender with {flags}; in the KubeSchedulerConfiguration's extender "
            f"tlsConfig set certFile: {cert} and keyFile: {key} (or certData/keyData)",
        ]
    plugin = (
        "    configuration: {apiVersion: apiserver.config.k8s.io/v1, kind: "
        "WebhookAdmissionConfiguration, kubeConfigFile: "
        "/etc/kubernetes/migslice-webhook-kubeconfig.yaml}"
    )
    return [
        f"run the webhook with {flags}; kube-apiserver presents the certificate when its "
        "--admission-control-config-file says so (docs/policy.md, 'Who may call the webhook'):",
        "  apiVersion: apiserver.config.k8s.io/v1",
        "  kind: AdmissionConfiguration",
        "  plugins:",
        "  - name: MutatingAdmissionWebhook",
        plugin,
        "  - name: ValidatingAdmissionWebhook",
        plugin,
        "and in /etc/kubernetes/migslice-webhook-kubeconfig.yaml (a kubeconfig: its user is "
        "looked up by <service>.<namespace>.svc:<port>, or without :<port> when the Service "
        "port is 443; kube-apiserver reads relative paths from the kubeconfig's folder, so "
        "these are absolute: copy the files to the control-plane node and change them there):",
        "  apiVersion: v1",
        "  kind: Config",
        f"  users: [{{name: {service}.{namespace}.svc, user: {{client-certificate: "
        f"{cert.resolve()}, client-key: {key.resolve()}}}}}]",
    ]


def _in_cluster(args: argparse.Namespace) -> int:
    from migslice.kube import KubernetesTransport
    from migslice.kube.certs import CertsError, inject_ca_bundle
    from migslice.kube.transport import KubeconfigError

    console.check_kubeconfig(args.kubeconfig)
    try:
        api = KubernetesTransport.from_environment(args.kubeconfig)
    except KubeconfigError as error:  # no kubeconfig, or one that cannot be used: it says
        raise CommandError(str(error)) from None
    except Exception as error:  # the kubernetes client raises several kinds here
        raise CommandError(
            f"no access to a cluster ({error}); pass --kubeconfig, or set $KUBECONFIG"
        ) from None
    try:
        bundle = _ensure_secret(api, args)
        if args.webhook_configuration:
            for line in inject_ca_bundle(
                api, args.webhook_configuration, args.service, args.namespace, bundle.ca_cert
            ):
                print(line)
    except CertsError as error:
        raise CommandError(str(error)) from None
    return 0


def _ensure_secret(api: KubernetesTransport, args: argparse.Namespace) -> PemBundle:
    """The Secret's certificate if it still serves the Service's names for long enough and
    every client Secret holds a certificate its CA issued, else new ones written there
    (compare-and-swap on each Secret: a concurrent Job's write is judged instead of
    overwritten). The CA's key lives only in ``--out``, so a client certificate is issued
    only together with a new CA and serving certificate."""
    from migslice.kube.certs import (
        CertsError,
        PemBundle,
        bundle_of,
        bundle_problem,
        read_tls_secret,
        valid_until,
        write_tls_secret,
    )
    from migslice.kube.transport import ApiError

    names = (*service_dns_names(args.service, args.namespace), *args.dns_name)
    where = f"Secret {args.namespace}/{args.secret}"
    now = datetime.datetime.now(datetime.UTC)
    for _attempt in range(3):
        existing = read_tls_secret(api, args.namespace, args.secret)
        current = bundle_of(existing) if existing is not None else None
        if existing is None:
            problem = "it does not exist"
        elif current is None:
            problem = "it lacks tls.crt, tls.key or ca.crt"
        else:
            problem = bundle_problem(current, names, args.ip, now)
        clients = [
            _ClientSecret(name, secret, read_tls_secret(api, args.namespace, secret))
            for name, secret in zip(args.client, args.client_secret, strict=True)
        ]
        if current is not None and not problem:
            stale = [(c, c.problem(current.ca_cert, now)) for c in clients]
            stale = [(c, why) for c, why in stale if why]
            if not stale:
                print(f"{where}: kept, valid until {valid_until(current):%Y-%m-%d}")
                for client in clients:
                    kept = client.bundle()
                    assert kept is not None
                    print(
                        f"Secret {args.namespace}/{client.secret}: kept, client certificate "
                        f"{client.name} valid until {valid_until(kept):%Y-%m-%d}"
                    )
                return current
            client, why = stale[0]
            problem = (
                f"the client certificate in Secret {client.secret} must be issued ({why}), "
                "by the CA in --out (the Secret keeps no CA key)"
            )
        files = _write_files(args)
        bundle = PemBundle(
            files.ca_cert.read_bytes(), files.cert.read_bytes(), files.key.read_bytes()
        )
        writes = [(args.secret, bundle, existing)]
        writes += [(c.secret, c.issue(files, args.days), c.raw) for c in clients]
        try:
            for secret, made, read in writes:
                written = secret
                write_tls_secret(api, args.namespace, secret, made, read)
        except ApiError as error:
            if error.status == 409:  # written meanwhile (another Job): judge that one
                continue
            raise CertsError(f"Secret {args.namespace}/{written}: {error}") from None
        print(
            f"{where}: {'created' if existing is None else 'renewed'} ({problem}), valid "
            f"until {valid_until(bundle):%Y-%m-%d}"
        )
        for client in clients:
            print(
                f"Secret {args.namespace}/{client.secret}: "
                f"{'created' if client.raw is None else 'renewed'}, client certificate "
                f"{client.name} issued by the CA of {where}"
            )
        return bundle
    raise CertsError(f"{where}: changed by someone else three times in a row; run again")


@dataclass(frozen=True, slots=True)
class _ClientSecret:
    """A client certificate's Secret as read (``raw``: None when it does not exist)."""

    name: str
    secret: str
    raw: Any

    def bundle(self) -> PemBundle | None:
        from migslice.kube.certs import bundle_of

        return bundle_of(self.raw) if self.raw is not None else None

    def problem(self, server_ca: bytes, now: datetime.datetime) -> str:
        from migslice.kube.certs import client_problem

        if self.raw is None:
            return "it does not exist"
        found = self.bundle()
        if found is None:
            return "it lacks tls.crt, tls.key or ca.crt"
        return client_problem(found, server_ca, self.name, now)

    def issue(self, files: TlsBundle, days: int) -> PemBundle:
        from migslice.kube.certs import PemBundle

        ca_cert = files.ca_cert.read_bytes()
        cert, key = make_client_cert(ca_cert, files.ca_key.read_bytes(), self.name, days)
        return PemBundle(ca_cert, cert, key)
