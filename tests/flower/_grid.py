"""A Flower ``Grid`` that delivers messages to ClientApps in this process, for fast tests.

Each node runs the ClientApp synchronously on the message objects the strategy built, and
``delivered`` keeps what each node received. Faults: a node in
``down`` never answers (a crashed or timed-out SuperNode), a node in ``broken`` answers
with an error reply (a ClientApp exception).
"""

from __future__ import annotations

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


class LocalGrid(Grid):
    def __init__(self, client_app, n_nodes: int, *, node_config=None, run_config=None):
        # what a ServerApp process has set before the strategy builds its messages
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
        self.client_app = client_app
        self.nodes = [1000 + k for k in range(n_nodes)]
        self.node_config = node_config or (lambda k: {"partition-id": k, "num-partitions": n_nodes})
        self.contexts = {node: Context(run_id=1, node_id=node, node_config=self.node_config(k), state=RecordDict(),
                                       run_config=dict(run_config or {}))
                         for k, node in enumerate(self.nodes)}
        self.down: set[int] = set()
        self.broken: set[int] = set()
        self.delivered: list[tuple[int, Message]] = []  # (node, message as received)
        self.on_round = None  # optional hook(grid, message) before delivery

    # the Grid API
    @property
    def run(self):  # pragma: no cover - not used by the strategy
        raise NotImplementedError

    def set_run(self, run_id):  # pragma: no cover
        pass

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # pragma: no cover
        return Message(content=content, message_type=message_type, dst_node_id=dst_node_id, group_id=group_id)

    def get_node_ids(self):
        return [n for n in self.nodes if n not in self.down]

    def push_messages(self, messages):  # pragma: no cover
        raise NotImplementedError

    def pull_messages(self, message_ids):  # pragma: no cover
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if self.on_round is not None:
                self.on_round(self, msg)
            if node in self.down:
                continue
            received = msg
            self.delivered.append((node, received))
            if node in self.broken:
                replies.append(Message(Error(code=1, reason="ClientApp raised"), reply_to=msg))
                continue
            try:
                reply = self.client_app(received, self.contexts[node])
            except Exception as exc:  # as Flower does: an error reply
                reply = Message(Error(code=1, reason=repr(exc)), reply_to=msg)
            replies.append(reply)
        return replies


class PolledGrid(LocalGrid):
    """A :class:`LocalGrid` with Flower's ``push_messages``/``pull_messages``, as the simulation
    engine's and a deployment's grids have: a pushed message is answered at once, except by a
    node in ``down``, whose reply never comes (a stopped engine, a dead SuperNode), so a wait for
    it lasts until the timeout."""

    pull_interval = 0.05

    def __init__(self, client_app, n_nodes: int, **kwargs):
        super().__init__(client_app, n_nodes, **kwargs)
        self._replies: dict[str, Message] = {}
        self._count = 0

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            self._count += 1
            msg.metadata.__dict__["_message_id"] = f"m{self._count}"
            ids.append(msg.metadata.message_id)
            for reply in super().send_and_receive([msg]):
                self._replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]


def client_app(data, model):
    """A ClientApp that serves client ``partition-id`` of ``data`` with ``model``."""
    from most.flower import ClientSpec, make_client_app

    return make_client_app(lambda ctx: ClientSpec(model, data.clients[int(ctx.node_config["partition-id"])],
                                                  int(ctx.node_config["partition-id"])))
