"""``migslice certs``: the follow-up it prints per server, and its in-cluster half (TLS Secrets
kept while valid, the CA injected into both webhook configurations) against a real HTTP server
that stores objects as kube-apiserver does."""

from __future__ import annotations

import base64
import copy
import datetime
import os
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from cryptography import x509

from migslice.cli import main
from migslice.kube import KubernetesTransport
from migslice.kube.certs import (
    CertsError,
    PemBundle,
    bundle_of,
    bundle_problem,
    client_problem,
    inject_ca_bundle,
    read_tls_secret,
    write_tls_secret,
)
from migslice.serving.certs import (
    make_ca,
    make_client_cert,
    make_serving_cert,
    service_dns_names,
)
from tests.local_api import Request, kubeconfig_file, local_api, local_api_url

NOW = datetime.datetime.now(datetime.UTC)
NAMES = service_dns_names("migslice-webhook", "migslice-system")
SECRETS = "/api/v1/namespaces/migslice-system/secrets"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def make_bundle(names: tuple[str, ...] = NAMES, days: int = 365) -> PemBundle:
    ca_cert, ca_key = make_ca()
    cert, key = make_serving_cert(ca_cert, ca_key, names, days=days)
    return PemBundle(ca_cert, cert, key)


def webhook_configuration(kind: str, *services: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "migslice-webhook", "resourceVersion": "1"},
        "webhooks": [
            {
                "name": f"hook-{i}.webhook.migslice.io",
                "clientConfig": {
                    "service": {"name": service, "namespace": "migslice-system", "port": 443}
                },
            }
            for i, service in enumerate(services)
        ],
    }


