"""Exports of a trained run to the runtimes its users deploy with, each checked in that runtime.

One module per format, each declaring an :class:`~speechtrain.export.job.ExportFormat` that
:mod:`speechtrain.export.formats` collects: ``piper`` (a VITS voice for ``piper-tts``), ``onnx`` (vocoders,
the classifier; the NSF vocoder with OpenUtau's ``vocoder.yaml``), ``jik876`` (a HiFi-GAN generator in
jik876/hifi-gan's layout) and ``coqui`` (an XTTS fine-tune as a Coqui folder). The recipe
:mod:`speechtrain.recipes.export` loads the run and hands an :class:`~speechtrain.export.job.ExportJob` to
the format. onnx, onnxruntime and piper-tts are the ``export`` extra, imported only when used.
"""
