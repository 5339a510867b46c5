"""The GPT-TTS task: codes from the batch's mel on the device, teacher-forced cross-entropies, synthesis.

Losses (XTTS weighting): ``loss = text_loss_weight * text_ce + audio_loss_weight * audio_ce``, each a
mean over the real (unpadded) targets of the micro-batch; ``batch_weight`` counts audio targets so that
accumulated or OOM-split micro-batches average like one large batch. Headline metric: ``audio_ce``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.config import ConfigError
from speechtrain.data.batch import Batch
from speechtrain.data.text import Tokenizer
from speechtrain.errors import DataError, UserError
from speechtrain.models.gpt_tts.codec import MelCodec, max_codes_for_seconds
from speechtrain.models.gpt_tts.model import GPTTTS, IGNORE_INDEX
from speechtrain.train.task import Needs, OptimizerSpec, Task

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.gpt_tts.config import GPTTTSConfig

SYNTHESIZE_OPTIONS = ("vocoder_run", "temperature", "top_k", "max_seconds", "seed", "griffin_lim_iters", "use_cache")


def add_bos_eos(tokens: torch.Tensor, lengths: torch.Tensor, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Wrap padded tokens (B, L) in bos ... eos on the device: (B, L + 2), lengths + 2 (pads stay 0)."""
    b, n = tokens.shape
    out = tokens.new_zeros(b, n + 2)
    out[:, 0] = bos
    out[:, 1 : n + 1] = tokens * (torch.arange(n, device=tokens.device)[None] < lengths[:, None])
    out[torch.arange(b, device=tokens.device), lengths + 1] = eos
    return out, lengths + 2


