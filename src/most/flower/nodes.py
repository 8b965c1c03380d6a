"""Which Flower node holds which client, and the messages to them.

:class:`ClientNodes` maps the n clients to the nodes of a Flower ``Grid``: at the start it waits
for the clients and asks each node which client it holds; nodes that connect later, or come back
under a new node id, are asked when they appear. Its :meth:`ClientNodes.send` keeps the good
replies, by client.

:class:`StoppableGrid` wraps the run's ``Grid`` so that a stop request (an interrupt of the
process that runs the ServerApp's thread) ends the run between two exchanges and also while it
waits for replies, raising :class:`RunStopped`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterable

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from . import protocol as P
from .client import CLIENT_DATA_ERROR

__all__ = ["ClientNodes", "RunStopped", "StoppableGrid", "message"]


class RunStopped(RuntimeError):
    """The run was asked to stop (:meth:`~most.flower.MostStrategy.stop`) before it finished."""


class StoppableGrid(Grid):
    """``grid``, whose exchanges raise :class:`RunStopped` once ``stop`` is set.

    :meth:`send_and_receive` pushes the messages and pulls the replies itself, as Flower's grids
    do, checking ``stop`` between pulls: an interrupted run ends within one pull interval (the
    grid's ``pull_interval``, else 3 s, as Flower's grid over the network) rather than after the
    step's timeout. A grid that delivers only whole exchanges (its ``push_messages`` raises
    ``NotImplementedError``) is asked through its own ``send_and_receive``, with ``stop``
    checked before and after.
    """

    def __init__(self, grid: Grid, stop: threading.Event):
        self.grid, self.stop = grid, stop

    def check(self) -> None:
        """Raises :class:`RunStopped` if the run was asked to stop."""
        if self.stop.is_set():
            raise RunStopped("The run was stopped before it finished.")

    # the Grid API, delegated
    @property
    def run(self):
        return self.grid.run

    def set_run(self, run):
        self.grid.set_run(run)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self):
        return self.grid.get_node_ids()

    def get_nodes(self):
        return self.grid.get_nodes()

    def push_messages(self, messages):
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids):
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        self.check()
        messages = list(messages)
        if not messages:
            return []
        try:
            pending = set(self.grid.push_messages(messages))
        except NotImplementedError:
            whole = list(self.grid.send_and_receive(messages, timeout=timeout))
            self.check()
            return whole
        interval = float(getattr(self.grid, "pull_interval", 3.0))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while True:
            got = list(self.grid.pull_messages(pending))
            replies.extend(got)
            pending.difference_update(msg.metadata.reply_to_message_id for msg in got)
            if not pending:
                return replies
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return replies
            if self.stop.wait(interval if left is None else min(interval, left)):
                self.check()

    def __getattr__(self, name: str):
        # what else a grid has (attributes Grid does not define), asked of the grid itself
        if name == "grid":  # not set yet
            raise AttributeError(name)
        return getattr(self.grid, name)


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
        stop: set to end the wait for the clients (:class:`RunStopped`).
    """

    def __init__(self, n: int, dim: int, timeout: float | None, wait_for_clients: float, fixed: int | None = None,
                 stop: threading.Event | None = None):
        self.n, self.dim, self.timeout, self.wait_for_clients = n, dim, timeout, wait_for_clients
        self.stop = stop if stop is not None else threading.Event()
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
            if self.stop.wait(0.5):
                raise RunStopped("The run was stopped while it waited for the clients to connect.")
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
