"""NSF-HiFiGAN vocoder (mel + f0 -> waveform): a HiFi-GAN generator driven by a harmonic-plus-noise source.

The layout follows openvpi/SingingVocoders' ``models/nsf_HiFigan`` (parameter names included, so that
their checkpoints import with :mod:`speechtrain.models.nsf_hifigan.importers`); the discriminators and
losses are HiFi-GAN's (:mod:`speechtrain.models.hifigan`).
"""
