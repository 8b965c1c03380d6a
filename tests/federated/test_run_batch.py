"""The run axis (most.federated.run_batch): runs that share data and architecture train as one
job and end exactly where each would alone; a failed run, a stopped batch and bad input."""

import pytest
import torch

import most.federated as fl
from most.baselines import TCHSetCombiner
from most.checkpoint import Checkpoint
from most.federated import methods as F
from most.federated.clients import batch_orders, local_train


@pytest.fixture(scope="module")
def uneven():
    """Clients of very different sizes (FedProx's power law), so pairs stop stepping at different times."""
    return fl.fedprox_synthetic(0.5, 0.5, n_clients=10, samples_per_client=30, size_distribution="power_law", seed=4)


def _mixed_runs(rounds=5):
    """Methods of every family, two seeds, two server steps, FedProx's mu, another local lr,
    partial participation and another evaluation schedule: what a sweep puts in one batch."""
    runs = []
    for seed in (0, 1):
        base = fl.FederatedConfig(rounds=rounds, eval_every=2, seed=seed)
        for eta in (1.0, 3.0):
            runs += [(F.MosT(3, server_lr=eta, warmup=F.WarmUp(2)), base), (F.MosT(3, server_lr=eta, warmup=None, diversity=0.1), base),
                     (F.FedProx(3, server_lr=eta, mu=0.1), base), (F.FedAvg(2, server_lr=eta), base),
                     (F.MGDA(3, server_lr=eta), base), (F.IFCA(3, server_lr=eta), base),
                     (F.SetScalarization(3, server_lr=eta, combiner=TCHSetCombiner()), base),
                     (F.Linearization(3, server_lr=eta),
                      fl.FederatedConfig(rounds=rounds, eval_every=3, seed=seed, lr=0.02, participation=0.6))]
    return runs


def _same(a: fl.FederatedResult, b: fl.FederatedResult) -> bool:
    return (torch.equal(a.params, b.params) and torch.equal(a.choice, b.choice)
            and torch.equal(a.test_accuracy.nan_to_num(-1), b.test_accuracy.nan_to_num(-1))
            and [(log.train_loss, log.val_accuracy) for log in a.history]
            == [(log.train_loss, log.val_accuracy) for log in b.history]
            and all(torch.equal(x.clients, y.clients) for x, y in zip(a.history, b.history)))


def test_a_batch_of_mixed_runs_ends_bit_for_bit_where_each_run_alone_ends(uneven):
    model = fl.logistic_regression(60, 10)
    alone = [fl.run_federated(uneven, model, method, config) for method, config in _mixed_runs()]
    together = fl.run_batch(uneven, model, _mixed_runs())
    assert len(together) == len(alone) == 32
    assert all(_same(a, b) for a, b in zip(alone, together))
    # the runs really differ from each other (a batch that mixed them up could not pass by chance)
    assert len({round(float(r.params.abs().sum()), 4) for r in together}) == 32


def test_a_batch_of_cnn_runs_matches_runs_alone_to_float_tolerance():
    """Convolutions may pick other kernels for another number of pairs: equal to float tolerance."""
    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=4, samples_per_client=20, seed=1)
    images = fl.FederatedDataset.from_clients(
        [fl.ClientData(*(t.reshape(len(t), 1, 6, 10) if t.ndim == 2 else t for t in (
            c.x_train, c.y_train, c.x_val, c.y_val, c.x_test, c.y_test))) for c in data.clients],
        name="images", n_classes=10)
    model = fl.FlatModel(lambda: torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.ReLU(),
                                                     torch.nn.Flatten(), torch.nn.Linear(180, 10)), name="cnn")
    runs = lambda: [(F.MosT(2, server_lr=eta, warmup=F.WarmUp(1)), fl.FederatedConfig(rounds=3, seed=s)) for s in (0, 1) for eta in (1., 2.)]
    alone = [fl.run_federated(images, model, m, c) for m, c in runs()]
    together = fl.run_batch(images, model, runs())
    for a, b in zip(alone, together):
        torch.testing.assert_close(a.params, b.params, rtol=1e-5, atol=1e-5)


