"""The factored one-step matrix B = c I + U V^T against the dense collapse (float64)."""

import pytest
import torch

from linearizer.errors import LinearizerError
from linearizer.flow import factored, solvers
from linearizer.flow.build import build_flow
from linearizer.flow.inversion import condition_number, round_trip
from linearizer.operators.dense import Dense
from linearizer.operators.lora import TimeLoRA
from linearizer.training.config import resolve

F64 = torch.float64
EPS = torch.finfo(F64).eps
D, R = 40, 2
SPEC = 1e-10  # the bound on factored vs dense B (relative, float64)


@pytest.fixture(scope="module")
def op():
    torch.manual_seed(3)
    return TimeLoRA(D, R, emb_dim=8, hidden=16).double()


def rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("method", ["euler", "rk4", "rk4-authors"])
@pytest.mark.parametrize("final", ["skip", "predict"])
@pytest.mark.parametrize("block", [None, 2])
def test_factored_equals_dense(op, method, final, block):
    kw = dict(steps=9, method=method, final=final, block=block)
    fb = factored.collapse_factored(op, **kw)
    dense = solvers.collapse(op, **kw)
    assert rel(fb.to_dense(), dense) <= SPEC
    assert fb.width == solvers.Schedule(op, 9, method, final, F64, block).width()
    assert (fb.c == 0.0) == (final == "predict")


def test_factored_when_the_rank_exceeds_the_dimension(op):
    # 30 steps x 2 stage times x rank 2 > D: more columns than rows is still exact.
    fb = factored.collapse_factored(op, steps=31, method="rk4", final="skip")
    assert fb.width > D
    assert rel(fb.to_dense(), solvers.collapse(op, steps=31, method="rk4", final="skip")) <= SPEC


def test_apply_and_transpose(op):
    fb = factored.collapse_factored(op, steps=12, method="rk4", final="skip")
    dense = fb.to_dense()
    z = torch.randn(5, D, dtype=F64)
    scale = float(z.norm() * torch.linalg.matrix_norm(dense, ord=2))
    tol = 1e3 * EPS * scale
    assert float((fb.apply(z) - z @ dense.T).norm()) <= tol
    assert float((fb.apply_transpose(z) - z @ dense).norm()) <= tol


def test_woodbury_solve_inverts(op):
    fb = factored.collapse_factored(op, steps=12, method="euler", final="skip")
    dense = fb.to_dense()
    z = torch.randn(4, D, dtype=F64)
    x = fb.solve(z)
    cond = torch.linalg.cond(dense).item()
    # Backward-stable bound: the residual relative to |B| |x| is a modest multiple of eps.
    resid = (x @ dense.T - z).norm() / (torch.linalg.matrix_norm(dense, ord=2) * x.norm())
    assert float(resid) <= 1e3 * EPS
    expect = torch.linalg.solve(dense, z.T).T
    assert rel(x, expect) <= 1e3 * EPS * cond


def test_solve_refuses_a_singular_b(op):
    fb = factored.collapse_factored(op, steps=6, final="predict", method="euler")
    with pytest.raises(LinearizerError, match="singular"):
        fb.solve(torch.randn(1, D, dtype=F64))


@pytest.mark.parametrize("final", ["skip", "predict"])
def test_singular_values_and_pinv(op, final):
    fb = factored.collapse_factored(op, steps=6, method="euler", final=final)
    dense = fb.to_dense()
    sv = fb.singular_values()
    ref = torch.linalg.svdvals(dense)
    assert sv.shape == ref.shape
    assert float((sv - ref).abs().max()) <= 1e3 * EPS * float(ref[0])
    pinv = fb.pinv().to_dense()
    expect = torch.linalg.pinv(dense, rtol=1e-10)
    cond = float(ref[0] / ref[ref > 1e-10 * ref[0]][-1])
    assert rel(pinv, expect) <= 1e3 * EPS * cond
    if final == "skip":  # full rank: B^+ B = I
        eye = torch.eye(D, dtype=F64)
        assert float((pinv @ dense - eye).norm()) <= 1e3 * EPS * cond * D**0.5


def test_top_singular_triplets(op):
    fb = factored.collapse_factored(op, steps=8, method="rk4", final="skip")
    dense = fb.to_dense()
    u, s, v = fb.svd(3)
    ref = torch.linalg.svdvals(dense)
    top = float(ref[0])
    assert float((s - ref[:3]).abs().max()) <= 1e3 * EPS * top
    assert float((dense @ v - u * s).abs().max()) <= 1e3 * EPS * top
    eye = torch.eye(3, dtype=F64)
    assert float((u.T @ u - eye).abs().max()) <= 1e3 * EPS
    assert float((v.T @ v - eye).abs().max()) <= 1e3 * EPS
    with pytest.raises(LinearizerError, match="k must be"):
        fb.svd(0)


def test_one_step_chooses_by_size(op):
    assert isinstance(
        factored.one_step(op, steps=6, method="euler", final="skip"), torch.Tensor
    )  # D small: dense
    forced = factored.one_step(op, steps=6, form="factored", method="euler", final="skip")
    assert isinstance(forced, factored.FactoredMatrix)
    assert factored.worth_factoring(12288, 792) and not factored.worth_factoring(12288, 7992)
    assert not factored.worth_factoring(1024, 72)
    with pytest.raises(LinearizerError, match="form"):
        factored.one_step(op, steps=6, form="sparse", method="euler", final="skip")


def test_dense_operator_has_no_factored_form():
    op = Dense(torch.eye(4, dtype=F64) * 0.5)
    with pytest.raises(LinearizerError, match="low-rank"):
        factored.collapse_factored(op, steps=4, method="euler", final="skip")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_flow(resolve("flow", "smoke", []), channels=3).double().eval()
    with torch.no_grad():
        m.train().encode(torch.randn(4, *m.image_shape, dtype=F64), 0.0)
    return m.eval()


def test_model_samples_and_inverts_through_either_form(model):
    x0 = torch.randn(3, *model.image_shape, dtype=F64)
    dense = model.sample(x0, steps=8, form="dense", final="skip")
    fact = model.sample(x0, steps=8, form="factored", final="skip")
    assert rel(fact, dense) <= 1e3 * EPS * model.dim
    # Below MIN_FACTORED_DIM "auto" is the dense B itself (MNIST-size results stay as they were).
    assert model.one_step_operator(steps=8, final="skip") is model.one_step_matrix(
        steps=8, final="skip"
    )
    b = model.one_step_operator(steps=8, form="factored", final="skip")
    assert model.one_step_operator(steps=8, form="factored", final="skip") is b  # cached
    x1 = torch.rand(2, *model.image_shape, dtype=F64)
    bd = model.one_step_matrix(steps=8, final="skip")
    with torch.no_grad():
        _, back = round_trip(model, x1, b)
        _, back_dense = round_trip(model, x1, bd)
    cond = condition_number(b)
    assert cond == pytest.approx(condition_number(bd), rel=1e-8)
    assert rel(back, back_dense) <= 1e3 * EPS * cond


def test_benchmark_quick_smoke(tmp_path):
    """benchmarks/factored.py stays runnable (tiny shapes, no timing asserts)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "factored.py"
    out = tmp_path / "f.json"
    cmd = [sys.executable, str(script), "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert not any("error" in r for r in report["results"])
    residuals = [r["relative_residual"] for r in report["results"] if "relative_residual" in r]
    assert len(residuals) == 2 and max(residuals) <= 1e3 * EPS
