"""HiFi-GAN vocoder (mel -> waveform): generator, period/scale/spectrogram discriminators, GAN losses.

``model.py`` and ``losses.py`` are also the building blocks of the VITS decoder.
"""