def test_local_training_steps_each_pair_as_if_it_trained_alone(uneven):
    """Pairs of different sizes in one call (a step costs only the pairs with samples left)
    end where each pair ends trained by itself, with its own batch order."""
    model = fl.logistic_regression(60, 10)
    p = fl.pad_split(uneven, "train")
    clients = torch.tensor([0, 3, 3, 7, 9, 1])
    theta = model.init(len(clients), torch.Generator().manual_seed(2))
    x, y, w = p.x[clients], p.y[clients], p.w[clients]
    assert len(set(w.sum(1).tolist())) > 3
    keys = batch_orders(w, 2, generator=torch.Generator().manual_seed(7))
    seeds = [11, 12, 13, 14, 15, 16]
    together = local_train(model, theta, x, y, w, epochs=2, batch_size=4, lr=0.1, prox_mu=0.3, seeds=seeds)
    for i in range(len(clients)):
        one = local_train(model, theta[i:i + 1], x[i:i + 1], y[i:i + 1], w[i:i + 1], epochs=2, batch_size=4, lr=0.1,
                          prox_mu=0.3, seeds=seeds[i:i + 1])
        assert torch.equal(one, together[i:i + 1])
    # keys drawn apart from training: real samples first (below 1), padding last (above 2)
    assert all(((k < 1) == (w > 0)).all() for k in keys)


@pytest.mark.parametrize("features", [60, 33])
def test_a_pair_trains_the_same_at_any_position_among_the_pairs(features):
    """A pair's numbers must not depend on where its parameters and samples sit in a step's
    batch (a batched product may round otherwise for an operand at another alignment: MKL on
    AVX-512 did for one-sample steps), so each pair, alone or at any position, ends the same."""
    model = fl.logistic_regression(features, 10)
    g = torch.Generator().manual_seed(0)
    sizes = torch.tensor([13, 11, 13, 5, 1, 13, 9, 13, 3])  # 13 = 3 x 4 + 1: a step of one sample
    x, y = torch.randn(len(sizes), 13, features, generator=g), torch.randint(0, 10, (len(sizes), 13), generator=g)
    w = (torch.arange(13) < sizes[:, None]).float()
    theta = model.init(len(sizes), torch.Generator().manual_seed(2))
    seeds = list(range(len(sizes)))
    together = local_train(model, theta, x, y, w, epochs=2, batch_size=4, lr=0.1, seeds=seeds)
    for i in range(len(sizes)):
        one = local_train(model, theta[i:i + 1], x[i:i + 1], y[i:i + 1], w[i:i + 1], epochs=2, batch_size=4, lr=0.1,
                          seeds=seeds[i:i + 1])
        assert torch.equal(one, together[i:i + 1])


def test_a_run_that_diverges_is_returned_as_its_error_and_the_others_go_on(uneven):
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=4, seed=0)
    runs = lambda: [(F.FedAvg(2, server_lr=1.0), config), (F.FedAvg(2, server_lr=1.0),
                                                         fl.FederatedConfig(rounds=4, seed=0, lr=1e38)),
                    (F.MosT(2, server_lr=3.0, warmup=None), config)]
    with pytest.raises(ValueError, match="diverged"):
        fl.run_batch(uneven, model, runs())
    results = fl.run_batch(uneven, model, runs(), errors="return")
    assert isinstance(results[1], ValueError) and "diverged" in str(results[1])
    assert _same(results[0], fl.run_federated(uneven, model, *runs()[0]))
    assert _same(results[2], fl.run_federated(uneven, model, *runs()[2]))
    with pytest.raises(ValueError, match="errors"):
        fl.run_batch(uneven, model, runs(), errors="ignore")



@pytest.mark.parametrize("method", [F.FedAvg(2, server_lr=1e30), F.FedEM(2, server_lr=1e30)], ids=["FedAvg", "FedEM"])
def test_a_run_that_diverges_in_its_last_round_is_named_so_and_the_others_keep_their_results(uneven, method):
    """The last round's models are checked by the final evaluation, not by a plan: its error
    still says that training diverged, and under errors="return" it is that run's entry alone."""
    model, config = fl.logistic_regression(60, 10), fl.FederatedConfig(rounds=1, seed=0)
    healthy = (F.FedAvg(2), config)
    bad = (method, fl.FederatedConfig(rounds=1, seed=0, lr=1e30))
    with pytest.raises(ValueError, match=r"^After the last round \(1\), the training loss of client \S+ on model \d "
                                         r"is (nan|inf): training diverged"):
        fl.run_federated(uneven, model, *bad)
    results = fl.run_batch(uneven, model, [healthy, bad], errors="return")
    assert isinstance(results[1], ValueError) and "training diverged" in str(results[1])
    assert _same(results[0], fl.run_federated(uneven, model, *healthy))

