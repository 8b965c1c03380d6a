"""The multi-task benchmark (Office-Caltech10): its settings and one short run per feature kind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests._shared import SHARED_DATA
import torch

from most.bench import mtl

DATA = SHARED_DATA / "office_caltech10"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"Office-Caltech10 not found at {DATA} (../shared/data)")


def test_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="features"):
        mtl.MTLConfig(features="pixels")
    with pytest.raises(ValueError, match="Unknown method"):
        mtl.MTLConfig(methods=("MosT", "PMTL"))
    with pytest.raises(ValueError, match="rounds"):
        mtl.MTLConfig(rounds=0)


def test_missing_data_fails_before_any_work(tmp_path):
    with pytest.raises(FileNotFoundError, match="MOST_OFFICE_CALTECH10"):
        mtl.run_benchmark(mtl.MTLConfig(data_path=tmp_path / "nowhere", out=tmp_path / "out", progress=False))
    assert not (tmp_path / "out").exists()


@needs_data
@pytest.mark.parametrize("features", ["surf", "images"])
def test_a_short_run_learns_and_writes_its_table(features, tmp_path):
    config = mtl.MTLConfig(features=features, methods=("MosT", "MGDA"), seeds=(0,), rounds=60, lr=1e-2,
                           batch_size=16, image_size=16, data_path=DATA, out=tmp_path, progress=False)
    results = mtl.run_benchmark(config)
    assert {r["method"] for r in results["runs"]} == {"MosT", "MGDA"}
    for r in results["runs"]:
        assert len(r["per_domain"]) == 4 and r["accuracy"] > 0.2  # 10 classes: chance is 0.1
        assert r["accuracy"] <= r["oracle"] + 1e-12
    most = next(r for r in results["runs"] if r["method"] == "MosT")
    plan = torch.tensor(most["assignment"])
    # n = m = 4 with uniform marginals: the plan is a permutation (each model serves one domain)
    assert sorted(plan.argmax(1).tolist()) == [0, 1, 2, 3]
    assert json.loads((tmp_path / "results.json").read_text())["domains"] == ["amazon", "caltech10", "dslr", "webcam"]
    assert "| MosT |" in (tmp_path / "table.md").read_text() and (tmp_path / "per_domain.png").exists()


def test_the_loading_shows_no_progress_bar_unless_the_config_asks(tmp_path, monkeypatch):
    # `most bench mtl --features efficientnet --quiet` showed the feature cache's bar
    asked = []

    def loaded(*args, **kwargs):
        asked.append(kwargs.get("progress"))
        raise FileNotFoundError("stop before any run")

    monkeypatch.setattr(mtl, "load_office_caltech10", loaded)
    for progress in (False, True):
        with pytest.raises(FileNotFoundError, match="stop"):
            mtl.run_benchmark(mtl.MTLConfig(features="efficientnet", seeds=(0,), data_path=tmp_path,
                                            out=tmp_path / "out", progress=progress))
    assert asked == [False, True]


@needs_data
@pytest.mark.parametrize("progress", [False, True])
def test_the_loader_passes_progress_to_the_feature_cache(monkeypatch, progress):
    import most.backbones
    from most.problems import load_office_caltech10

    asked = []

    def cached(files, **kwargs):  # the features, without the backbone
        asked.append(kwargs.get("progress", True))  # its default: a bar
        return torch.zeros(len(files), 1280)

    monkeypatch.setattr(most.backbones, "cached_features", cached)
    data = load_office_caltech10(DATA, features="efficientnet", domains=("dslr", "webcam"), max_per_domain=10,
                                 progress=progress)
    assert asked == [progress, progress] and data.input_shape == (1280,)


def test_efficientnet_features_are_a_known_kind():
    config = mtl.MTLConfig(features="efficientnet")
    assert config.features in mtl.FEATURES
    with pytest.raises(ValueError, match="'efficientnet'"):
        mtl.MTLConfig(features="efficientnets")


def _quadratics():
    from most import Problem

    centres = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0], [4.0, 4.0]])
    return centres, Problem.from_function(lambda theta: ((theta - centres) ** 2).sum(-1), dim=2, n_objectives=4)


def test_one_shared_model_minimises_the_mean_of_the_losses():
    centres, problem = _quadratics()
    result = mtl.METHODS["Shared"].build(n_models=4, rounds=400, lr=0.1, seed=0).fit(problem)
    assert result.params.shape == (1, 2)
    torch.testing.assert_close(result.params[0], centres.mean(0), atol=1e-2, rtol=0)


def test_separate_models_each_minimise_their_own_loss_alone():
    centres, problem = _quadratics()
    result = mtl.METHODS["Separate"].build(n_models=4, rounds=400, lr=0.1, seed=0).fit(problem)
    torch.testing.assert_close(result.params, centres, atol=1e-2, rtol=0)  # model i at objective i's optimum
    assert torch.equal(result.assignment.argmax(1), torch.arange(4))


@pytest.mark.parametrize("name", ["mtl_surf", "mtl_surf_shared_separate", "mtl_images", "mtl_images_shared_separate",
                                  "mtl_efficientnet"])
def test_a_stored_table_is_what_the_bench_writes_from_its_results_file(name):
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / name
    results = json.loads((folder / "results.json").read_text())
    assert mtl.table_markdown(results) + "\n" == (folder / "table.md").read_text()


def test_an_image_size_beyond_the_machines_memory_is_refused_before_any_work(tmp_path, monkeypatch):
    nowhere = tmp_path / "nowhere"  # reached only after the check: the data's error would name it
    config = mtl.MTLConfig(features="images", image_size=9999, data_path=nowhere, out=tmp_path / "out", progress=False)
    with pytest.raises(ValueError, match=r"`image_size` 9999 \(--image-size\) needs about [0-9.]+ GiB .* more than this "
                                         r"machine's [0-9.]+ GiB; choose a smaller image size"):
        mtl.run_benchmark(config)
    assert not (tmp_path / "out").exists()
    # the estimate grows with the seeds, the batch and the channels; the default fits a small machine
    small = mtl.MTLConfig(features="images", seeds=(0,))
    assert mtl.memory_needed(small) < mtl.memory_needed(mtl.MTLConfig(features="images")) < 2 ** 30
    assert mtl.memory_needed(small) < mtl.memory_needed(mtl.MTLConfig(features="images", seeds=(0,), batch_size=128))
    monkeypatch.setattr(mtl, "_machine_memory", lambda: mtl.memory_needed(small) - 1)
    with pytest.raises(ValueError, match="image_size"):
        mtl.run_benchmark(dataclasses.replace(small, data_path=nowhere, out=tmp_path / "out"))
    monkeypatch.setattr(mtl, "_machine_memory", lambda: 1)  # SURF features hold no images
    with pytest.raises(FileNotFoundError):
        mtl.run_benchmark(mtl.MTLConfig(features="surf", data_path=nowhere, out=tmp_path / "out", progress=False))


def test_an_image_size_the_cnn_cannot_halve_twice_is_refused():
    with pytest.raises(ValueError, match=r"`image_size` must be at least 4 for the CNN"):
        mtl.MTLConfig(features="images", image_size=3)
    mtl.MTLConfig(features="surf", image_size=3)  # not used by the SURF features
    model = mtl.CNN(10, (2, 2, 2))
    assert model(torch.zeros(1, 3, 4, 4)).shape == (1, 10)  # the smallest size it takes


def _runs_results(seconds: list[float]) -> dict:
    runs = [{"method": "MosT", "seed": i, "seconds": s, "accuracy": 0.5, "per_domain": [0.5] * 4, "oracle": 0.6}
            for i, s in enumerate(seconds)]
    return {"domains": ["amazon", "caltech10", "dslr", "webcam"], "runs": runs, "config": {"features": "surf"}}


def test_the_seconds_show_two_decimals_as_in_the_other_suites_tables():
    results = _runs_results([1.2, 0.3])
    assert "| 0.75 |" in mtl.table_markdown({**results, "seconds_decimals": 2})
    assert "| 1 |" in mtl.table_markdown(results)  # results stored before the key: whole seconds, as their tables


def test_the_figure_is_named_by_its_file_name_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert mtl._figures(_runs_results([1.0]), Path("m1")) == ["per_domain.png"]  # a folder relative to the cwd
    assert (tmp_path / "m1" / "per_domain.png").is_file()


@needs_data
def test_surf_runs_are_resumed_on_the_same_data_under_another_path_whatever_the_image_settings(tmp_path):
    (tmp_path / "link").symlink_to(DATA)
    config = mtl.MTLConfig(features="surf", methods=("Shared",), seeds=(0,), rounds=2, data_path=DATA,
                           out=tmp_path / "out", progress=False)
    first = mtl.run_benchmark(config)
    assert first["figures"] == ["per_domain.png"]
    settings = json.loads((tmp_path / "out" / "runs" / "Shared" / "seed0" / "config.json").read_text())["settings"]
    assert "image_size" not in settings and "channels" not in settings and len(settings["data_digest"]) == 16
    assert settings["data_folder"] == str(DATA.resolve())
    again = mtl.run_benchmark(dataclasses.replace(config, data_path=tmp_path / "link", image_size=64, channels=(8, 8, 8)),
                              resume=True)
    assert again["runs"] == first["runs"]  # the stored run, not made again
    # other data under the same path: seed 1's split where seed 0's runs were made
    other = mtl._settings(config, first["torch"], {0: mtl.load_office_caltech10(DATA, seed=1, progress=False)})
    with pytest.raises(ValueError, match=r"other settings: data_digest"):
        mtl.RunStore(tmp_path / "out", other, suite="mtl", folder=mtl._folder, resume=True, paths=mtl._DATA_SETTINGS)
