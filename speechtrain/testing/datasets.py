"""Fake datasets for tests and users: the library's synthetic data (:mod:`speechtrain.data.synthetic`)."""

from speechtrain.data.synthetic import FakeSpeechDataset, fake_dataset, ljspeech_like_frames

__all__ = ["FakeSpeechDataset", "fake_dataset", "ljspeech_like_frames"]
