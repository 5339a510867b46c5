"""Shared fixtures: one small demo corpus per test session, prepared once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _torch_numerics_restored():  # noqa: ANN202
    """Every test starts with the session's torch threads and matmul precision: a test (or an in-process
    bench row, or a command's --threads) that changes them must not change the sums of the tests after
    it (a tiny GPT-TTS trained after such a change once collapsed to text-blind greedy codes)."""
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if torch.get_float32_matmul_precision() != precision:
        torch.set_float32_matmul_precision(precision)
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        torch.use_deterministic_algorithms(deterministic)


@pytest.fixture
def one_torch_thread():  # noqa: ANN201
    """Tiny models gain nothing from intra-op threads; on a busy shared CPU two spinning threads made a
    tiny step 20-30x slower (measured: 1.0 s vs 22-44 s). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 40-utterance demo corpus (LJSpeech layout, plus classes/<label>/ folders)."""
    from speechtrain.data.demo import make_demo_corpus

    return make_demo_corpus(tmp_path_factory.mktemp("demo") / "corpus", utterances=40, seed=0, labelled=True)


@pytest.fixture(scope="session")
def demo_data(demo_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Overrides that point a config at the demo corpus with a shared feature cache (default features)."""
    cache = tmp_path_factory.mktemp("demo_cache")
    return [f"data.manifest={demo_corpus}", f"data.cache_dir={cache}"]


@pytest.fixture(scope="session")
def singing_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-utterance synthetic singing corpus with its true f0 (``speechtrain make-dataset --singing``)."""
    from speechtrain.data.demo_singing import make_singing_corpus

    return make_singing_corpus(tmp_path_factory.mktemp("singing") / "corpus", utterances=12, seed=0)


@pytest.fixture(scope="session")
def singing_data(singing_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Overrides that point a config at the singing corpus with a shared feature cache."""
    cache = tmp_path_factory.mktemp("singing_cache")
    return [f"data.manifest={singing_corpus}", f"data.cache_dir={cache}"]
