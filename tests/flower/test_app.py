"""MosT on a real multi-process Flower deployment: a SuperLink and three SuperNodes on 127.0.0.1.

The deployment (``tests/flower/_deploy.py``: ``Deployment``) runs with TLS (a CA and a server certificate
made in the test) and SuperNode authentication (each SuperNode's public key registered with
the SuperLink); the app is ``examples/flower`` (``most.flower.app``). The tests share one
deployment, in this order: the transport checks (only TLS is spoken; clients that lack our CA,
or dial an address the certificate is not issued for, refuse the SuperLink; a plaintext
SuperNode gets no answer), a MosT run checked against the in-process runtime, the
node-authentication checks (a stranger's key is refused at activation, a forged signature is
refused), then a SuperNode killed mid-run. The wrong-host check starts a SuperLink of its own.
Slow (about three minutes), run in CI.

Each refusal is asserted by the specific error Flower 1.41 gives for it (a certificate
verification code, the SuperLink's activation error, an HTTP 401), not by any failure to
connect, so that each test fails if its protection is removed.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr", reason="Flower is an optional extra: pip install 'most-transport[flower]'")

from tests.flower._deploy import (  # noqa: E402
    ACTIVATION_REFUSED,
    DeploymentError,
    HOST,
    REFUSED_CODE,
    REFUSED_MARKER,
    activate_node_request,
    activation_refused_log_line,
    deployment,
    make_certificates,
    make_node_keys,
    plaintext_http_reply,
    tls_handshake,
)

import most.federated as fl  # noqa: E402
from most.flower.app import AppSettings  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "examples" / "flower"
N_CLIENTS = 3
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("flower-deployment")]

#: OpenSSL's verification results (X509_V_ERR_*), as ssl.SSLCertVerificationError.verify_code
UNABLE_TO_GET_ISSUER_CERT_LOCALLY = 20  # the chain does not end at a CA the client trusts
IP_ADDRESS_MISMATCH = 64  # the certificate is not issued for the IP address dialled
#: How long a refused SuperNode may take to give up (it starts in 2-4 s)
EXIT_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def dep():
    # heartbeats every 10 s (Flower's minimum) so that a killed SuperNode is noticed in ~20 s
    with deployment(N_CLIENTS, heartbeat_interval=10) as d:
        yield d


def _run(dep, tmp_path, **config):
    run_config = {"num-clients": N_CLIENTS, "n-models": 2, "warmup-rounds": 0, "rounds": 2, "eval-every": 2,
                  "samples-per-client": 60, "timeout": 90.0, "out": str(tmp_path), **config}
    result = dep.run_app(APP, run_config=run_config, timeout=600)
    assert result.status == "finished:completed", dep.format_logs()
    return run_config, json.loads((tmp_path / "result.json").read_text())


def _server_certificate_der(dep) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificate(dep.certificates.server_cert.read_bytes()).public_bytes(Encoding.DER)


def _refused_supernode(dep, k):
    """Wait for extra SuperNode k to give up; return its log (killed if still running)."""
    try:
        code, log = dep.supernode_exit(k, timeout=EXIT_TIMEOUT)
    finally:
        if dep.supernode_alive(k):
            dep.kill_supernode(k)
    assert code is not None, f"SuperNode {k} still running after {EXIT_TIMEOUT} s:\n{log}"
    assert code != 0 and REFUSED_CODE in log and REFUSED_MARKER in log, log
    return log


def _assert_speaks_only_tls(address_host, port, ca_cert, server_cert_der):
    # a plaintext HTTP request gets no HTTP answer: the connection is closed (or a TLS alert)
    reply = plaintext_http_reply(address_host, port)
    assert not reply.startswith(b"HTTP/") and reply[:1] in (b"", b"\x15"), reply[:300]
    # a client that trusts our CA completes a verified TLS handshake and is shown our certificate
    version, der = tls_handshake(address_host, port, cafile=ca_cert)
    assert version in ("TLSv1.2", "TLSv1.3")
    assert der == server_cert_der


def test_the_superlink_speaks_only_tls(dep):
    _assert_speaks_only_tls(HOST, dep.port, dep.certificates.ca_cert, _server_certificate_der(dep))


def test_a_plaintext_supernode_gets_no_answer(dep):
    # Flower refuses (locally) to send a node key over plaintext, so this SuperNode has none and
    # would register itself; the TLS SuperLink drops its plain HTTP request unanswered.
    # What the client reads depends on timing: nothing (the connection closed), the TLS alert the
    # SuperLink sends before closing (not an HTTP status line), a reset, or nothing before its
    # timeout; never an HTTP answer.
    k = dep.start_extra_supernode(root_certificates=False, authenticate=False, max_retries=0)
    log = _refused_supernode(dep, k)
    assert REFUSED_MARKER + ".\n" in log, log
    reason = log.split(REFUSED_MARKER + ".\n", 1)[1].splitlines()[0]
    no_answer = ("Server disconnected without sending a response.", "illegal request line",
                 "illegal status line", "Connection reset by peer", "timed out")
    assert any(text in reason for text in no_answer), reason
    assert "[code:" not in reason and " error '" not in reason, reason  # no Flower error, no HTTP status


def test_a_client_without_our_ca_refuses_the_superlink(dep, tmp_path):
    stranger_ca = make_certificates(tmp_path / "stranger").ca_cert  # another CA, same hosts
    for cafile in (None, stranger_ca):  # the system's roots only; a CA that did not sign it
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            tls_handshake(HOST, dep.port, cafile=cafile)
        assert info.value.verify_code == UNABLE_TO_GET_ISSUER_CERT_LOCALLY, info.value
    # and so do SuperNodes given the wrong root certificates: they stop at the handshake
    nodes = [dep.start_extra_supernode(root_certificates=ca) for ca in (None, stranger_ca)]
    for k in nodes:
        log = _refused_supernode(dep, k)
        assert "SSL/TLS handshake error detected." in log
        assert ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                "unable to get local issuer certificate") in log
        assert ACTIVATION_REFUSED not in log  # it never got as far as asking to join


def test_a_certificate_for_another_host_is_refused():
    # a SuperLink on 127.0.0.1 whose certificate, signed by the CA the clients trust, is
    # issued for other hosts only
    with deployment(0, cert_hosts=("127.0.0.2", "superlink.example"), wait_online=False) as other:
        ca = other.certificates.ca_cert
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            tls_handshake(HOST, other.port, cafile=ca)
        assert info.value.verify_code == IP_ADDRESS_MISMATCH, info.value
        assert "certificate is not valid for '127.0.0.1'" in info.value.verify_message
        # the same client accepts it under a name the certificate has: only the host is wrong
        assert tls_handshake(HOST, other.port, cafile=ca, server_hostname="superlink.example")[0]
        k = other.start_extra_supernode()  # trusts the right CA, dials 127.0.0.1
        log = _refused_supernode(other, k)
        assert ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch, "
                "certificate is not valid for '127.0.0.1'.") in log


def test_most_runs_on_an_authenticated_tls_deployment(dep, tmp_path):
    run_config, out = _run(dep, tmp_path)
    assert out["rounds"] == 2 and out["missing"] == {}
    # the same run in process (pair_seeds: each client's batches from its own seed), with the
    # app's config (examples/flower/pyproject.toml) under the run's overrides, as `flwr run` merges them
    import tomllib

    app_config = tomllib.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    settings = AppSettings.from_run_config({k: v for k, v in {**app_config, **run_config}.items() if k != "out"})
    method, model, config = settings.build()
    reference = fl.run_federated(settings.data(), model, method, config)
    assert out["mean_accuracy"] == pytest.approx(reference.mean_accuracy, abs=1e-6)
    for ours, log in zip(out["plans"], reference.history):
        torch.testing.assert_close(torch.tensor(ours, dtype=log.plan.dtype), log.plan, rtol=0, atol=1e-9)
    # each client received, for training, exactly the models its row of Gamma gives it
    sent = [(t, client, models) for t, kind, client, models in out["sent"] if kind == "train"]
    assert len(sent) == 2 * N_CLIENTS
    for t, client, models in sent:
        weights = method.weighting(torch.tensor(out["plans"][t], dtype=torch.float64))  # [m, n]
        assert models == weights[:, client].nonzero().squeeze(1).tolist()


def test_a_supernode_with_an_unknown_key_is_refused(dep):
    k = dep.start_unregistered_supernode("partition-id=1 num-partitions=3")
    log = _refused_supernode(dep, k)
    # the SuperLink answered its ActivateNode with the node-authentication refusal ...
    assert "Failed to initialize the connection to the SuperLink.\n" + ACTIVATION_REFUSED in log
    # ... because it does not know this node's public key (logged by the SuperLink, naming the key)
    expected = activation_refused_log_line(dep.node_keys[k].public_key)
    deadline = time.monotonic() + 10
    while expected not in dep.superlink_log() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert expected in dep.superlink_log(), dep.superlink_log()[-3000:]
    assert dep.supernode_refused(k, timeout=1)
    assert len(dep.online_node_ids()) == N_CLIENTS


def test_a_forged_node_signature_is_refused(dep, tmp_path):
    # Claiming a registered SuperNode's public key without its private key: the signed
    # timestamp does not verify, and the Fleet API answers 401 before looking at the request.
    stranger = make_node_keys(tmp_path, 0)
    status, body = activate_node_request(dep.superlink_address, dep.certificates.ca_cert,
                                         public_key=dep.node_keys[0].public_key, signing_key=stranger.private_key)
    assert (status, json.loads(body)) == (401, {"detail": "Invalid SuperNode authentication"})
    # the same request signed with the matching key passes the signature check (and is then
    # refused only because that key is not registered)
    status, body = activate_node_request(dep.superlink_address, dep.certificates.ca_cert,
                                         public_key=stranger.public_key, signing_key=stranger.private_key)
    assert status == 412 and json.loads(body)["code"] == 2004, body
    assert len(dep.online_node_ids()) == N_CLIENTS


def test_a_run_config_error_is_one_line_in_the_runs_log(dep):
    """`flwr run --stream` shows the ServerApp's refusal of a run config as one line naming the
    dashed key, with Flower's exit code and no traceback; the run fails."""
    with pytest.raises(DeploymentError, match="finished:failed"):
        dep.run_app(APP, run_config={"num-clients": N_CLIENTS, "n-models": 2.5}, timeout=120)
    output = dep.logs()[f"flwr_run_{dep._n_runs - 1}"]
    assert "ServerApp raised an exception: run-config.n-models: expected an integer; got 2.5." in output, output
    assert "Exit Code: 201" in output and "Traceback" not in output, output


def test_a_killed_supernode_is_left_out_and_the_run_finishes(dep, tmp_path):
    killed = {}

    def kill_on_first_train():
        deadline = time.monotonic() + 300
        while "Receiving: train" not in dep.supernode_log(2) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed["at"] = time.monotonic()
        dep.kill_supernode(2)

    threading.Thread(target=kill_on_first_train, daemon=True).start()
    _, out = _run(dep, tmp_path, rounds=3, **{"eval-every": 3})
    assert "at" in killed
    assert out["rounds"] == 3
    # client 2 answered the first query, then its SuperNode died: missing from then on
    assert out["missing"]["0"] == ["2"]  # its training update never came
    assert out["missing"]["1"] == ["2"] and out["missing"]["2"] == ["2"] and out["missing"]["final"] == ["2"]
    for t in (1, 2):
        plan = torch.tensor(out["plans"][t])
        assert plan.shape == (N_CLIENTS - 1, 2)  # Gamma over the two clients that answered
        torch.testing.assert_close(plan.sum(1), torch.full((2,), 0.5, dtype=plan.dtype))
    assert out["client_accuracy"][2] is None  # NaN (never evaluated), written as null in result.json
