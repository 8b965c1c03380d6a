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
