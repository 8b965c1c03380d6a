"""A real, local Flower deployment with TLS and SuperNode authentication, for tests.

This helper is independent of pytest. It starts, on 127.0.0.1 only:

* one ``flower-superlink`` serving its Fleet, Control and Runtime APIs on ONE HTTPS port
  (Flower 1.41 serves all three through one FastAPI/uvicorn server), with
  ``--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile`` and ``--enable-supernode-auth``;
* N ``flower-supernode`` processes, each with ``--root-certificates`` (the test CA) and its
  own EC key (``--auth-supernode-private-key``); their public keys are registered with the
  SuperLink through the Control API (``flwr supernode register KEY.pub deploy``) before
  they start;

and runs Flower apps through it with ``flwr run APP_DIR deploy --stream``.

Everything lives in a work directory (a temp dir by default): the certificates, the node
keys, one FLWR_HOME per process, the ``flwr`` CLI config, the SuperLink database, RAY_TMPDIR
and one log file per process (``logs/*.log``). Ports are picked at runtime. Every
subprocess gets the offline environment (no telemetry, no update check, no runtime
dependency installation).

Flower 1.41 facts this module relies on (read from the installed source, then verified):

* ``--auth-list-public-keys`` makes 1.41's SuperLink exit ("no longer supported"); keys are
  registered with ``flwr supernode register PUBLIC_KEY [CONNECTION]`` (Control API, over
  TLS with the CA) instead, which works before the SuperNode first connects and returns
  the node ID. ``--auth-supernode-public-key`` is deprecated (the public key is derived
  from the private one) and is not passed. Keys: OpenSSH-format NIST EC (P-384 here).
* ``flwr run`` exits 0 although the ServerApp failed, so :meth:`Deployment.run_app` reads
  the run's final status (``flwr ls --run-id ID --format json``; success is
  ``finished:completed``, a ServerApp exception gives ``finished:failed``) and also scans
  the streamed output. A ``--run-config`` key not declared in ``[tool.flwr.app.config]``
  is refused at submission ("[code: 15] Invalid run configuration.", exit 1).
* The ServerApp runs in its own ``flwr-serverapp`` process, started by a detached
  ``flower-superexec`` (own session) that the SuperLink launches; ClientApps run in
  ``flwr-clientapp`` processes (a fresh one per message) under each SuperNode's SuperExec.
  All are this interpreter's console scripts (PATH is set so), so they import whatever the
  venv can (``most`` included); app components may be any importable module path (the app
  directory itself is put on ``sys.path`` first). :meth:`Deployment.stop` kills whole
  process trees (found through ``/proc``), not only the process groups it created.
* A SuperNode whose key is not registered sends ActivateNode, is answered "[code: 2004]
  Failed to activate SuperNode." and exits with status 1 after logging "Exit Code: 305"
  and "Failed to initialize the connection to the SuperLink" (about 1-3 s after start);
  it never appears in ``flwr supernode ls``. :meth:`Deployment.supernode_refused` checks it.
  The SuperLink logs the refusal naming the key: :func:`activation_refused_log_line`.
* What a client is told when the transport is wrong (all verified here): the TLS SuperLink
  closes a plain HTTP connection without any answer (a plaintext SuperNode: "Server
  disconnected without sending a response.", exit 305; Flower refuses locally, exit 303,
  to send a node key over ``--insecure``). A SuperNode whose root certificates do not hold
  our CA (another CA, or the system roots) logs "SSL/TLS handshake error detected." and
  exits 305 with "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get
  local issuer certificate" at once (TLS errors are not retried); one dialling an address
  the certificate is not issued for gets "... IP address mismatch, certificate is not valid
  for '127.0.0.1'." (:func:`tls_handshake` shows the same as OpenSSL codes 20 and 64).
* Node authentication on the Fleet API (HTTP): every request carries the node's public key
  and a timestamp signed with its private key. A bad signature (e.g. a registered node's
  public key claimed by another key's owner) is answered HTTP 401 ``{"detail": "Invalid
  SuperNode authentication"}`` before the request is handled; a correctly signed
  ActivateNode for a key that is not registered gets HTTP 412 ``{"code": 2004, ...}``.
* A killed SuperNode is noticed only through missed heartbeats. The SuperNode announces a
  hard-coded 30 s interval and beats every ~20 s; the SuperLink marks it offline
  ``2 x 30 s`` after its last beat, and only then answers the ServerApp's pending message
  for it with an error reply: ``Message.error.code == ErrorCode.NODE_UNAVAILABLE`` (5),
  reason "Error: Node Unavailable - The destination node failed to report a heartbeat
  within 2 x its expected interval.", ``metadata.src_node_id`` = 1 (the SuperLink, not
  the dead node). Measured: ~54 s after the kill by default, ~18 s with
  ``heartbeat_interval=10`` (the SuperLink's minimum; SuperNodes are then started through
  :data:`_SUPERNODE_WRAPPER`, which patches the constant). From then on
  ``grid.get_node_ids()`` no longer lists it.

Run ``python tests/flower/_deploy.py`` for a smoke check with a toy app.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from most.flower import OFFLINE_ENV as _MOST_OFFLINE_ENV
from most.flower.credentials import Certificates, NodeKeys, make_certificates, make_node_keys

__all__ = [
    "OFFLINE_ENV",
    "Certificates",
    "Deployment",
    "DeploymentError",
    "NodeKeys",
    "RunResult",
    "deployment",
    "activate_node_request",
    "activation_refused_log_line",
    "free_port",
    "make_certificates",
    "make_node_keys",
    "plaintext_http_reply",
    "tls_handshake",
    "write_toy_app",
]

#: Environment every Flower process gets, so that nothing reaches for the network: the
#: library's own offline settings, and unbuffered output so the logs are complete.
OFFLINE_ENV: dict[str, str] = {**_MOST_OFFLINE_ENV, "PYTHONUNBUFFERED": "1"}

#: Name of the SuperLink connection written to the ``flwr`` CLI config.
CONNECTION = "deploy"

HOST = "127.0.0.1"

#: Printed in a refused SuperNode's log by ``flwr.supernode.fleet_http_connection``.
REFUSED_MARKER = "Failed to initialize the connection to the SuperLink"

#: Flower's exit code for it (ExitCode.SUPERNODE_CONNECTION_ERROR), as logged; the process
#: itself exits with status 1 (``flwr_exit`` maps every error code >= 100 to 1).
REFUSED_CODE = "Exit Code: 305"

#: What the SuperLink answers (HTTP 412) a SuperNode whose public key is not registered,
#: as the SuperNode logs it (ApiErrorCode.FLEET_NODE_ACTIVATION_FAILED).
ACTIVATION_REFUSED = "[code: 2004] Failed to activate SuperNode."


def activation_refused_log_line(public_key: str | os.PathLike[str]) -> str:
    """The SuperLink's log line for an ActivateNode refused for the OpenSSH ``public_key``.

    The SuperLink logs the key it does not know as ``repr`` of its PEM SubjectPublicKeyInfo
    bytes (``flwr.superlink.servicer.fleet.fleet_handlers.activate_node``).
    """
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_public_key(Path(public_key).read_bytes())
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return (
        f"[/v1/fleet/activate-node][ApiError:2004] Attempted to register SuperNode with "
        f"public key: {pem!r}, exception: No SuperNode found with the given public key."
    )

#: Lines in the streamed run output that mean the ServerApp failed (exit codes >= 100 are
#: logged as "Exit Code: N"; an unhandled exception is ExitCode.SERVERAPP_EXCEPTION = 201).
RUN_ERROR_MARKERS = ("ServerApp raised an exception", "Exit Code: ")

# Run through ``python -c`` instead of ``flower-supernode`` when a heartbeat interval other
# than Flower's hard-coded 30 s is wanted. The SuperLink accepts intervals in [10, 1800] s.
_SUPERNODE_WRAPPER = textwrap.dedent(
    """
    import sys
    interval = float(sys.argv.pop(1))
    import flwr.supercore.heartbeat as _hb
    import flwr.supernode.fleet_http_connection as _conn
    _hb.HEARTBEAT_DEFAULT_INTERVAL = interval
    _conn.HEARTBEAT_DEFAULT_INTERVAL = interval
    sys.argv[0] = "flower-supernode"
    from flwr.supernode.cli import flower_supernode
    flower_supernode()
    """
)


class DeploymentError(RuntimeError):
    """A Flower process or run failed; the message carries the relevant logs."""


def free_port(host: str = HOST) -> int:
    """Return a TCP port that was free a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _bin(name: str) -> str:
    """Return the path of a console script of the running interpreter's environment."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise DeploymentError(f"`{name}` not found next to {sys.executable} or on PATH")
    return found


# Credentials (a CA, server certificates, SuperNode keys) come from most.flower.credentials.

# --------------------------------------------------------------------------- TLS probes


def plaintext_http_reply(host: str, port: int, timeout: float = 15.0) -> bytes:
    """Send one plain (unencrypted) HTTP/1.1 request; return every byte answered until close.

    A plaintext HTTP server answers ``HTTP/1.1 ...``; a TLS-only server takes the request
    for a broken ClientHello and closes the connection (``b""``) or sends a TLS alert record
    (first byte ``0x15``). A reset connection also counts as ``b""``.
    """
    reply = b""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                reply += chunk
    return reply


def tls_handshake(
    host: str,
    port: int,
    *,
    cafile: str | os.PathLike[str] | None,
    server_hostname: str | None = None,
    timeout: float = 15.0,
) -> tuple[str, bytes]:
    """Connect to ``host:port`` as a verifying TLS client; return (TLS version, peer cert DER).

    The client trusts ``cafile`` only (``None``: the system's default roots only) and checks
    that the certificate is valid for ``server_hostname`` (default ``host``, the address
    dialled), like Flower's clients. Raises :class:`ssl.SSLCertVerificationError` for a
    certificate it must not accept, another :class:`ssl.SSLError` if the peer does not
    speak TLS at all.
    """
    if cafile is None:
        context = ssl.create_default_context()
    else:
        context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((host, port), timeout=timeout) as sock,
        context.wrap_socket(sock, server_hostname=server_hostname or host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        return str(tls.version()), bytes(der or b"")


def activate_node_request(
    address: str,
    ca_cert: str | os.PathLike[str],
    *,
    public_key: str | os.PathLike[str],
    signing_key: str | os.PathLike[str],
) -> tuple[int, str]:
    """Send the Fleet API's ActivateNode the way a SuperNode does; return (HTTP status, body).

    The request claims the OpenSSH ``public_key`` (in its body and in the signed-identity
    headers) but its timestamp is signed with the OpenSSH private key ``signing_key``: with
    the matching private key this is what ``flower-supernode`` sends; with another one it
    is a client posing as the owner of ``public_key``. Goes through Flower's own Fleet HTTP
    client and interceptors (internal API of Flower 1.41), over TLS trusting ``ca_cert``,
    with no retries.
    """
    import httpx
    from cryptography.hazmat.primitives import serialization
    from flwr.proto.fleet_pb2 import ActivateNodeRequest
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes
    from flwr.supernode.fleet_http_client import FleetHttpClient
    from flwr.supernode.fleet_http_connection import (
        NodeAuthHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )

    claimed = serialization.load_ssh_public_key(Path(public_key).read_bytes())
    signer = serialization.load_ssh_private_key(Path(signing_key).read_bytes(), None)
    interceptor = NodeAuthHttpInterceptor(signer, signer.public_key())  # type: ignore[arg-type]
    if not hasattr(interceptor, "_public_key_bytes"):  # the header it sends; Flower 1.41
        raise DeploymentError("NodeAuthHttpInterceptor changed: cannot claim another key")
    interceptor._public_key_bytes = public_key_to_bytes(claimed)  # type: ignore[arg-type]
    request = ActivateNodeRequest(
        public_key=public_key_to_bytes(claimed),  # type: ignore[arg-type]
        heartbeat_interval=30,
    )
    with FleetHttpClient.from_server_address(
        address,
        False,
        Path(ca_cert).read_bytes(),
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperNode"), interceptor],
    ) as client:
        try:
            client.ActivateNode(request)
        except httpx.HTTPStatusError as err:
            return err.response.status_code, err.response.text
    return 200, ""


# --------------------------------------------------------------------------- processes


def _children_map() -> dict[int, list[int]]:
    """Map every live PID to its children, read from /proc (Linux only)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: split after it.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _process_tree(root: int) -> list[int]:
    """Return ``root`` and all its live descendants (root first)."""
    if not os.path.isdir("/proc"):
        return [root]
    children = _children_map()
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


@dataclass
class _Proc:
    """One process this module started, with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    known_pids: set[int] = field(default_factory=set)
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def remember_descendants(self) -> None:
        """Record the current process tree, so that orphans can still be killed later."""
        if self.alive():
            self.known_pids.update(_process_tree(self.pid))

    def kill(self) -> None:
        """SIGKILL the whole tree: own process group, descendants, remembered PIDs.

        The remembered PIDs are forgotten afterwards, so that a later call can never hit
        a recycled PID of an unrelated process; a second call does nothing.
        """
        if self.killed:
            return
        self.killed = True
        self.remember_descendants()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # started with start_new_session=True
        for pid in sorted(self.known_pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.known_pids.clear()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class RunResult(NamedTuple):
    """What :meth:`Deployment.run_app` returns."""

    run_id: int
    status: str  # e.g. "finished:completed"
    output: str  # stdout+stderr of `flwr run --stream` (the ServerApp's log lines)
    wall_s: float


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- deployment


@dataclass
class Deployment:
    """A local TLS + SuperNode-auth Flower deployment; use it as a context manager.

    Parameters
    ----------
    n_supernodes
        Number of SuperNodes started by :meth:`start` (indices ``0 .. n_supernodes-1``).
    node_configs
        One ``--node-config`` string per SuperNode, e.g. ``"partition-id=0 num-partitions=3"``;
        ``None`` gives ``partition-id=k num-partitions=n_supernodes``.
    registered
        Indices of the SuperNodes whose public key is registered with the SuperLink
        (default: all). An unregistered SuperNode is refused and exits.
    workdir
        Where everything is written. ``None``: a fresh temp dir, deleted by :meth:`stop`
        unless ``keep_workdir`` or the ``with`` block raised (then it is kept for debugging).
    heartbeat_interval
        Heartbeat interval (s) the SuperNodes announce; ``None`` keeps Flower's 30 s. A
        killed SuperNode is declared unavailable ``2 x interval`` after its last heartbeat.
        The SuperLink accepts values in [10, 1800].
    runtime_tls
        Also serve each SuperNode's local Runtime API (SuperNode <-> ClientApp, loopback)
        over TLS with the test certificate. Off by default, like Flower's default.
    wait_online
        Whether :meth:`start` waits until all registered SuperNodes are online.
    cert_hosts
        The hosts (IPs or DNS names) the SuperLink's server certificate is issued for.
        The default covers the address everything dials (``127.0.0.1``); other hosts give a
        SuperLink whose certificate does not match that address (clients must refuse it;
        the ``flwr`` CLI then cannot reach it either, so use ``n_supernodes=0``).
    extra_env
        Added to every subprocess's environment (e.g. ``PYTHONPATH``).
    """

    n_supernodes: int = 2
    node_configs: Sequence[str] | None = None
    registered: Iterable[int] | None = None
    workdir: Path | None = None
    heartbeat_interval: float | None = None
    runtime_tls: bool = False
    startup_timeout: float = 90.0
    wait_online: bool = True
    cert_hosts: Sequence[str] = ("127.0.0.1", "localhost", "::1")
    keep_workdir: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)

    # Filled in by start()
    port: int = field(default=0, init=False)
    certificates: Certificates | None = field(default=None, init=False)
    #: Key pair of SuperNode k (also of unregistered ones started later)
    node_keys: list[NodeKeys] = field(default_factory=list, init=False)
    #: SuperNode index -> node ID assigned by the SuperLink at registration
    node_ids: dict[int, int] = field(default_factory=dict, init=False)
    #: Wall times (s) of the start-up phases
    timings: dict[str, float] = field(default_factory=dict, init=False)
    _superlink: _Proc | None = field(default=None, init=False, repr=False)
    _supernodes: dict[int, _Proc] = field(default_factory=dict, init=False, repr=False)
    _n_runs: int = field(default=0, init=False, repr=False)
    _own_workdir: bool = field(default=False, init=False, repr=False)
    _started: bool = field(default=False, init=False, repr=False)

    # ------------------------------------------------------------------ addresses, env

    @property
    def superlink_address(self) -> str:
        """Fleet API address given to the SuperNodes (``--superlink``)."""
        return f"{HOST}:{self.port}"

    @property
    def control_address(self) -> str:
        """Control API address in the ``flwr`` config (the same port in Flower 1.41)."""
        return f"{HOST}:{self.port}"

    @property
    def cli_home(self) -> Path:
        """FLWR_HOME of the ``flwr`` CLI (holds ``config.toml``)."""
        return self._dir / "flwr_cli"

    @property
    def log_dir(self) -> Path:
        """One ``<process>.log`` per started process, ``flwr_run_<i>.log`` per run."""
        return self._dir / "logs"

    @property
    def _dir(self) -> Path:
        if self.workdir is None:
            raise DeploymentError("Deployment not started")
        return self.workdir

    def env(self, flwr_home: Path | None = None, **extra: str) -> dict[str, str]:
        """Environment for a Flower subprocess: offline vars, own FLWR_HOME, temp dirs."""
        env = dict(os.environ)
        env.update(OFFLINE_ENV)
        home = flwr_home or self.cli_home
        home.mkdir(parents=True, exist_ok=True)
        ray_tmp = self._dir / "ray"
        ray_tmp.mkdir(exist_ok=True)
        env["FLWR_HOME"] = str(home)
        env["RAY_TMPDIR"] = str(ray_tmp)
        # Console scripts spawned by Flower (flower-superexec, flwr-serverapp,
        # flwr-clientapp) are looked up on PATH: take this interpreter's environment.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.update(self.extra_env)
        env.update(extra)
        return env

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Deployment:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(keep_workdir=self.keep_workdir or exc_type is not None)

    def start(self) -> Deployment:
        """Generate credentials, start the SuperLink, register keys, start SuperNodes."""
        if self._started:
            raise DeploymentError("Deployment already started")
        self._started = True
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="flwr_deploy_"))
            self._own_workdir = True
        self.workdir = Path(self.workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        if self.node_configs is None:
            self.node_configs = [
                f"partition-id={k} num-partitions={self.n_supernodes}"
                for k in range(self.n_supernodes)
            ]
        if len(self.node_configs) != self.n_supernodes:
            raise ValueError("need one node config per SuperNode")
        registered = set(range(self.n_supernodes) if self.registered is None else self.registered)
        t0 = time.monotonic()
        try:
            self.certificates = make_certificates(
                self._dir / "certs", hosts=self.cert_hosts, valid_days=2
            )
            self._start_superlink()
            self.timings["superlink_up"] = time.monotonic() - t0
            self._write_cli_config()
            for k in range(self.n_supernodes):
                self.node_keys.append(make_node_keys(self._dir / "keys", k))
                if k in registered:
                    self.node_ids[k] = self.register_public_key(self.node_keys[k].public_key)
            self.timings["keys_registered"] = time.monotonic() - t0
            for k in range(self.n_supernodes):
                self._start_supernode(k, self.node_configs[k])
            if self.wait_online and self.node_ids:
                self.wait_for_nodes(self.node_ids.values(), timeout=self.startup_timeout)
                self.timings["supernodes_online"] = time.monotonic() - t0
        except BaseException:
            self.stop(keep_workdir=True)
            raise
        return self

    def stop(self, keep_workdir: bool | None = None) -> None:
        """SIGKILL every process this deployment started (whole trees), even on error.

        Idempotent. Deletes the work directory only if it was created here and neither
        ``keep_workdir`` (argument, else the attribute) is set.
        """
        procs = list(self._supernodes.values())
        if self._superlink is not None:
            procs.append(self._superlink)
        for proc in procs:  # snapshot all trees before anything dies and gets re-parented
            proc.remember_descendants()
        for proc in procs:
            proc.kill()
        keep = self.keep_workdir if keep_workdir is None else keep_workdir
        if self._own_workdir and self.workdir is not None:
            if keep:
                print(f"[flower-deploy] kept {self.workdir}", file=sys.stderr)
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, cmd: Sequence[str], env: Mapping[str, str]) -> _Proc:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            log_file.write(f"$ {' '.join(cmd)}\n".encode())
            log_file.flush()
            popen = subprocess.Popen(  # noqa: S603
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=self._dir,
                start_new_session=True,  # own process group: killpg reaches its children
            )
        return _Proc(name, popen, log_path)

    def _start_superlink(self) -> None:
        assert self.certificates is not None
        self.port = free_port()
        state = self._dir / "state"
        state.mkdir(exist_ok=True)
        cmd = [
            _bin("flower-superlink"),
            "--host", HOST,
            "--port", str(self.port),  # Fleet + Control + Runtime APIs, all HTTPS
            "--ssl-ca-certfile", str(self.certificates.ca_cert),
            "--ssl-certfile", str(self.certificates.server_cert),
            "--ssl-keyfile", str(self.certificates.server_key),
            "--enable-supernode-auth",
            "--database", str(state / "superlink.db"),
            "--disable-runtime-dependency-installation",
        ]  # fmt: skip
        self._superlink = self._spawn("superlink", cmd, self.env(self._dir / "home" / "superlink"))
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self._superlink.alive():
                raise DeploymentError(
                    f"flower-superlink exited ({self._superlink.popen.returncode})\n"
                    + self.format_logs()
                )
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.5):
                return
            time.sleep(0.2)
        raise DeploymentError("flower-superlink did not open its port\n" + self.format_logs())

    def _write_cli_config(self) -> None:
        """Write FLWR_HOME/config.toml: one TLS connection (CA root certificate) as default."""
        assert self.certificates is not None
        self.cli_home.mkdir(parents=True, exist_ok=True)
        (self.cli_home / "config.toml").write_text(
            "[superlink]\n"
            f'default = "{CONNECTION}"\n\n'
            f"[superlink.{CONNECTION}]\n"
            f'address = "{self.control_address}"\n'
            f'root-certificates = "{self.certificates.ca_cert}"\n',
            encoding="utf-8",
        )

    def _supernode_cmd(
        self,
        node_config: str,
        keys: NodeKeys,
        *,
        root_certificates: str | os.PathLike[str] | None | bool = True,
        max_retries: int | None = None,
        authenticate: bool = True,
    ) -> list[str]:
        assert self.certificates is not None
        if self.heartbeat_interval is None:
            cmd = [_bin("flower-supernode")]
        else:
            cmd = [sys.executable, "-c", _SUPERNODE_WRAPPER, str(float(self.heartbeat_interval))]
        cmd += ["--superlink", self.superlink_address]
        if root_certificates is True:  # the deployment's CA
            cmd += ["--root-certificates", str(self.certificates.ca_cert)]
        elif root_certificates is False:  # plaintext HTTP
            cmd += ["--insecure"]
        elif root_certificates is not None:  # None: the system's trusted roots only
            cmd += ["--root-certificates", str(root_certificates)]
        if max_retries is not None:
            cmd += ["--max-retries", str(max_retries)]
        if authenticate:
            cmd += ["--auth-supernode-private-key", str(keys.private_key)]
        cmd += [
            "--host", HOST,
            "--port", str(free_port()),  # this SuperNode's own Runtime API (for ClientApps)
        ]  # fmt: skip
        if self.runtime_tls:
            cmd += [
                "--ssl-ca-certfile", str(self.certificates.ca_cert),
                "--ssl-certfile", str(self.certificates.server_cert),
                "--ssl-keyfile", str(self.certificates.server_key),
            ]  # fmt: skip
        if node_config:
            cmd += ["--node-config", node_config]
        return cmd

    def _start_supernode(self, k: int, node_config: str, **cmd_options: Any) -> int:
        name = f"supernode_{k}"
        cmd = self._supernode_cmd(node_config, self.node_keys[k], **cmd_options)
        self._supernodes[k] = self._spawn(name, cmd, self.env(self._dir / "home" / name))
        return k

    def start_unregistered_supernode(self, node_config: str = "") -> int:
        """Start one more SuperNode with a fresh key that is NOT registered; return its index.

        Use :meth:`supernode_refused` to check that the SuperLink turns it away.
        """
        return self.start_extra_supernode(node_config)

    def start_extra_supernode(
        self,
        node_config: str = "",
        *,
        register: bool = False,
        root_certificates: str | os.PathLike[str] | None | bool = True,
        max_retries: int | None = None,
        authenticate: bool = True,
    ) -> int:
        """Start one more SuperNode with a fresh key; return its index.

        ``register``: register its public key first (its node ID goes to :attr:`node_ids`).
        ``root_certificates``: what it trusts to verify the SuperLink -- ``True`` the
        deployment's CA, a path another CA (``--root-certificates``), ``None`` the system's
        roots only (no ``--root-certificates``), ``False`` nothing: plaintext (``--insecure``).
        ``max_retries``: Flower's ``--max-retries`` (by default a SuperNode retries transport
        errors forever; TLS verification errors end it at once). ``authenticate=False``: no
        ``--auth-supernode-private-key`` (the SuperNode then tries to register itself, and
        Flower refuses, locally, to combine a key with a plaintext channel).
        Use :meth:`supernode_exit` to wait for it to be turned away.
        """
        k = len(self.node_keys)
        self.node_keys.append(make_node_keys(self._dir / "keys", k))
        if register:
            self.node_ids[k] = self.register_public_key(self.node_keys[k].public_key)
        return self._start_supernode(
            k,
            node_config,
            root_certificates=root_certificates,
            max_retries=max_retries,
            authenticate=authenticate,
        )

    def supernode_exit(self, k: int, timeout: float = 30.0) -> tuple[int | None, str]:
        """Wait up to ``timeout`` s for SuperNode ``k`` to exit; return (exit status, log).

        The status is ``None`` if it is still running when the time is up.
        """
        proc = self._supernodes[k]
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=timeout)
        return proc.popen.poll(), proc.log()

    def supernode_refused(self, k: int, timeout: float = 30.0) -> bool:
        """Wait up to ``timeout`` s for SuperNode ``k`` to be refused by the SuperLink.

        Refused means: the process exited non-zero and its log shows Flower's exit code 305
        ("Failed to initialize the connection to the SuperLink") because the SuperLink
        answered ActivateNode with "[code: 2004] Failed to activate SuperNode." (its key is
        not registered). Returns False if it is still running, or ended otherwise (e.g. a
        TLS or transport error), when the time is up.
        """
        proc = self._supernodes[k]
        deadline = time.monotonic() + timeout
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        if proc.alive():
            return False
        log = proc.log()
        return (
            proc.popen.returncode != 0
            and REFUSED_CODE in log
            and REFUSED_MARKER in log
            and ACTIVATION_REFUSED in log
        )

    def kill_supernode(self, k: int) -> float:
        """SIGKILL SuperNode ``k`` with its SuperExec/ClientApp children (a lost machine).

        Returns the ``time.time()`` of the kill.
        """
        proc = self._supernodes[k]
        killed_at = time.time()
        proc.kill()
        return killed_at

    def supernode_alive(self, k: int) -> bool:
        """Whether SuperNode ``k``'s process is still running."""
        return self._supernodes[k].alive()

    # ------------------------------------------------------------------ flwr CLI

    def flwr(
        self, *args: str, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``flwr`` CLI against this deployment (its FLWR_HOME and env)."""
        cmd = [_bin("flwr"), *args]
        try:
            res = subprocess.run(  # noqa: S603
                cmd,
                capture_output=True,
                text=True,
                env=self.env(),
                cwd=self._dir,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as err:
            raise DeploymentError(f"timed out: {' '.join(cmd)}\n{self.format_logs()}") from err
        if check and res.returncode != 0:
            raise DeploymentError(
                f"failed ({res.returncode}): {' '.join(cmd)}\n"
                f"--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}\n{self.format_logs()}"
            )
        return res

    def _flwr_json(self, *args: str, timeout: float = 60.0) -> dict[str, Any]:
        res = self.flwr(*args, "--format", "json", timeout=timeout)
        start = res.stdout.find("{")
        if start < 0:
            raise DeploymentError(f"no JSON from flwr {' '.join(args)}:\n{res.stdout}{res.stderr}")
        return dict(json.loads(res.stdout[start:]))

    def register_public_key(self, public_key: str | os.PathLike[str]) -> int:
        """``flwr supernode register KEY.pub deploy``; return the new node ID."""
        out = self._flwr_json("supernode", "register", str(public_key), CONNECTION)
        return int(out["node-id"])

    def list_nodes(self) -> list[dict[str, Any]]:
        """``flwr supernode ls``: the SuperLink's nodes (``node-id``, ``status``, ...)."""
        return list(self._flwr_json("supernode", "ls", CONNECTION).get("nodes", []))

    def online_node_ids(self) -> set[int]:
        """IDs of the nodes the SuperLink currently considers ``online``."""
        return {int(n["node-id"]) for n in self.list_nodes() if n.get("status") == "online"}

    def wait_for_nodes(self, node_ids: Iterable[int], timeout: float = 60.0) -> None:
        """Wait until every given node ID is ``online`` at the SuperLink."""
        wanted = set(node_ids)
        deadline = time.monotonic() + timeout
        online: set[int] = set()
        while time.monotonic() < deadline:
            online = self.online_node_ids()
            if wanted <= online:
                return
            dead = [
                self._supernodes[k].name
                for k, node_id in self.node_ids.items()
                if node_id in wanted and k in self._supernodes and not self._supernodes[k].alive()
            ]
            if dead:
                raise DeploymentError(f"SuperNode(s) exited: {dead}\n{self.format_logs()}")
            time.sleep(0.5)
        raise DeploymentError(
            f"nodes {sorted(wanted - online)} not online after {timeout} s\n{self.format_logs()}"
        )

    def run_status(self, run_id: int) -> str:
        """``flwr ls --run-id``: the run's status text, e.g. ``finished:completed``."""
        runs = self._flwr_json("ls", CONNECTION, "--run-id", str(run_id)).get("runs", [])
        return str(runs[0]["status"]) if runs else "unknown"

    def run_app(
        self,
        app_dir: str | os.PathLike[str],
        run_config: Mapping[str, Any] | None = None,
        timeout: float = 600.0,
    ) -> RunResult:
        """``flwr run APP_DIR deploy --stream`` and check the run's real outcome.

        ``run_config`` overrides keys that must be declared in the app's
        ``[tool.flwr.app.config]`` (else the SuperLink rejects the run: "[code: 15] Invalid
        run configuration."); it is passed as a TOML file (``--run-config FILE``), so any
        TOML value type works. The ``flwr run`` output (the ServerApp's log, streamed) goes
        to ``logs/flwr_run_<i>.log`` while it runs.

        Raises :class:`DeploymentError`, with that output and the tails of all logs, unless
        the run's status (``flwr ls``) is ``finished:completed`` and its output shows no
        ServerApp error: ``flwr run`` itself exits 0 when the ServerApp failed. On timeout
        the run is stopped (``flwr stop``) first.
        """
        i = self._n_runs
        self._n_runs += 1
        args = ["run", str(Path(app_dir).resolve()), CONNECTION, "--stream"]
        if run_config:
            import tomli_w  # a Flower dependency

            path = self._dir / f"run_config_{i}.toml"
            path.write_text(tomli_w.dumps(dict(run_config)), encoding="utf-8")
            args += ["--run-config", str(path)]
        cmd = [_bin("flwr"), *args]
        log_path = self.log_dir / f"flwr_run_{i}.log"
        t0 = time.monotonic()
        with open(log_path, "wb") as log_file:
            popen = subprocess.Popen(  # noqa: S603
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self._dir,
                start_new_session=True,
            )
            try:
                code: int | None = popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait()
        wall = time.monotonic() - t0
        output = log_path.read_text(errors="replace")
        match = re.search(r"Successfully started run (\d+)", output)
        if match is None:
            raise DeploymentError(
                f"`flwr {' '.join(args)}` did not start a run (exit {code})\n"
                f"--- flwr run output\n{output}\n{self.format_logs()}"
            )
        run_id = int(match.group(1))
        if code is None:
            self.flwr("stop", str(run_id), CONNECTION, check=False)
            raise DeploymentError(
                f"run {run_id} timed out after {timeout} s (stopped)\n"
                f"--- flwr run output\n{output}\n{self.format_logs()}"
            )
        # The stream ends when the run has finished; its status may lag a moment.
        status = self.run_status(run_id)
        deadline = time.monotonic() + 30
        while not status.startswith("finished") and time.monotonic() < deadline:
            time.sleep(0.5)
            status = self.run_status(run_id)
        if status != "finished:completed" or any(m in output for m in RUN_ERROR_MARKERS):
            raise DeploymentError(
                f"run {run_id} ended with status {status!r} (flwr exit {code})\n"
                f"--- flwr run output\n{output}\n{self.format_logs()}"
            )
        return RunResult(run_id, status, output, wall)

    # ------------------------------------------------------------------ logs

    def superlink_log(self) -> str:
        """SuperLink log (and its SuperExec's).

        The ServerApp's own output is not here: ``flwr-serverapp`` sends it to the run's
        log stream, i.e. to :attr:`RunResult.output` / ``logs/flwr_run_<i>.log``.
        """
        return self._superlink.log() if self._superlink else ""

    def supernode_log(self, k: int) -> str:
        """SuperNode ``k``'s log, with its SuperExec's and ClientApp processes' output."""
        return self._supernodes[k].log()

    def logs(self) -> dict[str, str]:
        """Every log of this deployment by name: processes and ``flwr run`` outputs."""
        if self.workdir is None or not self.log_dir.exists():
            return {}
        return {p.stem: p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log"))}

    def format_logs(self, tail: int = 60) -> str:
        """The last ``tail`` lines of every log, for error messages."""
        parts = [f"(work directory: {self.workdir})"]
        for name, text in self.logs().items():
            parts.append(f"===== {name} (last {tail} lines) =====\n{_tail(text, tail)}")
        return "\n".join(parts)


@contextlib.contextmanager
def deployment(
    n_supernodes: int,
    node_configs: Sequence[str] | None = None,
    allowed_keys: Iterable[int] | None = None,
    **kwargs: Any,
) -> Iterator[Deployment]:
    """Context manager: a started :class:`Deployment`, stopped on exit (even on error).

    ``allowed_keys`` are the indices of the SuperNodes whose keys get registered
    (default: all); the others are started as well and get refused. ``kwargs`` go to
    :class:`Deployment` (``workdir``, ``heartbeat_interval``, ``keep_workdir``, ...).
    """
    with Deployment(
        n_supernodes=n_supernodes, node_configs=node_configs, registered=allowed_keys, **kwargs
    ) as dep:
        yield dep


# --------------------------------------------------------------------------- toy app


def write_toy_app(app_dir: str | os.PathLike[str], *, name: str = "toyapp") -> Path:
    """Write a minimal Flower app (FedAvg over a 3-vector) into ``app_dir``; return it.

    Run config keys: ``num-server-rounds``, ``min-nodes`` (FedAvg's min train/evaluate/
    available nodes), ``train-sleep`` (seconds each ClientApp train call sleeps),
    ``round-timeout`` (the strategy's per-round reply timeout).
    The ServerApp prints ``TOY-RESULT <json>`` with the final arrays.
    """
    root = Path(app_dir)
    pkg = root / name
    pkg.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{name}"
            version = "1.0.0"
            description = "Toy Flower app for deployment smoke tests"
            license = "Apache-2.0"
            dependencies = []

            [tool.hatch.build.targets.wheel]
            packages = ["."]

            [tool.flwr.app]
            publisher = "most-tests"

            [tool.flwr.app.components]
            serverapp = "{name}.apps:server_app"
            clientapp = "{name}.apps:client_app"

            [tool.flwr.app.config]
            num-server-rounds = 2
            min-nodes = 3
            train-sleep = 0.0
            round-timeout = 600.0
            """
        ),
        encoding="utf-8",
    )
    (pkg / "__init__.py").write_text('"""Toy Flower app."""\n', encoding="utf-8")
    (pkg / "apps.py").write_text(
        textwrap.dedent(
            '''\
            """Toy ServerApp/ClientApp: each client moves the model towards its partition id."""

            import json
            import time

            import numpy as np
            from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
            from flwr.clientapp import ClientApp
            from flwr.serverapp import Grid, ServerApp
            from flwr.serverapp.strategy import FedAvg

            client_app = ClientApp()


            @client_app.train()
            def train(msg: Message, context: Context) -> Message:
                (w,) = msg.content["arrays"].to_numpy_ndarrays()
                pid = int(context.node_config["partition-id"])
                time.sleep(float(context.run_config["train-sleep"]))
                new_w = w + 0.5 * (pid - w)
                n = 10 * (pid + 1)
                content = RecordDict(
                    {
                        "arrays": ArrayRecord([new_w]),
                        "metrics": MetricRecord(
                            {"train_loss": float(np.sum((new_w - pid) ** 2)), "num-examples": n}
                        ),
                    }
                )
                return Message(content=content, reply_to=msg)


            @client_app.evaluate()
            def evaluate(msg: Message, context: Context) -> Message:
                (w,) = msg.content["arrays"].to_numpy_ndarrays()
                pid = int(context.node_config["partition-id"])
                content = RecordDict(
                    {
                        "metrics": MetricRecord(
                            {"eval_loss": float(np.sum((w - pid) ** 2)), "num-examples": 10}
                        )
                    }
                )
                return Message(content=content, reply_to=msg)


            server_app = ServerApp()


            @server_app.main()
            def main(grid: Grid, context: Context) -> None:
                cfg = context.run_config
                m = int(cfg["min-nodes"])
                strategy = FedAvg(
                    min_train_nodes=m, min_evaluate_nodes=m, min_available_nodes=m
                )
                result = strategy.start(
                    grid=grid,
                    initial_arrays=ArrayRecord([np.zeros(3)]),
                    num_rounds=int(cfg["num-server-rounds"]),
                    timeout=float(cfg["round-timeout"]),
                )
                (w,) = result.arrays.to_numpy_ndarrays()
                print("TOY-RESULT " + json.dumps({"w": w.tolist()}), flush=True)
            '''
        ),
        encoding="utf-8",
    )
    return root


# --------------------------------------------------------------------------- smoke check


def _smoke(argv: Sequence[str]) -> int:
    """Toy FedAvg run (2 rounds) through 3 authenticated TLS SuperNodes.

    Also starts a SuperNode with an unregistered key and checks that it is refused. With
    ``--kill``: SuperNode 0 is SIGKILLed as soon as it receives its first train message
    (heartbeat interval 10 s, FedAvg needing only 2 nodes) and the run must still finish.
    """
    kill = "--kill" in argv
    with tempfile.TemporaryDirectory(prefix="flwr_toy_") as tmp:
        app = write_toy_app(Path(tmp) / "app")
        t0 = time.monotonic()
        with deployment(3, heartbeat_interval=10 if kill else None) as dep:
            print(f"deployment at {dep.superlink_address}, nodes {dep.node_ids}")
            print("start-up (s): " + ", ".join(f"{k} {v:.1f}" for k, v in dep.timings.items()))
            extra = dep.start_unregistered_supernode("partition-id=9 num-partitions=10")
            config: dict[str, Any] = {"num-server-rounds": 2}
            killed_at = None
            if kill:
                import threading

                config.update({"min-nodes": 2, "train-sleep": 2.0})

                def _kill_on_first_train() -> None:
                    nonlocal killed_at
                    while "Receiving: train" not in dep.supernode_log(0):
                        time.sleep(0.05)
                    killed_at = time.monotonic()
                    dep.kill_supernode(0)

                threading.Thread(target=_kill_on_first_train, daemon=True).start()
            result = dep.run_app(app, run_config=config)
            print(f"run {result.run_id}: {result.status} in {result.wall_s:.1f} s (flwr run)")
            for line in result.output.splitlines():
                if "TOY-RESULT" in line or "aggregate_train" in line or "error in reply" in line:
                    print("  " + line.strip())
            if kill:
                assert killed_at is not None and "1 failures" in result.output
            refused = dep.supernode_refused(extra, timeout=30)
            print(f"unregistered SuperNode refused: {refused}; SuperLink nodes: "
                  f"{sorted((n['node-id'], n['status']) for n in dep.list_nodes())}")
            if not refused:
                print(dep.supernode_log(extra))
                return 1
        print(f"total {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(_smoke(sys.argv[1:]))
