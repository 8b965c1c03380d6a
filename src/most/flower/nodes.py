"""Which Flower node holds which client, and the messages to them.

:class:`ClientNodes` maps the n clients to the nodes of a Flower ``Grid``: at the start it waits
for the clients and asks each node which client it holds; nodes that connect later, or come back
under a new node id, are asked when they appear. Its :meth:`ClientNodes.send` keeps the good
replies, by client.
"""

from __future__ import annotations

import logging
import time

from flwr.app import ConfigRecord, Message, RecordDict

from . import protocol as P
from .client import CLIENT_DATA_ERROR

__all__ = ["ClientNodes", "message"]

log = logging.getLogger("most.flower")


def message(kind: str, node: int, content: dict) -> Message:
    """A message of ``kind`` to ``node``; ``content[P.CONFIG]`` is a plain dict of settings."""
    content = dict(content)
    content[P.CONFIG] = ConfigRecord(content[P.CONFIG])
    return Message(content=RecordDict(content), message_type=kind, dst_node_id=node)


class ClientNodes:
    """The node of each client (and the client of each node) of one run.

    Args:
        n: the number of clients; a node must hold one of ``0 .. n - 1``.
        dim: the number of parameters the server's model has (a client's must match).
        timeout: seconds to wait for the replies of one exchange (``None``: for all).
        wait_for_clients: seconds to wait at the start for the n clients to connect.
    """

    def __init__(self, n: int, dim: int, timeout: float | None, wait_for_clients: float, fixed: int | None = None):
        self.n, self.dim, self.timeout, self.wait_for_clients = n, dim, timeout, wait_for_clients
        self.fixed = fixed  # the server model's FlatModel.fixed_digest(), compared with each node's
        self.node_of: dict[int, int] = {}  # client -> node id
        self.client_at: dict[int, int] = {}  # node id -> client

    def send(self, grid, messages) -> dict[int, object]:
        """Sends, then returns {client: reply content} of the good replies."""
        messages = list(messages)
        wanted = {msg.metadata.dst_node_id: self.client_at.get(msg.metadata.dst_node_id) for msg in messages}
        replies = grid.send_and_receive(messages, timeout=self.timeout) if messages else []
        good: dict[int, object] = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                log.warning("Client on node %s failed: %s", node, reply.error.reason)
                continue
            client = int(reply.content[P.METRICS][P.CLIENT])
            if wanted.get(node) not in (None, client):
                raise RuntimeError(f"Node {node} answered as client {client}, but it was client {wanted[node]}.")
            good[client] = reply.content
        return good

    def describe(self, grid, nodes: list[int], failures: list[tuple[int, str]] | None = None) -> dict[int, int]:
        """Asks ``nodes`` which client each holds and maps them; returns each described client's
        number of training samples. A node that answers with an error is left out (a warning), and
        appended to ``failures`` as ``(node, reason)`` when given."""
        msgs = [message(P.DESCRIBE, node, {P.CONFIG: {}}) for node in nodes]
        replies = grid.send_and_receive(msgs, timeout=self.timeout) if msgs else []
        connected = set(grid.get_node_ids())
        counts = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                if CLIENT_DATA_ERROR in reply.error.reason:  # its data do not fit the model: stop, naming it
                    reason = reply.error.reason[reply.error.reason.index(CLIENT_DATA_ERROR) + len(CLIENT_DATA_ERROR):]
                    raise ValueError(f"Node {node}:{reason.splitlines()[0] if reason.strip() else ''}")
                log.warning("Node %s did not describe itself: %s", node, reply.error.reason)
                if failures is not None:
                    failures.append((node, reply.error.reason))
                continue
            metrics = reply.content[P.METRICS]
            client, dim = int(metrics[P.CLIENT]), int(metrics[P.DIM])
            if not 0 <= client < self.n:
                raise ValueError(f"Node {node} holds client {client}, outside 0..{self.n - 1}: "
                                 f"give every node a distinct partition-id below n_clients={self.n}.")
            old = self.node_of.get(client)
            if old is not None and old != node and old in connected:
                raise ValueError(f"Two nodes hold client {client}: give every node a distinct partition-id.")
            if dim != self.dim:
                raise ValueError(f"Client {client} has a model of {dim} parameters; the server's has {self.dim}.")
            fixed = metrics.get(P.FIXED)  # absent from a node of an earlier version
            if self.fixed is not None and fixed is not None and int(fixed) != self.fixed:
                raise ValueError(
                    f"Client {client} (node {node}) builds its model with other frozen parameters or buffers than the "
                    "server's: each node would train another network. The model's factory draws them (a frozen "
                    "layer left at its random initialisation, say); make it give the same values on every call "
                    "(load them from a file, or seed them inside the factory).")
            if old is not None:  # the client's node left and came back under a new id
                self.client_at.pop(old, None)
            self.node_of[client] = node
            self.client_at[node] = client
            counts[client] = int(metrics[P.NUM_EXAMPLES])
        return counts

    def discover(self, grid) -> dict[int, int]:
        """At the start: waits up to ``wait_for_clients`` for the n clients, then maps them;
        returns their sample counts (:meth:`describe`). Fails if no client described itself:
        with the first node's error where the nodes answered with errors (every client failed
        alike, e.g. on a setting of the run config they all read), else as none answered."""
        deadline = time.monotonic() + self.wait_for_clients
        while len(list(grid.get_node_ids())) < self.n and time.monotonic() < deadline:
            time.sleep(0.5)
        nodes = list(grid.get_node_ids())
        failures: list[tuple[int, str]] = []
        counts = self.describe(grid, nodes, failures)
        if not self.node_of:
            if failures:
                node, reason = failures[0]
                raise RuntimeError(f"No client could start: {len(failures)} of {len(nodes)} connected nodes answered "
                                   f"with an error, and none described its client. The first (node {node}) said:\n"
                                   f"{reason.strip()}\nFix what it names (the ClientApp's load, its data or the "
                                   "run config) and start the run again.")
            raise RuntimeError(f"No client answered within {self.wait_for_clients:g} s "
                               f"(connected nodes: {len(nodes)}).")
        return counts

    def update(self, grid) -> dict[int, int]:
        """Maps the clients on first use, later the nodes not seen before (clients that connected
        late, or came back under a new node id); returns the described clients' sample counts."""
        if not self.node_of:
            return self.discover(grid)
        new = [node for node in grid.get_node_ids() if node not in self.client_at]
        return self.describe(grid, new) if new else {}
