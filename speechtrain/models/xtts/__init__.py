"""XTTS-v2 (Coqui) fine-tuning: load a Coqui checkpoint folder, extend it to a new language, train its GPT,
export it back in Coqui's layout, synthesize with a reference clip.

``config`` (``XttsConfig``, ``XttsArch``; no torch), ``gpt`` (the GPT with conditioning encoder and perceiver
resampler), ``dvae`` (frozen audio tokenizer), ``hifigan`` (frozen decoder + speaker encoder), ``audio``
(XTTS's mels), ``tokenizer`` (``vocab.json`` BPE + front ends), ``checkpoint`` (Coqui folders: load with
every tensor accounted for, export), ``build`` (random-weights folders of any size), ``codes`` (the DVAE codes
that ``prepare`` caches: the family's derived feature), ``task``
(``XttsTask``; ``build_task(model, data)``).
"""
