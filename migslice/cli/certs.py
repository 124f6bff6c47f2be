"""``migslice certs``: a CA and a serving certificate for a Service, and the caBundle."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

from migslice import console
from migslice.console import CommandError
from migslice.serving.certs import service_dns_names, write_tls_bundle


def register(commands: Any) -> None:
    certs = commands.add_parser(
        "certs",
        help="make a CA and a serving certificate for the webhook or extender Service",
        description=(
            "Writes ca.crt, ca.key, tls.crt and tls.key to --out. An existing CA there is "
            "reused, so running it again renews the serving certificate without changing "
            "caBundle; the servers pick renewed files up without a restart."
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
    certs.add_argument("--out", required=True, metavar="DIR", help="directory to write into")
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
        "--print-ca-bundle",
        action="store_true",
        help="print the base64 caBundle of the CA in --out and exit (writes nothing)",
    )
    certs.set_defaults(handler=run_certs)


def run_certs(args: argparse.Namespace) -> int:
    if args.days < 1:
        raise CommandError(f"--days {args.days}: a certificate must be valid for at least 1 day")
    if args.print_ca_bundle:
        ca_path = Path(args.out) / "ca.crt"
        if not ca_path.is_file():
            raise CommandError(
                f"{ca_path} does not exist; run `migslice certs` without --print-ca-bundle first"
            )
        print(base64.b64encode(ca_path.read_bytes()).decode("ascii"))
        return 0
    try:
        bundle = write_tls_bundle(
            args.out, args.service, args.namespace, args.dns_name, args.ip, args.days
        )
    except (OSError, ValueError) as error:
        raise CommandError(f"cannot write certificates to {args.out}: {error}") from None
    names = ", ".join((*service_dns_names(args.service, args.namespace), *args.dns_name, *args.ip))
    print(f"wrote {bundle.ca_cert}, {bundle.cert}, {bundle.key} (SANs: {names})")
    print("put the CA into the webhook configurations with:")
    print(
        "  kubectl patch mutatingwebhookconfiguration migslice-webhook --type=json -p "
        f'\'[{{"op":"replace","path":"/webhooks/0/clientConfig/caBundle",'
        f'"value":"\'$(migslice certs --service {args.service} --namespace {args.namespace} '
        f"--out {args.out} --print-ca-bundle)'\"}}]'"
    )
    print(
        f"  kubectl -n {args.namespace} create secret tls {args.service}-tls "
        f"--cert={bundle.cert} --key={bundle.key}"
    )
    return 0
