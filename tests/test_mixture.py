"""A mixture of exact linear generators found without labels (``components=K``): K = 1 is the
one-generator model, each component's one step is its multi-step solver, its generator passes
the Linearizer property suite, inversion picks the likely component, and runs on unlabelled
data (a folder of colour images) train, sample and invert from the command line."""

import copy
import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow import solvers
from linearizer.flow.build import build_flow
from linearizer.flow.components import find_components, kmeans_components, shares
from linearizer.flow.mixture import MixtureFlow
from linearizer.flow.spec import SamplerSpec
from linearizer.flow.task import FlowTask, load_flow_run, load_images
from linearizer.testing import LinearizerTests
from linearizer.training.config import resolve
from linearizer.training.trainer import train

F64 = torch.float64
K = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mix") / "run"
    train(FlowTask(), resolve("flow", "smoke", ["progress=false", f"components={K}"]), folder)
    return folder


@pytest.fixture(scope="module")
def model(run):
    """Float64, with the component embeddings moved apart: a few smoke steps leave them near
    their zero init, which would make every component the same generator."""
    model = copy.deepcopy(load_flow_run(run)[0]).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.op.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=F64))
        model.op.u_class.weight.mul_(40)
    return model


def db(a, b):
    err = float((a - b).abs().max())
    return math.inf if err == 0 else 20 * math.log10(float(a.abs().max()) / err)


def test_one_component_is_the_one_generator_model():
    base = resolve("flow", "smoke")
    torch.manual_seed(0)
    one = build_flow(base)
    torch.manual_seed(0)
    same = build_flow(resolve("flow", "smoke", ["components=1"]))
    assert type(same) is type(one) and same.components == 1
    assert one.state_dict().keys() == same.state_dict().keys()
    assert all(torch.equal(v, same.state_dict()[k]) for k, v in one.state_dict().items())


def test_a_run_learns_components_and_their_weights(run, model):
    assert isinstance(model, MixtureFlow) and model.components == K and not model.labelled
    assert model.classes == 0  # no classes: --guidance and the class swap do not apply
    weights = model.mixture_weights
    assert math.isclose(float(weights.sum()), 1.0, rel_tol=1e-12) and bool((weights > 0).all())
    cfg = load_flow_run(run)[1]
    parts = find_components(load_images(cfg)[0], K, "pixels", cfg.seed)
    assert torch.equal(shares(parts, K), weights.cpu().double())


def test_kmeans_finds_separated_clusters_and_is_seeded():
    gen = torch.Generator().manual_seed(1)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = torch.cat([c + 0.1 * torch.randn(50, 2, generator=gen) for c in centres])
    parts = kmeans_components(x, 3, seed=0)
    for i in range(3):  # each true cluster is one found cluster
        assert len(parts[i * 50 : (i + 1) * 50].unique()) == 1
    assert len(parts.unique()) == 3
    assert torch.equal(parts, kmeans_components(x, 3, seed=0))
    with pytest.raises(LinearizerError, match="components must lie"):
        kmeans_components(x, 1, seed=0)


@pytest.mark.parametrize("k", range(K))
def test_one_step_equals_multi_step_per_component(model, k):
    spec = SamplerSpec(steps=30, component=k)
    x0 = torch.randn(4, *model.image_shape, dtype=F64, generator=torch.Generator().manual_seed(k))
    one = model.sample(x0, spec)
    multi = model.sample(x0, spec, one_step=False)
    assert db(one, multi) >= 120


def test_components_are_different_generators_and_the_mixture_routes_rows(model):
    spec = SamplerSpec(steps=20)
    x0 = torch.randn(6, *model.image_shape, dtype=F64)
    per = [model.sample(x0, spec.replace(component=k)) for k in range(K)]
    assert db(per[0], per[1]) < 60
    labels = torch.tensor([0, 2, 1, 0, 2, 1])
    mixed = model.sample(x0, spec, labels=labels)
    for k in range(K):
        rows = labels == k
        # the same matrix product on fewer rows: equal up to float64 GEMM rounding
        assert db(per[k][rows], mixed[rows]) >= 240


