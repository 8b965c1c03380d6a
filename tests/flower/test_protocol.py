"""most.flower.protocol: the one place the strategy and the ClientApp take their message names from."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr", reason="needs the flower extra: pip install 'most-transport[flower]'")

import torch  # noqa: E402

from most.flower import protocol as P  # noqa: E402


def test_models_and_updates_round_trip_through_their_records():
    params = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert torch.equal(P.read_models(P.models_record(params)), params)
    record = P.train_models_record(params, [2, 0])
    assert torch.equal(P.read_train_models(record, [2, 0]), params[[2, 0]])
    updates = P.updates_record([2, 0], [params[2] * 0.5, params[0] * 0.5])
    assert torch.equal(P.read_update(updates, 0), params[0] * 0.5)
    assert sorted(updates.keys()) == [P.delta_key(0), P.delta_key(2)]


def test_message_types_are_flower_queries_and_no_two_keys_of_a_record_collide():
    assert P.DESCRIBE == "query.describe" and P.LOSSES == "query.losses"
    metrics = [P.CLIENT, P.NUM_EXAMPLES, P.DIM, P.LOSS, P.MIXTURE, *P.EVALUATION_METRICS.values(),
               *P.OPTIONAL_EVALUATION_METRICS.values()]
    assert len(set(metrics)) == len(set(P.EVALUATION_METRICS.values()) | set(P.OPTIONAL_EVALUATION_METRICS.values())
                                    | {P.CLIENT, P.NUM_EXAMPLES, P.DIM, P.LOSS})
    config = [P.ROUND, P.SEED, P.TRAIN_MODELS, P.EPOCHS, P.BATCH_SIZE, P.LR, P.PROX_MU, P.LOSS_SAMPLES, P.FINAL, P.MIXTURE]
    assert len(set(config)) == len(config)