def test_a_stopped_batch_continues_each_run_from_its_own_checkpoint(uneven, tmp_path):
    model = fl.logistic_regression(60, 10)
    runs = lambda: [(F.MosT(3, server_lr=eta, warmup=F.WarmUp(2)), fl.FederatedConfig(rounds=6, seed=s)) for s in (0, 1) for eta in (1., 3.)]
    whole = fl.run_batch(uneven, model, runs())

    def checkpoints(every):
        return [Checkpoint(tmp_path / f"run{r}", every=e) for r, e in enumerate(every)]

    def stop(r, log, params):
        if log.round == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # saved at different rounds: 2, 3, 3 and none
        fl.run_batch(uneven, model, runs(), checkpoints=checkpoints([2, 1, 1, 100]), callback=stop)
    resumed = fl.run_batch(uneven, model, runs(), checkpoints=checkpoints([2, 1, 1, 100]))
    assert all(_same(a, b) for a, b in zip(whole, resumed))


def test_runs_may_share_one_method_object_which_holds_no_run_state(uneven):
    # a method is configuration: two runs of one MosT object (with a grouped warm-up, CFL's
    # clusters and FedEM's weights alike) end as two runs of two equal objects, and as each run alone
    model = fl.logistic_regression(60, 10)
    for make in (lambda: F.MosT(3, warmup=F.GroupedWarmUp(2)), lambda: F.CFL(3, eps1=10.0, eps2=0.01, min_rounds=2),
                 lambda: F.FedEM(2)):
        method = make()
        configs = [fl.FederatedConfig(rounds=4, seed=s) for s in (0, 1)]
        shared = fl.run_batch(uneven, model, [(method, c) for c in configs])
        apart = fl.run_batch(uneven, model, [(make(), c) for c in configs])
        alone = fl.run_federated(uneven, model, method, configs[1])
        assert all(_same(a, b) for a, b in zip(shared, apart)) and _same(shared[1], alone)
        assert method == make()  # the runs left the configuration as it was


def test_bad_batches_are_refused_saying_how_to_fix_them(uneven):
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=3)
    with pytest.raises(ValueError, match="empty"):
        fl.run_batch(uneven, model, [])
    with pytest.raises(TypeError, match="wrap it in a list"):
        fl.run_batch(uneven, model, (F.FedAvg(2), config))
    with pytest.raises(ValueError, match=r"differs from run 0 in rounds.*batch_groups"):
        fl.run_batch(uneven, model, [(F.FedAvg(2), config), (F.FedAvg(2), fl.FederatedConfig(rounds=4))])
    with pytest.raises(TypeError, match="not a dict"):  # each run's own checks come first
        fl.run_batch(uneven, model, [(F.FedAvg(2), config), (F.FedAvg(2), {"rounds": 3})])
    with pytest.raises(ValueError, match="one Checkpoint"):
        fl.run_batch(uneven, model, [(F.FedAvg(2), config)], checkpoints=[None, None])
    one_file = [Checkpoint("same.ckpt"), Checkpoint("./same.ckpt")]  # each run saves its own state
    with pytest.raises(ValueError, match=r"`checkpoints` 0 and 1 are the same file"):
        fl.run_batch(uneven, model, [(F.FedAvg(2), config), (F.FedAvg(2), fl.FederatedConfig(rounds=3, seed=1))],
                     checkpoints=one_file)
    runs = [(F.FedAvg(2), config), (F.FedAvg(2), fl.FederatedConfig(rounds=4)), (F.FedAvg(2), config),
            (F.FedAvg(2), fl.FederatedConfig(rounds=3, batch_size=5, seed=3))]
    assert fl.batch_groups(runs) == [[0, 2], [1], [3]]
