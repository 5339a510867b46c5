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