def test_without_a_b_at_hand_the_mixture_runs_one_batched_solver(model, monkeypatch, tmp_path):
    """one_step=None: the components without a built B go through one solver pass together,
    which builds no B and draws B's images to rounding; a component whose B is at hand uses it."""
    monkeypatch.setenv("LINEARIZER_CACHE", str(tmp_path))
    model = copy.deepcopy(model)  # no B built yet in this copy's memory
    spec = SamplerSpec(steps=20)
    x0 = torch.randn(8, *model.image_shape, dtype=F64, generator=torch.Generator().manual_seed(6))
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0])
    solved: list[int] = []
    each = solvers.integrate_each
    monkeypatch.setattr(
        solvers,
        "integrate_each",
        lambda ops, zs, **kw: solved.append(len(ops)) or each(ops, zs, **kw),
    )
    auto = model.sample(x0, spec, labels=labels, one_step=None)
    assert solved == [K] and not list(tmp_path.glob("*.safetensors"))
    assert not any(model.is_cached(spec.replace(component=k)) for k in range(K))
    model.one_step_matrix(spec.replace(component=1))
    again = model.sample(x0, spec, labels=labels, one_step=None)
    assert solved == [K, K - 1] and model.is_cached(spec.replace(component=1))
    through_b = model.sample(x0, spec, labels=labels)
    assert db(auto, through_b) >= 200 and db(again, through_b) >= 200