class GPTTTSTask(Task):
    """Decoder-only TTS over text tokens and mel-codec audio codes (XTTS-like)."""

    headline_metric = "audio_ce"
    headline_mode = "min"
    produces_audio = True
    quality_kind = "tts"
    #: generation uses scaled_dot_product_attention (exact maths); False keeps the explicit softmax path
    inference_sdpa: bool = True
    #: the keywords of ``synthesize`` (speechtrain.capabilities.Synthesizer)
    synthesize_options = SYNTHESIZE_OPTIONS

    def __init__(self, model: Any, data: Any) -> None:
        self.model_cfg, self.data_cfg = model, data
        m = model
        self.tokenizer = Tokenizer.from_data(data)  # the run's symbols (data.symbols) size the text embedding
        self.model = GPTTTS(
            text_vocab=self.tokenizer.vocab_size,
            codebook_size=m.codebook_size,
            layers=m.layers,
            width=m.width,
            heads=m.heads,
            ffn_mult=m.ffn_mult,
            dropout=m.dropout,
            max_text_tokens=m.max_text_tokens,
            max_audio_codes=m.max_audio_codes,
            attention_mask=m.attention_mask,
        )
        self.codec = MelCodec(data.n_mels, m.codebook_size, m.frames_per_code)

    # -- Task protocol ----------------------------------------------------------------------------
    def needs(self) -> Needs:
        return Needs(text=True, mel=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"gpt": self.model, "codec": self.codec}

    def optimizer_specs(self) -> list[OptimizerSpec]:
        return [OptimizerSpec("main", ["gpt"])]  # the codec is fitted once in setup, not trained

    def setup(self, train_dataset: Any) -> None:
        """Fit the codec's codebook (k-means) on a seeded sample of the training mels."""
        from speechtrain.data.text.tokenizer import require_same_symbols

        m = self.model_cfg
        require_same_symbols(self.tokenizer, train_dataset)
        speakers = list(getattr(train_dataset, "speakers", None) or [])
        if len(speakers) > 1 and not m.pool_speakers:
            shown = ", ".join(map(str, speakers[:5])) + (" ..." if len(speakers) > 5 else "")
            raise ConfigError(
                f"the training data has {len(speakers)} speakers ({shown}), and gpt_tts has no speaker conditioning: "
                "it would mix their voices into one without a word. Train on one speaker's utterances (a manifest "
                "of one speaker), set model.pool_speakers=true to mix them on purpose, or use a family that "
                "conditions on speakers (vits with model.n_speakers, xtts with a reference clip)"
            )
        self._check_lengths(train_dataset)
        order = np.random.default_rng(m.codec_seed).permutation(len(train_dataset))
        want = m.codec_sample_frames * m.frames_per_code * 2  # read twice the frames, sample down in fit
        mels, frames = [], 0
        for i in order:
            item = train_dataset[int(i)]
            if "mel" not in item:
                raise UserError("gpt_tts setup needs the dataset's mels (build it with fields including 'mel')")
            mels.append(item["mel"])
            frames += item["mel"].shape[-1]
            if frames >= want:
                break
        self.codec.fit_mels(mels, m.codec_sample_frames, m.codec_iterations, m.codec_seed, self._fit_device())

    def share_setup(self) -> None:
        """Every rank takes rank 0's codebook (speechtrain.capabilities.SharedSetup; the recipes call it on every
        rank after ``setup``): each fits the same seeded k-means, but GPU sums (index_add_) are not
        bit-reproducible, and ranks with different codebooks would learn different codes."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        device = self._fit_device() if dist.get_backend() == "nccl" else torch.device("cpu")
        book = self.codec.codebook.detach().to(device).contiguous()
        dist.broadcast(book, src=0)
        with torch.no_grad():
            self.codec.codebook.copy_(book.to(self.codec.codebook.device))

    def _fit_device(self) -> torch.device:
        # k-means where the modules are: the recipe moves them to the training device before setup (the
        # XTTS-size codebook, 1024 codes over 100k vectors, took 36 s on 2 CPU cores)
        return self.device

    def _check_lengths(self, dataset: Any) -> None:
        m = self.model_cfg
        frames = np.asarray(getattr(dataset, "frames", []))
        if frames.size:
            longest = int(frames.argmax())
            codes = int(frames[longest]) // m.frames_per_code
            if codes > m.max_audio_codes:
                seconds = m.max_audio_codes * m.frames_per_code * dataset.hop_length / dataset.sample_rate
                raise DataError(
                    f"utterance '{dataset.ids[longest]}' has {codes} audio codes, more than model.max_audio_codes="
                    f"{m.max_audio_codes} ({seconds:.1f} s): raise model.max_audio_codes or set "
                    f"data.max_duration <= {seconds:.1f}"
                )

    def batch_weight(self, batch: Batch) -> float:
        fpc = self.model_cfg.frames_per_code
        return float(sum(n // fpc + 1 for n in batch.host_lengths["mel_lengths"]))  # audio targets, host-side

    def _check_batch(self, batch: Batch) -> None:
        m = self.model_cfg
        for i, n in enumerate(batch.host_lengths["token_lengths"]):
            if n + 2 > m.max_text_tokens:
                raise DataError(
                    f"utterance '{batch.ids[i]}' has {n} text tokens (+ bos/eos), more than model.max_text_tokens="
                    f"{m.max_text_tokens}: raise it or lower data.max_duration"
                )
        for i, n in enumerate(batch.host_lengths["mel_lengths"]):
            if n // m.frames_per_code > m.max_audio_codes:
                raise DataError(
                    f"utterance '{batch.ids[i]}' has {n // m.frames_per_code} audio codes, more than "
                    f"model.max_audio_codes={m.max_audio_codes}: raise it or lower data.max_duration"
                )

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        self._check_batch(batch)
        tok = self.tokenizer
        tokens, token_lengths = add_bos_eos(batch["tokens"], batch["token_lengths"], tok.bos_id, tok.eos_id)
        codes = self.codec.encode(batch["mel"])  # (B, T_codes), on the device, no gradient
        code_lengths = self.codec.code_lengths(batch["mel_lengths"])  # (B,)
        out = self.model(tokens, token_lengths, codes, code_lengths)
        text_ce = F.cross_entropy(
            out["text_logits"].float().flatten(0, 1), out["text_targets"].flatten(), ignore_index=IGNORE_INDEX
        )
        audio_logits, audio_targets = out["audio_logits"], out["audio_targets"]  # (B, T+1, V), (B, T+1)
        audio_ce = F.cross_entropy(
            audio_logits.float().flatten(0, 1), audio_targets.flatten(), ignore_index=IGNORE_INDEX
        )
        m = self.model_cfg
        loss = m.text_loss_weight * text_ce + m.audio_loss_weight * audio_ce
        with torch.no_grad():
            valid = audio_targets != IGNORE_INDEX
            correct = (audio_logits.argmax(-1) == audio_targets) & valid
            audio_acc = correct.sum() / valid.sum().clamp_min(1)
        return {"loss": loss, "text_ce": text_ce.detach(), "audio_ce": audio_ce.detach(), "audio_acc": audio_acc}

    # -- inference --------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def output_sample_rate(self) -> int:
        """Sample rate of ``synthesize``'s audio (the run's ``data.sample_rate``)."""
        return int(self.data_cfg.sample_rate)

    @property
    def text_vocab_size(self) -> int:
        """Text ids the batches carry (speechtrain.capabilities.TextVocabulary): the run's tokenizer's."""
        return int(self.tokenizer.vocab_size)

    def _inference_attention(self, device: torch.device) -> None:
        # generation takes scaled_dot_product_attention (exact maths) unless inference_sdpa is off
        if getattr(self, "_sdpa_record", None) is None:
            from speechtrain.accel import apply_sdpa

            self._sdpa_record = apply_sdpa(self.model, self.inference_sdpa, device)

    def _generate_codes(
        self,
        ids: list[int],
        max_codes: int,
        temperature: float,
        top_k: int | None,
        seed: int | None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        device = self.device
        self._inference_attention(device)
        generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
        tokens = torch.tensor([ids], dtype=torch.long, device=device)  # (1, L)
        was_training = self.model.training
        self.model.eval()
        try:
            return self.model.generate(tokens, max_codes, temperature, top_k, generator, use_cache)[0]
        finally:
            self.model.train(was_training)

    def synthesize(
        self,
        text: str,
        vocoder_run: Any = None,
        temperature: float | None = None,
        top_k: int | None = None,
        max_seconds: float = 20.0,
        seed: int | None = None,
        griffin_lim_iters: int | None = None,
        use_cache: bool = True,
        **kwargs: Any,
    ) -> np.ndarray:
        """Audio (1-D float32 at data.sample_rate) for ``text``: generate codes -> decode to mel -> vocoder.

        ``vocoder_run``: a loaded vocoder (an object with ``vocode``; the inference recipe loads a HiFi-GAN
        run directory into one); None: Griffin-Lim.
        ``temperature`` (0: greedy) and ``top_k`` default to model.temperature / model.top_k.
        """
        if kwargs:
            raise UserError(
                f"gpt_tts synthesize does not take {', '.join(sorted(kwargs))}; its options: "
                + ", ".join(SYNTHESIZE_OPTIONS)
            )
        from speechtrain.models.audio import mel_to_audio

        m, d = self.model_cfg, self.data_cfg
        if not max_seconds > 0:
            raise UserError(f"synthesize: max_seconds must be > 0, got {max_seconds}")
        ids = self.tokenizer.encode(text, add_bos_eos=True, warn=True)
        if len(ids) <= 2:
            raise UserError("synthesize: the text is empty after normalisation")
        if len(ids) > m.max_text_tokens:
            raise UserError(
                f"synthesize: text of {len(ids)} tokens exceeds model.max_text_tokens={m.max_text_tokens}; split it"
            )
        max_codes = max_codes_for_seconds(max_seconds, d.sample_rate, d.hop_length, m.frames_per_code)
        codes = self._generate_codes(
            ids,
            max_codes,
            m.temperature if temperature is None else temperature,
            m.top_k if top_k is None else top_k,
            seed,
            use_cache,
        )
        if codes.numel() == 0:
            return np.zeros(0, dtype=np.float32)
        mel = self.codec.decode(codes[None])[0]  # (n_mels, T_frames)
        return mel_to_audio(mel, d, vocoder_run, griffin_lim_iters or m.griffin_lim_iters)

    @torch.no_grad()
    def eval_audio(self, batch: Batch, max_items: int) -> list[Any]:
        """Audio generated from the text of up to ``max_items`` items (seeded, Griffin-Lim)."""
        from speechtrain.models.audio import mel_to_audio

        m, d = self.model_cfg, self.data_cfg
        out = []
        tokens = batch["tokens"]
        for i in range(min(max_items, batch.size)):
            n = batch.host_lengths["token_lengths"][i]
            ids = [self.tokenizer.bos_id, *tokens[i, :n].tolist(), self.tokenizer.eos_id]  # host copy, eval only
            real = batch.host_lengths["mel_lengths"][i] // m.frames_per_code
            codes = self._generate_codes(ids, math.ceil(real * 1.5) + 8, m.temperature, m.top_k, seed=i)
            if codes.numel() == 0:
                out.append(np.zeros(0, dtype=np.float32))
                continue
            out.append(mel_to_audio(self.codec.decode(codes[None])[0], d, None, m.griffin_lim_iters))
        return out

    def parameter_count(self) -> int:
        """Trainable parameters of the transformer."""
        return sum(p.numel() for p in self.model.parameters())


def build_task(model: GPTTTSConfig, data: DataConfig) -> GPTTTSTask:
    """The GPT-TTS task of a ``model.name=gpt_tts`` section and the data section."""
    return GPTTTSTask(model, data)
