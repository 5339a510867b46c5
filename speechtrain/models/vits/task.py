"""The VITS Task: two optimizer stages (``disc`` then ``gen``), losses as in the paper, inference.

Training step of one micro-batch:

1. the linear spectrogram (posterior encoder input) is computed on the device from ``audio``;
2. the generator runs once (text encoder, posterior encoder, flow, MAS under no_grad, duration
   loss, decoder on a random ``segment_size`` slice per item) and its output is kept in the stage
   cache (:class:`speechtrain.train.gan.GANStages`);
3. ``disc``: multi-period (+ scale) discriminator on the real slice vs the detached output;
4. ``gen``: 45 x L1 log-mel (fp32, real frames only) + KL + duration + adversarial + feature
   matching, with the discriminator frozen. With an empty cache (an OOM split gives fresh caches)
   the generator is run again.

The features are VITS's own (jaywalnut310 ``mel_processing``, Piper's copy): the magnitude epsilon is 1e-6
(:data:`VITS_MAGNITUDE_EPS`; HiFi-GAN's vocoder keeps 1e-9), and the mel loss's target is the utterance's mel
sliced at the decoder's slice (``slice_segments(mel, ids_slice)``), not the mel of the audio slice, whose edge
frames would be padded from inside the slice. ``fm`` is logged with its weight, as VITS's ``feature_loss`` returns
it (x2); ``mel_l1`` stays unweighted (the headline, comparable with the vocoders').
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from speechtrain.config import ConfigError
from speechtrain.data.batch import Batch
from speechtrain.data.features import VITS_MAGNITUDE_EPS, LogMel, Spectrogram
from speechtrain.errors import DataError, UserError
from speechtrain.logs import get_logger
from speechtrain.models.common import count_parameters, remove_weight_norm
from speechtrain.models.hifigan.losses import (
    discriminator_loss,
    feature_matching_loss,
    generator_adversarial_loss,
    mel_l1_loss,
)
from speechtrain.models.hifigan.model import MultiPeriodDiscriminator
from speechtrain.models.vits.model import VITSGenerator, VITSOutput, kl_loss, slice_segments
from speechtrain.train.gan import DISC, GANStages
from speechtrain.train.task import Needs, OptimizerSpec, Task

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.vits.config import VITSConfig

log = get_logger(__name__)


class VITSTask(Task):
    """VITS text-to-speech. Headline: ``mel_l1`` (L1 between log-mels of the real and decoded slices)."""

    headline_metric = "mel_l1"
    headline_mode = "min"
    produces_audio = True
    quality_kind = "tts"
    #: the keywords of ``synthesize`` (speechtrain.capabilities.Synthesizer)
    synthesize_options = ("noise_scale", "noise_scale_w", "length_scale", "speaker", "seed")

    def __init__(self, model_cfg: VITSConfig, data_cfg: DataConfig) -> None:
        from speechtrain.data.text import Tokenizer

        self.cfg = model_cfg
        self.sample_rate = int(data_cfg.sample_rate)
        self.hop_length = int(data_cfg.hop_length)
        self.segment_frames = model_cfg.segment_size // self.hop_length
        self.tokenizer = Tokenizer.from_data(data_cfg)  # the run's symbols (data.symbols)
        if model_cfg.n_vocab is not None and model_cfg.n_vocab < self.tokenizer.vocab_size:
            raise ConfigError(
                f"model.n_vocab={model_cfg.n_vocab} is smaller than the text vocabulary ({self.tokenizer.vocab_size}: "
                f"{len(self.tokenizer.symbols)} symbols + 4 special tokens); leave model.n_vocab unset"
            )
        self.n_vocab = model_cfg.n_vocab or self.tokenizer.vocab_size
        if data_cfg.phonemizer == "piper" and model_cfg.add_blank:
            raise ConfigError(
                "data.phonemizer=piper writes Piper's own blanks (^ _ p1 _ p2 _ ... $), so model.add_blank would add "
                "a second set that Piper does not read: set model.add_blank=false"
            )
        eps = VITS_MAGNITUDE_EPS  # the posterior encoder's input and the mel loss, as VITS computes both
        self.spec_fn = Spectrogram(data_cfg.n_fft, data_cfg.win_length, data_cfg.hop_length, eps)
        self.mel_fn = LogMel.from_config(data_cfg, eps)
        self.generator = VITSGenerator(model_cfg, self.n_vocab, data_cfg.n_fft // 2 + 1, self.segment_frames)
        self.discriminator = MultiPeriodDiscriminator(
            model_cfg.mpd_periods,
            use_spectral_norm=model_cfg.use_spectral_norm,
            include_scale=True,
            width=model_cfg.disc_width,
        )
        self.stages = GANStages(self.modules(), generators=["generator"], discriminators=["discriminator"])
        self.last_inference_info: dict[str, Any] = {}
        self._inference_decoder: tuple[Any, nn.Module, str] | None = None

    # --- Task protocol -------------------------------------------------------------------------
    def needs(self) -> Needs:
        return Needs(text=True, audio=True, mel=False, speakers=self.cfg.n_speakers > 1)

    def modules(self) -> dict[str, nn.Module]:
        return {"generator": self.generator, "discriminator": self.discriminator}

    def optimizer_specs(self) -> list[OptimizerSpec]:
        return self.stages.optimizer_specs()

    def setup(self, train_dataset: Any) -> None:
        from speechtrain.data.text.tokenizer import require_same_symbols

        require_same_symbols(self.tokenizer, train_dataset)
        speakers = list(getattr(train_dataset, "speakers", None) or [])
        if len(speakers) > 1 and self.cfg.n_speakers < len(speakers):
            raise ConfigError(
                f"the training data has {len(speakers)} speakers but model.n_speakers={self.cfg.n_speakers}; "
                f"set model.n_speakers={len(speakers)} (a speaker embedding is used when > 1)"
            )
        if self.cfg.n_speakers > 1 and speakers:
            self.cfg.speakers = [str(s) for s in speakers]  # id order: saved in the run's config.yaml

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        self.stages.check(stage, "vits")
        # the generator runs once per micro-batch (kept for gen); the other network is frozen in each stage
        with self.stages.stage(stage, cache, lambda: self._generate(batch), key="vits") as (out, y, mel_real):
            return self._disc_step(out, y) if stage == DISC else self._gen_step(out, y, mel_real, batch)

    @torch.no_grad()
    def eval_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Reconstruction metrics on fixed-seed slices (comparable between evaluations); ``loss`` is the
        weighted mel + KL + duration part (adversarial terms are not comparable across steps)."""
        devices = [batch["audio"].device] if batch["audio"].device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(0)
            out, _, mel_real = self._generate(batch)
        mel_l1 = self._mel_l1(out, mel_real, batch)
        kl = kl_loss(out.z_p, out.logs_q, out.m_p, out.logs_p, out.y_mask)
        c = self.cfg
        loss = c.c_mel * mel_l1 + c.c_kl * kl + c.c_dur * out.dur_loss.float()
        return {"loss": loss, "mel_l1": mel_l1, "kl": kl, "dur": out.dur_loss.float()}

    @torch.no_grad()
    def eval_audio(self, batch: Batch, max_items: int) -> list[Any]:
        return self._infer_audio(batch, max_items, own_text=False)

    @torch.no_grad()
    def quality_audio(self, batch: Batch, max_items: int) -> list[Any]:
        """Speech for the text of the batch's own items (``model.eval_texts`` have no recording to compare with)."""
        return self._infer_audio(batch, max_items, own_text=True)

    @property
    def samples_are_quality_audio(self) -> bool:
        return not self.cfg.eval_texts

    def _infer_audio(self, batch: Batch, max_items: int, own_text: bool) -> list[Any]:
        texts = None if own_text else self.cfg.eval_texts
        n = min(max_items, batch.size) if not texts else min(max_items, len(texts))
        if n <= 0:
            return []
        device = batch["tokens"].device
        if texts:
            tokens, lengths = self._encode_texts(texts[:n], device)
            speakers = torch.zeros(n, dtype=torch.long, device=device) if self.generator.emb_g is not None else None
        else:
            sub = batch.select(range(n)) if n < batch.size else batch
            tokens, lengths = self._with_blanks(sub["tokens"], sub["token_lengths"])
            speakers = sub.get("speakers")
        was_training = self.generator.training
        self.generator.eval()
        # fixed-seed noise: samples comparable between evaluations, and the training RNG untouched
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(0)
            try:
                audio, frames = self.generator.infer(tokens, lengths, speakers, max_frames=self._max_frames())
            finally:
                self.generator.train(was_training)
        wavs = audio.squeeze(1).float().cpu().numpy()  # host copy
        counts = (frames * self.hop_length).tolist()
        return [w[: int(k)] for w, k in zip(wavs, counts)]

    # --- inference -----------------------------------------------------------------------------
    @torch.no_grad()
    def synthesize(
        self,
        text: str,
        noise_scale: float = 0.667,
        noise_scale_w: float = 0.8,
        length_scale: float = 1.0,
        speaker: int | str | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Waveform (float32, 1-D, ``sample_rate`` Hz) for ``text``. ``speaker``: id of a multi-speaker
        model. Extra keyword ``seed`` fixes the sampling noise. What ran (device, decoder precision,
        compiled or not, timings) is left in ``self.last_inference_info``."""
        unknown = set(kwargs) - {"seed"}
        if unknown:
            raise UserError(f"synthesize: unknown option(s) {sorted(unknown)} for vits (known: seed)")
        if not text or not text.strip():
            raise UserError("synthesize: empty text")
        device = next(self.generator.parameters()).device
        pieces = [(t.to(device), n.to(device)) for t, n in self._runtime_pieces(text)]
        speakers = self._speaker_tensor(speaker, device)
        decoder, precision = self._decoder_for_inference(device)
        if kwargs.get("seed") is not None:
            torch.manual_seed(int(kwargs["seed"]))
        was_training = self.generator.training
        self.generator.eval()
        t0 = time.perf_counter()
        wavs, n_frames = [], 0
        try:
            for tokens, lengths in pieces:  # one sentence at a time where the runtime speaks them apart (Piper)
                audio, frames = self.generator.infer(
                    tokens,
                    lengths,
                    speakers,
                    noise_scale=noise_scale,
                    noise_scale_w=noise_scale_w,
                    length_scale=length_scale,
                    max_frames=self._max_frames(),
                    decoder=decoder,
                )
                n = int(frames[0]) * self.hop_length  # host sync: the sentence's length
                wavs.append(audio[0, 0, :n].float().cpu().numpy())  # host copy (and the sync that ends the timing)
                n_frames += int(frames[0])
        finally:
            self.generator.train(was_training)
        seconds = time.perf_counter() - t0
        wav = np.concatenate(wavs)
        self.last_inference_info = {
            "device": str(device),
            "decoder_precision": precision,
            "decoder_compiled": bool(self.cfg.inference_compile and device.type == "cuda"),
            "weight_norm_folded": True,
            "tokens": sum(int(n[0]) for _, n in pieces),
            "sentences": len(pieces),
            "frames": n_frames,
            "samples": wav.size,
            "audio_seconds": wav.size / self.sample_rate,
            "synthesis_seconds": seconds,
            "rtf": seconds / max(wav.size / self.sample_rate, 1e-9),
        }
        return wav.astype(np.float32)

    def _runtime_pieces(self, text: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``text`` as the exported runtime reads it: for a ``data.phonemizer=piper`` run, one (tokens, lengths) per
        sentence with the phonemes this run never saw dropped, named in a warning (as piper-tts and sherpa-onnx
        read it: the joined text in one pass, and ``<unk>`` there, gave other audio than the deployed voice);
        else the whole text in one pass, its unknown characters read as ``<unk>`` with a warning."""
        tok = self.tokenizer
        if tok.front_end.settings.phonemizer != "piper":
            return [self._encode_texts([text], torch.device("cpu"), warn=True)]
        from speechtrain.data.text.piper_text import runtime_sentences

        sentences, dropped = runtime_sentences(tok.front_end.process(text).symbols, tok.symbols)
        if dropped:
            shown = ", ".join(f"{c!r} x{n}" for c, n in dropped.most_common(12))
            log.warning(
                f"warning: text has {sum(dropped.values())} phoneme(s) this voice never saw, dropped as Piper and "
                f"sherpa-onnx drop them: {shown}"
            )
        out = []
        for sentence in sentences:
            ids = tok.encode_symbols(sentence)
            out.append(self._with_blanks(torch.tensor([ids], dtype=torch.long), torch.tensor([len(ids)])))
        return out

    @property
    def output_sample_rate(self) -> int:
        """Sample rate of ``synthesize``'s audio (the run's ``data.sample_rate``)."""
        return self.sample_rate

    @property
    def text_vocab_size(self) -> int:
        """Text ids the batches carry (speechtrain.capabilities.TextVocabulary): the run's tokenizer's."""
        return int(self.tokenizer.vocab_size)

    def parameter_counts(self) -> dict[str, int]:
        """Parameters of the generator, the discriminator and both (weight norm counted as stored)."""
        gen, disc = count_parameters(self.generator), count_parameters(self.discriminator)
        return {"generator": gen, "discriminator": disc, "total": gen + disc}

    def token_ids(self, text: str) -> list[int]:
        """The ids the generator reads for ``text`` (front end, symbols, blanks when ``model.add_blank``): what an
        exported graph is given (Piper builds the same sequence from its ``phoneme_id_map``)."""
        tokens, lengths = self._encode_texts([text], torch.device("cpu"))
        return [int(i) for i in tokens[0, : int(lengths[0])]]

    def inference_graph(self) -> nn.Module:
        """The generator's inference as a traceable module with Piper's signature
        (:class:`speechtrain.models.vits.graph.VITSInferenceGraph`)."""
        from speechtrain.models.vits.graph import VITSInferenceGraph

        return VITSInferenceGraph(self.generator, self.cfg, self._max_frames())

    # --- internals -----------------------------------------------------------------------------
    def _max_frames(self) -> int:
        return int(60 * self.sample_rate / self.hop_length)  # a minute of audio per utterance at most

    def _encode_texts(
        self, texts: list[str], device: torch.device, warn: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [self.tokenizer.encode(t, warn=warn) or [self.tokenizer.unk_id] for t in texts]
        longest = max(len(i) for i in ids)
        tokens = torch.zeros(len(ids), longest, dtype=torch.long)
        for row, i in enumerate(ids):
            tokens[row, : len(i)] = torch.tensor(i, dtype=torch.long)
        lengths = torch.tensor([len(i) for i in ids], dtype=torch.long)
        return self._with_blanks(tokens.to(device), lengths.to(device))

    def _with_blanks(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """With ``add_blank``: a blank (the pad id) before, between and after the tokens, as VITS does,
        (B, L) -> (B, 2L + 1) and lengths 2n + 1; else unchanged."""
        if not self.cfg.add_blank:
            return tokens, lengths
        out = tokens.new_full((tokens.shape[0], 2 * tokens.shape[1] + 1), self.tokenizer.pad_id)
        out[:, 1::2] = tokens
        return out, 2 * lengths + 1

    def _speaker_tensor(self, speaker: int | str | None, device: torch.device) -> torch.Tensor | None:
        if self.generator.emb_g is None:
            if speaker not in (None, 0, "0"):
                raise UserError(f"synthesize: speaker={speaker!r} given but this model has one speaker")
            return None
        sid = self.speaker_id(speaker)
        return torch.tensor([sid], dtype=torch.long, device=device)

    def speaker_id(self, speaker: int | str | None) -> int:
        """The id of ``speaker``: an id, or a name of the training data (``model.speakers``, kept by training);
        a UserError naming the speakers otherwise."""
        names = list(self.cfg.speakers or [])
        listed = (
            f"its speakers: {', '.join(f'{i}={n}' for i, n in enumerate(names))}"
            if names
            else f"ids 0..{self.cfg.n_speakers - 1} (this run keeps no names)"
        )
        if speaker is None:
            return 0
        if isinstance(speaker, str) and not speaker.lstrip("-").isdigit():
            if speaker not in names:
                raise UserError(f"synthesize: no speaker {speaker!r} in this model; {listed}")
            return names.index(speaker)
        sid = int(speaker)
        if not 0 <= sid < self.cfg.n_speakers:
            raise UserError(f"synthesize: speaker {sid} out of range; {listed}")
        return sid

    def _decoder_for_inference(self, device: torch.device) -> tuple[nn.Module, str]:
        """A copy of the decoder with weight norm folded (same outputs, no norm recomputed per call),
        compiled when asked on CUDA; rebuilt when the weights changed since (training goes on)."""
        precision = self.cfg.inference_precision
        if precision == "auto":  # bf16 where the GPU has it; the CPU keeps fp32 unless asked
            precision = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
        dec = self.generator.dec
        key = (device, tuple(p._version for p in dec.parameters()), self.cfg.inference_compile, precision)
        if self._inference_decoder is None or self._inference_decoder[0] != key:
            folded: nn.Module = self.generator.new_decoder().to(device).eval()
            folded.load_state_dict(dec.state_dict())
            remove_weight_norm(folded)
            if self.cfg.inference_compile and device.type == "cuda":
                folded = cast(nn.Module, torch.compile(folded, dynamic=True))
            if precision == "bf16":  # only the decoder: durations and the flow stay in fp32
                folded = AutocastModule(folded, torch.bfloat16)
            self._inference_decoder = (key, folded, precision)
        return self._inference_decoder[1], precision

    def _spec(self, audio: torch.Tensor) -> torch.Tensor:
        if self.spec_fn.window.device != audio.device:
            self.spec_fn.to(audio.device)
        with torch.autocast(audio.device.type, enabled=False):
            return self.spec_fn(audio.float())  # (B, n_fft // 2 + 1, T_frames), fp32

    def _mel(self, audio: torch.Tensor) -> torch.Tensor:
        if self.mel_fn.fb.device != audio.device:
            self.mel_fn.to(audio.device)
        with torch.autocast(audio.device.type, enabled=False):
            return self.mel_fn(audio.float())  # (B, n_mels, T_frames), fp32

    def _check_alignable(self, batch: Batch) -> None:
        """MAS needs at least one frame per token; checked on host-side lengths (no device sync)."""
        samples, tokens = batch.host_lengths.get("audio_lengths"), batch.host_lengths.get("token_lengths")
        if not samples or not tokens:
            return
        for uid, n, t in zip(batch.ids, samples, tokens):
            frames, t = n // self.hop_length, (2 * t + 1 if self.cfg.add_blank else t)
            if frames < t:
                raise DataError(
                    f"utterance '{uid}': {frames} frames for {t} tokens; monotonic alignment needs at least one "
                    f"frame per token (fix its transcript or audio, drop it, or set model.add_blank=false)"
                )

    def _generate(self, batch: Batch) -> tuple[VITSOutput, torch.Tensor, torch.Tensor]:
        """The generator's output, the real audio slices (B, 1, segment_samples) and the mel loss's target
        (B, n_mels, segment_frames): the utterance's mel at the same slice, as VITS takes it."""
        self._check_alignable(batch)
        audio = batch["audio"]  # (B, 1, T_samples)
        spec = self._spec(audio)  # (B, F, T_frames)
        spec_lengths = batch["audio_lengths"] // self.hop_length
        tokens, token_lengths = self._with_blanks(batch["tokens"], batch["token_lengths"])  # (B, T_tokens)
        out = self.generator(tokens, token_lengths, spec, spec_lengths, batch.get("speakers"))
        y = slice_segments(audio, out.slice_starts * self.hop_length, self.segment_frames * self.hop_length)
        with torch.no_grad(), torch.autocast(audio.device.type, enabled=False):
            mel_real = slice_segments(self.mel_fn.from_magnitude(spec), out.slice_starts, self.segment_frames)
        return out, y, mel_real

    def _mel_l1(self, out: VITSOutput, mel_real: torch.Tensor, batch: Batch) -> torch.Tensor:
        spec_lengths = batch["audio_lengths"] // self.hop_length
        valid = (spec_lengths - out.slice_starts).clamp(0, self.segment_frames)  # real frames in each slice
        return mel_l1_loss(mel_real, self._mel(out.audio_hat), valid)

    def _disc_step(self, out: VITSOutput, y: torch.Tensor) -> dict[str, torch.Tensor]:
        real, fake, _, _ = self.discriminator(y, out.audio_hat.detach())
        loss = discriminator_loss(real, fake)
        return {"loss": loss, "disc": loss.detach()}

    def _gen_step(
        self, out: VITSOutput, y: torch.Tensor, mel_real: torch.Tensor, batch: Batch
    ) -> dict[str, torch.Tensor]:
        mel_l1 = self._mel_l1(out, mel_real, batch)
        kl = kl_loss(out.z_p, out.logs_q, out.m_p, out.logs_p, out.y_mask)
        _, fake, real_maps, fake_maps = self.discriminator(y, out.audio_hat)  # D frozen: gradients reach G only
        adv = generator_adversarial_loss(fake)
        fm = feature_matching_loss(real_maps, fake_maps)
        dur = out.dur_loss.float()
        c = self.cfg
        loss = c.c_mel * mel_l1 + c.c_kl * kl + c.c_dur * dur + c.c_adv * adv + c.c_fm * fm
        return {
            "loss": loss,
            "mel_l1": mel_l1.detach(),
            "kl": kl.detach(),
            "dur": dur.detach(),
            "adv": adv.detach(),
            "fm": (c.c_fm * fm).detach(),  # weighted, as VITS's feature_loss returns it
        }


class AutocastModule(nn.Module):
    """Runs the wrapped module under autocast to ``dtype`` on its input's device, returns fp32."""

    def __init__(self, module: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.module, self.dtype = module, dtype

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        device_type = args[0].device.type if args and isinstance(args[0], torch.Tensor) else "cuda"
        with torch.autocast(device_type, dtype=self.dtype):
            return self.module(*args, **kwargs).float()


def build_task(model: VITSConfig, data: DataConfig) -> VITSTask:
    """Build the VITS task; the decoder's upsampling must equal ``data.hop_length`` and ``segment_size``
    must be a whole number of frames."""
    m, d = model, data
    if math.prod(m.upsample_rates) != d.hop_length:
        raise ConfigError(
            f"model.upsample_rates {m.upsample_rates} multiply to {math.prod(m.upsample_rates)} but data.hop_length "
            f"is {d.hop_length}; the decoder must turn one latent frame into hop_length samples"
        )
    if m.segment_size % d.hop_length:
        raise ConfigError(
            f"model.segment_size={m.segment_size} is not a multiple of data.hop_length={d.hop_length}; "
            f"use e.g. {max(1, round(m.segment_size / d.hop_length)) * d.hop_length}"
        )
    return VITSTask(m, d)
