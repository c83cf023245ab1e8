import pytest
import torch
from sklearn.linear_model import LogisticRegression

from vitbook.book.ch09_lab import choose_c, fit_logistic


def _data(n=300, features=20, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + 1.5 * torch.randn(n, features, generator=g)
    return x.double(), y


@pytest.mark.parametrize("C", [0.01, 1.0])
def test_fit_logistic_has_scikit_learns_minimiser(C):
    x, y = _data()
    ours = fit_logistic(x, y, C, tol=1e-8)
    reference = LogisticRegression(C=C, tol=1e-10, max_iter=10_000).fit(x, y)
    assert ours.converged and ours.gradient <= 1e-8
    # softmax weights are defined up to a constant per feature: compare centred ones
    w = ours.weight.T - ours.weight.T.mean(0)
    w_ref = torch.tensor(reference.coef_) - torch.tensor(reference.coef_).mean(0)
    assert torch.allclose(w, w_ref, atol=1e-4)
    assert (ours.predict(x).numpy() == reference.predict(x.numpy())).all()


def test_fit_logistic_reports_an_unconverged_fit():
    x, y = _data()
    fit = fit_logistic(x, y, 1.0, max_iter=2)
    assert not fit.converged and fit.iterations <= 2 and fit.gradient > 1e-4


def test_warm_start_needs_fewer_iterations():
    x, y = _data()
    cold = fit_logistic(x, y, 0.1)
    warm = fit_logistic(x, y, 0.1, init=fit_logistic(x, y, 0.1, tol=1e-3))
    assert warm.converged and warm.iterations < cold.iterations


def test_choose_c_picks_the_best_validation_accuracy_smallest_on_ties():
    x, y = _data(n=400)
    best, fits, scores = choose_c(x[:300], y[:300], x[300:], y[300:], (1e-4, 0.1, 10.0))
    assert set(fits) == set(scores) == {1e-4, 0.1, 10.0}
    assert scores[best] == max(scores.values())
    assert best == min(C for C in scores if scores[C] == scores[best])
    assert scores[1e-4] < scores[0.1]  # far too strong a penalty underfits
    with pytest.raises(ValueError):
        fit_logistic(x, y, 0.0)


def test_choose_c_fits_are_the_cold_fits():
    x, y = _data(n=400)
    _, fits, _ = choose_c(x[:300], y[:300], x[300:], y[300:], (1.0, 0.01), tol=1e-8)
    for C, fit in fits.items():
        cold = fit_logistic(x[:300], y[:300], C, tol=1e-8)
        assert torch.allclose(
            fit.weight - fit.weight.mean(1, keepdim=True),
            cold.weight - cold.weight.mean(1, keepdim=True),
            atol=1e-4,
        )