def test_sample_builds_b_only_for_components_that_draw_many(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINEARIZER_CACHE", str(tmp_path / "cache"))
    dim = load_flow_run(run)[0].dim

    def sample(n, *flags):
        assert main(["sample", str(run), "--n", str(n), "--out", str(tmp_path / "s"), *flags]) == 0
        return capsys.readouterr().out, len(list((tmp_path / "cache").glob("*.safetensors")))

    out, stored = sample(K)
    assert "multi-step: no B at hand" in out and stored == 0
    out, stored = sample(K * dim)  # every component draws far more than dim / 4
    assert ", one-step," in out and stored == K
    out, _ = sample(K)
    assert ", one-step," in out  # the stored B's are at hand now


def test_inversion_picks_the_component_that_drew_the_image(model):
    # components far apart, so that the image of one is unlikely under the others
    model = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for emb in (model.op.u_class, model.op.v_class):
            emb.weight.normal_(0, 10, generator=gen)
    spec = SamplerSpec(steps=20, final="skip")
    hits = 0
    for k in range(K):
        x1 = model.sample(
            torch.randn(4, *model.image_shape, dtype=F64, generator=gen), spec, component=k
        )
        found, scores = model.likeliest(x1, spec)
        assert scores.shape == (4, K) and bool(torch.isfinite(scores).all())
        hits += int((found == k).sum())
    assert hits == 4 * K


def test_guidance_and_out_of_range_components_are_refused(model):
    with pytest.raises(LinearizerError, match="no null class"):
        model.one_step_matrix(SamplerSpec(steps=10, component=0, guidance=1.0))
    with pytest.raises(LinearizerError, match="out of range"):
        model.one_step_matrix(SamplerSpec(steps=10, component=K))
    with pytest.raises(LinearizerError, match="give one component"):
        model.one_step_matrix(SamplerSpec(steps=10))
    with pytest.raises(LinearizerError, match="exclude each other"):
        resolve("flow", "smoke", ["components=3", "conditional=true"])
    with pytest.raises(LinearizerError, match="init_from"):
        resolve("flow", "smoke", ["components=3", "component_features=latent"])


def test_a_one_generator_model_loads_into_a_mixture_as_equal_components():
    torch.manual_seed(0)
    one = build_flow(resolve("flow", "smoke")).double()
    mix = build_flow(resolve("flow", "smoke", [f"components={K}"])).double()
    mix.load_state_dict(one.state_dict())
    b = one.one_step_matrix(SamplerSpec(steps=10))
    for k in range(K):
        assert torch.equal(mix.one_step_matrix(SamplerSpec(steps=10, component=k)), b)


def test_the_cached_b_follows_the_weights_and_the_spec(model):
    spec = SamplerSpec(steps=10, component=1)
    first = model.one_step_matrix(spec)
    other = model.one_step_matrix(spec.replace(component=2))
    assert not torch.equal(first, other)
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.op.v_class.weight[1].add_(0.5)
    assert not torch.equal(moved.one_step_matrix(spec), first)
    assert torch.equal(copy.deepcopy(model).one_step_matrix(spec), first)


class TestComponentGenerator(LinearizerTests):
    """The property suite on one component's generator g_data^-1(B_k g_noise(.))."""

    rtol = 1e-8

    @pytest.fixture(autouse=True)
    def _model(self, model):
        self.flow = model

    def build(self):
        f = self.flow.generator(SamplerSpec(steps=20, final="skip", component=2))
        return f.g_x, f.A, f.g_y

    def sample_x(self, n):
        return torch.randn(n, *self.flow.image_shape, dtype=F64)


def _write_photos(folder, n=12, size=12):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        base = np.zeros((size, size, 3)) + (rng.random(3) if i % 2 else 0.2)
        arr = (255 * np.clip(base + 0.2 * rng.random((size, size, 3)), 0, 1)).astype(np.uint8)
        Image.fromarray(arr).save(folder / f"photo{i}.png")


def test_an_unlabelled_colour_folder_trains_samples_and_inverts_a_mixture(tmp_path, capsys):
    _write_photos(tmp_path / "photos")
    out = tmp_path / "run"
    settings = [
        f"data.dataset=folder:{tmp_path / 'photos'}",
        "components=2",
        "max_steps=3",
        "progress=false",
    ]
    train(FlowTask(), resolve("flow", "smoke", settings), out)
    model = load_flow_run(out)[0]
    assert model.image_shape == (3, 8, 8) and model.components == 2
    assert main(["sample", str(out), "--n", "4", "--out", str(tmp_path / "s")]) == 0
    meta = json.loads((tmp_path / "s" / "samples.json").read_text())
    assert len(meta["labels"]) == 4 and set(meta["labels"]) <= {0, 1}
    images = np.stack(
        [np.asarray(Image.open(tmp_path / "photos" / f"photo{i}.png")) for i in (0, 1)]
    )
    x = torch.from_numpy(images[:, 2:10, 2:10].transpose(0, 3, 1, 2) / 255.0).float()
    np.save(tmp_path / "x.npy", x.numpy())
    args = ["invert", str(out), "--images", str(tmp_path / "x.npy"), "--out", str(tmp_path / "i")]
    assert main(args) == 0
    record = json.loads((tmp_path / "i" / "inversion.json").read_text())
    assert len(record["components"]) == 2 and record["chosen_by"].startswith("most likely")
    assert "components (most likely" in capsys.readouterr().out


def test_an_evaluation_of_a_mixture_is_the_same_twice(model):
    # components drawn from the evaluation's seed, not torch's global generator
    from linearizer.flow.evaluate import EvalOptions, evaluate_flow

    reference = torch.rand(40, *model.image_shape, generator=torch.Generator().manual_seed(5))
    opts = EvalOptions(n=24, batch=8, references=False)
    runs = []
    for state in (1, 2):
        torch.manual_seed(state)  # a different global state each time
        runs.append(evaluate_flow(model, reference, opts=opts)[0]["rows"])
    for a, b in zip(*runs, strict=True):
        assert a["fid_lenet"] == b["fid_lenet"] and a["class_histogram"] == b["class_histogram"]


def test_an_evaluation_draws_components_from_the_mixture_weights(model):
    from linearizer.flow.evaluate import EvalOptions, _components

    skewed = copy.deepcopy(model)
    weights = torch.tensor([0.8, 0.15, 0.05], dtype=F64)
    skewed.mixture_weights.copy_(weights)
    labels = _components(skewed, EvalOptions(n=4000))
    share = torch.bincount(labels, minlength=K).double() / len(labels)
    assert (share - weights).abs().max() < 0.03  # 3 standard errors at n = 4000 is 0.019
