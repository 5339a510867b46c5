"""GPT-style TTS (XTTS-like): a causal transformer over text tokens then mel-codec audio codes.

``config.GPTTTSConfig`` (no torch), ``codec.MelCodec`` (k-means codebook over mel frames),
``model.GPTTTS`` (the transformer, KV-cache generation), ``task.GPTTTSTask`` (training and
``synthesize``); ``task.build_task(model, data)``.
"""