class Store:
    """Objects by path; GET/POST/PUT/PATCH(JSON patch) with resourceVersion conflicts."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def answer(self, request: Request) -> tuple[int, Any]:
        with self.lock:
            return self._answer(request)

    def _answer(self, request: Request) -> tuple[int, Any]:
        path, body = request.path, request.body
        if request.method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                return 409, {"kind": "Status", "code": 409, "message": "already exists"}
            self.objects[path] = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
            self.writes.append(("POST", path))
            return 201, self.objects[path]
        current = self.objects.get(path)
        if current is None:
            return 404, {"kind": "Status", "code": 404, "message": f"{path} not found"}
        if request.method == "GET":
            return 200, current
        version = str(int(current["metadata"]["resourceVersion"]) + 1)
        if request.method == "PUT":
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, {"kind": "Status", "code": 409, "message": "conflict"}
            updated = copy.deepcopy(body)
        else:
            assert request.content_type == "application/json-patch+json"
            try:
                updated = jsonpatch.apply_patch(current, body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                return 422, {"kind": "Status", "code": 422, "message": str(error)}
        updated["metadata"]["resourceVersion"] = version
        self.objects[path] = updated
        self.writes.append((request.method, path))
        return 200, updated


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def api(store: Store) -> Iterator[KubernetesTransport]:
    with local_api(store.answer) as transport:
        yield transport


# --------------------------------------------------------------------------- the certificate


def test_a_fresh_bundle_for_the_service_names_may_serve() -> None:
    assert bundle_problem(make_bundle(), NAMES, [], NOW) == ""


@pytest.mark.parametrize(
    ("bundle", "problem"),
    [
        (make_bundle(names=("other",)), "lacks migslice-webhook"),
        (make_bundle(days=20), "in less than 30 days"),
        (
            PemBundle(make_ca("other-ca")[0], make_bundle().cert, make_bundle().key),
            "not issued by ca.crt",
        ),
        (
            PemBundle(make_ca()[0], make_bundle().cert, make_bundle().key),
            "signature does not verify against ca.crt",
        ),
        (PemBundle(b"junk", b"junk", b"junk"), "unreadable PEM"),
    ],
    ids=["other-names", "expiring", "other-ca", "same-name-other-ca", "not-pem"],
)
def test_a_bundle_that_should_not_serve_says_why(bundle: PemBundle, problem: str) -> None:
    assert problem in bundle_problem(bundle, NAMES, [], NOW)


def test_a_key_that_is_not_the_certificates_is_caught() -> None:
    good, other = make_bundle(), make_bundle()
    mixed = PemBundle(good.ca_cert, good.cert, other.key)
    assert bundle_problem(mixed, NAMES, [], NOW) == "tls.key does not belong to tls.crt"


# --------------------------------------------------------------------------- the Secret


def test_a_tls_secret_is_created_then_replaced_at_its_resource_version(
    api: KubernetesTransport, store: Store
) -> None:
    assert read_tls_secret(api, "migslice-system", "webhook-tls") is None
    first = make_bundle()
    write_tls_secret(api, "migslice-system", "webhook-tls", first, None)
    stored = read_tls_secret(api, "migslice-system", "webhook-tls")
    assert stored is not None and stored["type"] == "kubernetes.io/tls"
    assert bundle_of(stored) == first
    second = make_bundle()
    write_tls_secret(api, "migslice-system", "webhook-tls", second, stored)
    again = read_tls_secret(api, "migslice-system", "webhook-tls")
    assert again is not None and bundle_of(again) == second
    assert store.writes == [("POST", f"{SECRETS}/webhook-tls"), ("PUT", f"{SECRETS}/webhook-tls")]


# --------------------------------------------------------------------------- the caBundle


def test_the_ca_goes_into_both_configurations_only_for_webhooks_calling_the_service(
    api: KubernetesTransport, store: Store
) -> None:
    mutating = f"{ADMISSION}/mutatingwebhookconfigurations/migslice-webhook"
    validating = f"{ADMISSION}/validatingwebhookconfigurations/migslice-webhook"
    store.objects[mutating] = webhook_configuration(
        "MutatingWebhookConfiguration", "migslice-webhook", "someone-else"
    )
    store.objects[validating] = webhook_configuration(
        "ValidatingWebhookConfiguration", "migslice-webhook"
    )
    ca = make_bundle().ca_cert
    said = inject_ca_bundle(api, "migslice-webhook", "migslice-webhook", "migslice-system", ca)
    assert said == [
        "MutatingWebhookConfiguration migslice-webhook: caBundle set on 1 webhook(s)",
        "ValidatingWebhookConfiguration migslice-webhook: caBundle set on 1 webhook(s)",
    ]
    expected = base64.b64encode(ca).decode()
    hooks = store.objects[mutating]["webhooks"]
    assert hooks[0]["clientConfig"]["caBundle"] == expected
    assert "caBundle" not in hooks[1]["clientConfig"]
    assert store.objects[validating]["webhooks"][0]["clientConfig"]["caBundle"] == expected
    writes = len(store.writes)
    again = inject_ca_bundle(api, "migslice-webhook", "migslice-webhook", "migslice-system", ca)
    assert all(line.endswith("caBundle already current") for line in again)
    assert len(store.writes) == writes


def test_no_configuration_to_inject_into_is_an_error_that_says_what_to_apply(
    api: KubernetesTransport,
) -> None:
    with pytest.raises(CertsError, match="apply them first"):
        inject_ca_bundle(api, "migslice-webhook", "migslice-webhook", "migslice-system", b"ca")


# --------------------------------------------------------------------------- the command line


def test_the_webhook_follow_up_creates_the_secret_and_injects_every_webhook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mutating configuration has two webhooks with fail-open namespaces: a patch of
    /webhooks/0 left the second on its old CA."""
    out = tmp_path / "webhook"
    args = ["certs", "--service", "migslice-webhook", "--namespace", "migslice-system"]
    assert main([*args, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("  ")]
    assert [c[:3] for c in commands] == [
        ["kubectl", "-n", "migslice-system"],
        ["migslice", "certs", "--service"],
    ]
    assert f"--from-file=ca.crt={out / 'ca.crt'}" in commands[0]
    assert commands[1][-4:] == [
        "--secret",
        "migslice-webhook-tls",
        "--webhook-configuration",
        "migslice-webhook",
    ]
    assert "caData" not in "\n".join(lines)


def test_the_extender_follow_up_names_the_secret_and_the_scheduler_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "extender"
    args = ["certs", "--service", "migslice-extender", "--namespace", "migslice-system"]
    assert main([*args, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "webhookconfiguration" not in text
    assert "create secret generic migslice-extender-tls --type=kubernetes.io/tls" in text
    assert "tlsConfig.caData" in text and "--print-ca-bundle" in text


def test_a_client_certificate_for_kube_apiserver_comes_with_its_admission_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "webhook"
    args = ["certs", "--service", "migslice-webhook", "--namespace", "migslice-system"]
    assert main([*args, "--out", str(out), "--client", "kube-apiserver"]) == 0
    text = capsys.readouterr().out
    cert = x509.load_pem_x509_certificate((out / "kube-apiserver.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.rfc4514_string() == "CN=kube-apiserver"
    assert f"--client-ca-file {out / 'ca.crt'} --client-name kube-apiserver" in text
    assert "kind: WebhookAdmissionConfiguration" in text
    assert "users: [{name: migslice-webhook.migslice-system.svc, user:" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--secret", "s-tls", "--client", "kube-apiserver"], "each --client needs its"),
        (["--client", "a", "--client-secret", "a-client"], "--client-secret needs --secret"),
        (["--secret", "s-tls", "--client-secret", "a-client"], "(got 0 --client and 1"),
    ],
    ids=["client-without-its-secret", "client-secret-without-secret", "secret-without-client"],
)
def test_client_secrets_pair_with_clients_and_need_the_serving_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    assert main([*args, *extra]) == 1
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------- client Secrets


@pytest.fixture
def kubeconfig(store: Store, tmp_path: Path) -> Iterator[Path]:
    with local_api_url(store.answer) as url:
        yield kubeconfig_file(tmp_path, url)


def run_extender_job(kubeconfig: Path, out: Path) -> int:
    """The chart's certificate Job for the extender: serving and scheduler client Secrets."""
    return main(
        [
            *("certs", "--service", "migslice-extender", "--namespace", "migslice-system"),
            *("--out", str(out), "--kubeconfig", str(kubeconfig)),
            *("--secret", "migslice-extender-tls"),
            *("--client", "migslice-scheduler", "--client-secret", "migslice-scheduler-client"),
        ]
    )


def stored(store: Store, name: str) -> PemBundle:
    found = bundle_of(store.objects[f"{SECRETS}/{name}"])
    assert found is not None
    return found


def test_the_client_secret_is_issued_by_the_serving_ca_then_kept_with_it(
    store: Store, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_extender_job(kubeconfig, tmp_path / "first") == 0
    first = capsys.readouterr().out
    assert "Secret migslice-system/migslice-scheduler-client: created" in first
    serving, client = (
        stored(store, "migslice-extender-tls"),
        stored(store, "migslice-scheduler-client"),
    )
    assert client.ca_cert == serving.ca_cert
    assert client_problem(client, serving.ca_cert, "migslice-scheduler", NOW) == ""
    cert = x509.load_pem_x509_certificate(client.cert)
    assert cert.subject.rfc4514_string() == "CN=migslice-scheduler"
    writes = len(store.writes)
    assert run_extender_job(kubeconfig, tmp_path / "second") == 0  # every helm upgrade
    assert "client certificate migslice-scheduler valid until" in capsys.readouterr().out
    assert len(store.writes) == writes


def test_a_lost_client_secret_renews_the_ca_the_serving_and_every_client_certificate(
    store: Store, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_extender_job(kubeconfig, tmp_path / "first") == 0
    before = stored(store, "migslice-extender-tls")
    del store.objects[f"{SECRETS}/migslice-scheduler-client"]
    capsys.readouterr()
    assert run_extender_job(kubeconfig, tmp_path / "second") == 0
    said = capsys.readouterr().out
    assert "must be issued (it does not exist), by the CA in --out" in said
    serving, client = (
        stored(store, "migslice-extender-tls"),
        stored(store, "migslice-scheduler-client"),
    )
    assert serving.ca_cert != before.ca_cert
    assert client_problem(client, serving.ca_cert, "migslice-scheduler", NOW) == ""


@pytest.mark.parametrize(
    ("client", "name", "problem"),
    [
        ("other-ca", "migslice-scheduler", "its ca.crt is not the server's CA"),
        ("forged", "migslice-scheduler", "does not verify against the server's CA"),
        ("good", "kube-apiserver", "does not name kube-apiserver"),
        ("serving", "migslice-scheduler", "not for client authentication"),
        ("expiring", "migslice-scheduler", "in less than 30 days"),
    ],
)
def test_a_client_certificate_that_should_not_be_presented_says_why(
    client: str, name: str, problem: str
) -> None:
    ca_cert, ca_key = make_ca()
    other_cert, other_key = make_ca()
    bundles = {
        "good": (ca_cert, make_client_cert(ca_cert, ca_key, "migslice-scheduler")),
        "other-ca": (other_cert, make_client_cert(other_cert, other_key, "migslice-scheduler")),
        "forged": (ca_cert, make_client_cert(other_cert, other_key, "migslice-scheduler")),
        "serving": (ca_cert, make_serving_cert(ca_cert, ca_key, ["migslice-scheduler"])),
        "expiring": (ca_cert, make_client_cert(ca_cert, ca_key, "migslice-scheduler", days=10)),
    }
    ca, (cert, key) = bundles[client]
    assert problem in client_problem(PemBundle(ca, cert, key), ca_cert, name, NOW)


def test_webhook_configuration_without_secret_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            *("certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)),
            *("--webhook-configuration", "migslice-webhook"),
        ]
    )
    assert code == 1
    assert capsys.readouterr().err == (
        "migslice: error: --webhook-configuration needs --secret (the CA comes from it)\n"
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == "migslice 0.1.0\n"


def test_the_kubeconfig_for_kube_apiserver_names_the_files_by_absolute_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/policy.md writes the bundle with ``--out tls/``: kube-apiserver reads a
    kubeconfig's relative paths from the kubeconfig's folder (/etc/kubernetes), not from where
    the command ran."""
    monkeypatch.chdir(tmp_path)
    args = ["certs", "--service", "migslice-webhook", "--namespace", "migslice-system"]
    assert main([*args, "--out", "tls/", "--client", "kube-apiserver"]) == 0
    text = capsys.readouterr().out
    assert f"client-certificate: {tmp_path / 'tls' / 'kube-apiserver.crt'}," in text
    assert f"client-key: {tmp_path / 'tls' / 'kube-apiserver.key'}" in text
    assert "kubeConfigFile: /etc/kubernetes/migslice-webhook-kubeconfig.yaml" in text


@pytest.mark.parametrize("client", ["ca", "tls"])
def test_a_client_named_as_the_bundles_own_files_is_refused_and_they_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], client: str
) -> None:
    """``--client ca`` wrote the client certificate over ca.crt and ca.key (the CA was lost:
    the serving certificate no longer verified against ca.crt, and the run said it succeeded);
    ``--client tls`` over the serving certificate."""
    args = ["certs", "--service", "migslice-webhook", "--namespace", "migslice-system"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path), "--client", client]) == 1
    assert capsys.readouterr().err == (
        f"migslice: error: --client {client} would write {client}.crt and {client}.key over "
        f"the {'CA' if client == 'ca' else 'serving certificate'} in {tmp_path}; give the "
        "client another name (kube-apiserver, migslice-scheduler)\n"
    )
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


_SEEN_KEY_FILES: list[tuple[str, int, int]] | None = None
"""(path, mode, size) of each private key file as the audit events below find it, while
:func:`test_no_private_key_is_ever_readable_by_others_in_the_out_folder` watches."""


def _watch_key_files(event: str, args: tuple[Any, ...]) -> None:
    if _SEEN_KEY_FILES is None or event not in ("open", "os.chmod", "os.rename"):
        return
    for arg in args[:2]:
        if isinstance(arg, str | Path) and str(arg).endswith((".key", ".key.tmp")):
            try:
                found = Path(arg).stat()
            except OSError:
                continue
            _SEEN_KEY_FILES.append((str(arg), found.st_mode & 0o777, found.st_size))


def test_no_private_key_is_ever_readable_by_others_in_the_out_folder(tmp_path: Path) -> None:
    """Each key was written into its temporary file with the umask's mode (0644) and only then
    narrowed to 0600: another user of the machine who opened the file meanwhile (watching the
    folder for new files) kept a descriptor to read the key through. Watched through Python's
    audit events (each open, chmod and rename finds the file as it is just before)."""
    global _SEEN_KEY_FILES
    sys.addaudithook(_watch_key_files)
    umask = os.umask(0o022)
    _SEEN_KEY_FILES = []
    try:
        args = ["certs", "--service", "migslice-webhook", "--namespace", "migslice-system"]
        assert main([*args, "--out", str(tmp_path), "--client", "kube-apiserver"]) == 0
        assert main([*args, "--out", str(tmp_path)]) == 0  # renewed over the files kept
        seen = _SEEN_KEY_FILES
    finally:
        _SEEN_KEY_FILES = None
        os.umask(umask)
    assert {Path(path).name for path, _mode, _size in seen} >= {"tls.key", "ca.key"}
    exposed = [(path, oct(mode)) for path, mode, size in seen if size and mode & 0o077]
    assert exposed == []
    for name in ("ca.key", "tls.key", "kube-apiserver.key"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
