"""Same start, K optimizer steps: HiFi-GAN against jik876's train.py step (:func:`hifigan_steps`) and VITS
against Piper's ``training_step`` (:func:`vits_steps`, loss terms only; see its docstring), each side with its own
step code.

Both sides begin from jik876's initial weights (their modules built after ``torch.manual_seed(seed)``, copied into
ours through :func:`speechtrain.models.hifigan.importers.import_jik876`) and take ``steps`` optimizer steps over
one sequence of batches: the corpus's first utterances but the held-out ones, shuffled once per epoch and cropped
at random samples (their ``MelDataset``'s way) by one generator seeded with ``seed``, each batch's mel made by their
``mel_spectrogram`` (the generator's input on both sides), ``torch.manual_seed(seed + step)`` before each side's
step. Theirs: their ``train.py``'s step line for line (their AdamW pair at lr 2e-4, betas 0.8/0.99, their
``ExponentialLR`` x0.999 stepped after each epoch). Ours: speechtrain's :class:`~speechtrain.train.step.StepRunner`
over the task's ``disc`` and ``gen`` stages, with the optimizers and schedule the recipe layer builds from the peer
definition's config (``optim.scheduler=exponential``, ``scheduler_interval=epoch``), stepped after the same epochs.

Per step each loss term of both sides (each as it was computed in that step, at that step's weights) and their
difference; at the end the largest relative difference of the final weights, module by module, and both sides'
resynthesis of the held-out recordings (each generator from the same mel, eval mode; theirs with weight norm
removed as their ``inference.py``) scored by one scorer, speechtrain's :func:`~speechtrain.recipes.score.score_audio`
(``speechtrain score --kind vocoder``: MCD, PESQ, STOI, ...), never by either side's own loss definition.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from same_start import HIFIGAN_TERMS, StepOne, _hifigan_config, _our_hifigan, _their_hifigan

HELD_OUT = 2  #: the corpus's last utterances, never trained on: the scorer's items


@dataclass
class Trajectory:
    """Both sides' loss terms at every step from the same start, their learning rates, the final weights' largest
    relative difference per module and the held-out resynthesis scored by one scorer (side -> metric -> mean)."""

    peer: str
    seed: int
    epoch_steps: int
    steps: list[StepOne] = field(default_factory=list)
    lr: list[dict[str, float]] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    quality: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def relative(self) -> list[float]:
        """Per step, the largest relative difference of a term (|ours - theirs| / |theirs|)."""
        return [max(d / max(abs(s.theirs[k]), 1e-12) for k, d in s.differences().items()) for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "relative": self.relative()}

    def markdown(self) -> str:
        terms = list(self.steps[0].theirs)
        head = f"| {self.peer} seed {self.seed}, step | lr (ours / theirs where they differ) | " + " | ".join(
            f"{t} ours / theirs" for t in terms
        )
        lines = [head + " | largest rel. diff |", "| --- " * (len(terms) + 3) + "|"]
        for s, lr, rel in zip(self.steps, self.lr, self.relative(), strict=True):
            cells = " | ".join(f"{s.ours[t]:.5f} / {s.theirs[t]:.5f}" for t in terms)
            rate = f"{lr['theirs']:.6g}" if lr["ours"] == lr["theirs"] else f"{lr['ours']:.6g} / {lr['theirs']:.6g}"
            lines.append(f"| {s.step} | {rate} | {cells} | {rel:.1e} |")
        lines.append("")
        lines.append(
            "final weights, largest relative difference: " + ", ".join(f"{k} {v:.1e}" for k, v in self.weights.items())
        )
        if self.quality:
            metrics = [m for m in self.quality["ours"] if m != "items"]
            lines += ["", "| held-out resynthesis (one scorer) | " + " | ".join(metrics) + " |"]
            lines.append("| --- " * (len(metrics) + 1) + "|")
            for side, row in self.quality.items():
                lines.append(f"| {side} | " + " | ".join(_show(row.get(m)) for m in metrics) + " |")
        return "\n".join(lines)


def _show(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _utterances(corpus: Path) -> list[Path]:
    return sorted((corpus / "wavs").glob("*.wav"))


def crop_batches(corpus: Path, steps: int, seed: int, batch: int, segment: int) -> tuple[list[torch.Tensor], int]:
    """``steps`` batches (B, 1, segment) of the training utterances (all but the last :data:`HELD_OUT`), each epoch
    a new order, each crop at a random sample (zero-padded when shorter, as their ``MelDataset``), and the number of
    steps in an epoch."""
    from speechtrain.bench.peers import read_wav

    audio = [torch.from_numpy(read_wav(p)[0]) for p in _utterances(corpus)[:-HELD_OUT]]
    per_epoch = len(audio) // batch
    if per_epoch < 1:
        raise ValueError(f"{corpus}: {len(audio)} training utterances, fewer than one batch of {batch}")
    g = torch.Generator().manual_seed(seed)
    out: list[torch.Tensor] = []
    order = torch.arange(len(audio))
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(audio), generator=g)
        y = torch.zeros(batch, 1, segment)
        for j, i in enumerate(order[(step % per_epoch) * batch :][:batch].tolist()):
            a = audio[i]
            start = int(torch.randint(0, max(1, a.numel() - segment + 1), (1,), generator=g))
            piece = a[start : start + segment]
            y[j, 0, : piece.numel()] = piece
        out.append(y)
    return out, per_epoch


def _their_step(
    models: Any, mel_fn: Any, nets: tuple[Any, Any, Any], opts: tuple[Any, Any], y: Any, x: Any, h: Any
) -> dict[str, float]:
    """Their train.py's step (models.py's losses, their order: D stepped on the detached output, then G)."""
    gen, mpd, msd = nets
    optim_g, optim_d = opts
    y_mel = mel_fn(y.squeeze(1), h.fmax_for_loss)
    y_g_hat = gen(x)
    y_g_hat_mel = mel_fn(y_g_hat.squeeze(1), h.fmax_for_loss)
    optim_d.zero_grad()
    y_df_hat_r, y_df_hat_g, _, _ = mpd(y, y_g_hat.detach())
    loss_disc_f = models.discriminator_loss(y_df_hat_r, y_df_hat_g)[0]
    y_ds_hat_r, y_ds_hat_g, _, _ = msd(y, y_g_hat.detach())
    loss_disc_s = models.discriminator_loss(y_ds_hat_r, y_ds_hat_g)[0]
    loss_disc_all = loss_disc_s + loss_disc_f
    loss_disc_all.backward()
    optim_d.step()
    optim_g.zero_grad()
    loss_mel = torch.nn.functional.l1_loss(y_mel, y_g_hat_mel) * 45
    _, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
    _, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
    loss_fm = models.feature_loss(fmap_f_r, fmap_f_g) + models.feature_loss(fmap_s_r, fmap_s_g)
    loss_adv = models.generator_loss(y_df_hat_g)[0] + models.generator_loss(y_ds_hat_g)[0]
    loss_gen_all = loss_adv + loss_fm + loss_mel
    loss_gen_all.backward()
    optim_g.step()
    return {
        "disc": float(loss_disc_all.detach()),
        "mel_l1": float(loss_mel.detach()) / 45,
        "adv": float(loss_adv.detach()),
        "fm": float(loss_fm.detach()),
        "gen_total": float(loss_gen_all.detach()),
    }


def _our_parts(cfg: Any, task: Any, run_dir: Path) -> Any:
    """The loop parts the Trainer would run for ``task`` (its StepRunner, optimizers and schedules), on the CPU."""
    from speechtrain.accel.apply import apply_accelerations
    from speechtrain.recipes.loop import build_parts

    device = torch.device("cpu")
    accel = apply_accelerations(cfg.accel, task.modules(), device)
    return build_parts(task, train=cfg.train, optim=cfg.optim, device=device, accel=accel, run_dir=run_dir)


def weight_differences(ours: Any, imported_theirs: Any) -> dict[str, float]:
    """Per module, the largest ``||a - b|| / ||b||`` over its parameter tensors (ours against theirs loaded into a
    second task of ours through the importer).

    A norm, not the largest element: Adam's first updates are ``lr * sign(grad)`` for every element whose
    gradient is far above its ``eps``, so an element whose gradient is at float-rounding level (a few percent of
    the wide discriminators' deep layers) moves by +lr on one side and -lr on the other; the element-wise
    maximum is then ~2 lr whatever the agreement elsewhere."""
    out = {}
    for name, module in ours.modules().items():
        theirs = dict(imported_theirs.modules()[name].named_parameters())
        rel = [
            float((p.detach() - theirs[k].detach()).norm() / theirs[k].detach().norm().clamp_min(1e-12))
            for k, p in module.named_parameters()
        ]
        out[name] = max(rel)
    return out


def hifigan_steps(source: Path, corpus: Path, steps: int, seed: int, work: Path, score: bool = True) -> Trajectory:
    """``steps`` optimizer steps of jik876's train.py step and of our HiFi-GAN task from the same start (see the
    module's docstring); ``work`` holds our run folder and the scored audio."""
    import peer_hifigan as ph

    from speechtrain.data.batch import Batch
    from speechtrain.models.hifigan.importers import import_jik876

    models, meldataset, env = _their_hifigan(source)
    h = env.AttrDict(_hifigan_config())
    torch.manual_seed(seed)
    gen, mpd, msd = models.Generator(h), models.MultiPeriodDiscriminator(), models.MultiScaleDiscriminator()
    cfg, task = _our_hifigan()
    import_jik876({"generator": gen.state_dict()}, {"mpd": mpd.state_dict(), "msd": msd.state_dict()}).load_into(task)
    parts = _our_parts(cfg, task, work / "ours_run")
    optim_g = torch.optim.AdamW(gen.parameters(), ph.LR, betas=list(ph.BETAS))  # their train.py's (decay 0.01)
    optim_d = torch.optim.AdamW([*msd.parameters(), *mpd.parameters()], ph.LR, betas=list(ph.BETAS))
    sched = [torch.optim.lr_scheduler.ExponentialLR(o, gamma=ph.LR_DECAY) for o in (optim_g, optim_d)]

    def mel_fn(audio: torch.Tensor, fmax: float | None) -> torch.Tensor:
        return meldataset.mel_spectrogram(
            audio, h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size, h.fmin, fmax
        )

    batches, per_epoch = crop_batches(corpus, steps, seed, ph.BATCH, h.segment_size)
    run = Trajectory("hifigan vs jik876", seed, per_epoch)
    for nets in ((gen, mpd, msd), tuple(task.modules().values())):
        for m in nets:
            m.train()
    for step, y in enumerate(batches):
        x = mel_fn(y.squeeze(1), h.fmax)  # (B, 80, CROP): the generator's input on both sides
        run.lr.append(
            {"ours": parts.optimizers.optimizers["gen"].param_groups[0]["lr"], "theirs": optim_g.param_groups[0]["lr"]}
        )
        torch.manual_seed(seed + step)
        theirs = _their_step(models, mel_fn, (gen, mpd, msd), (optim_g, optim_d), y, x, h)
        frames = torch.full((ph.BATCH,), x.shape[-1])
        tensors = {"audio": y, "mel": x, "audio_lengths": frames * ph.HOP, "mel_lengths": frames}
        torch.manual_seed(seed + step)
        out = parts.runner.run(
            [Batch(tensors, [f"u{i}" for i in range(ph.BATCH)], ph.HOP, 22050)], step, step // per_epoch
        ).out
        ours = {
            "disc": float(out["disc"]),
            "mel_l1": float(out["mel_l1"]),
            "adv": float(out["adv"]),
            "fm": float(cfg.model.fm_weight * out["fm"]),
            "gen_total": float(out["loss"]),
        }
        run.steps.append(StepOne(run.peer, seed, ours, theirs, step=step + 1))
        if (step + 1) % per_epoch == 0:  # an epoch ends: their schedulers and ours
            for s in sched:
                s.step()
            parts.optimizers.step_schedulers("epoch")
    _, again = _our_hifigan()
    import_jik876({"generator": gen.state_dict()}, {"mpd": mpd.state_dict(), "msd": msd.state_dict()}).load_into(again)
    run.weights = weight_differences(task, again)
    if score:
        run.quality = score_held_out(corpus, task, gen, mel_fn, h, work)
    assert set(run.steps[0].theirs) == set(HIFIGAN_TERMS)
    return run


def score_held_out(
    corpus: Path, task: Any, gen: Any, mel_fn: Any, h: Any, work: Path
) -> dict[str, dict[str, float | None]]:
    """Both generators' resynthesis of the held-out recordings from their mel (their ``mel_spectrogram`` at
    ``h.fmax``), scored against the recordings by ``speechtrain score``'s scorer; the recordings' own row is the
    ceiling. Their ``gen`` is put in eval mode with its weight norm removed (their ``inference.py``): train no
    further with it."""
    import soundfile as sf

    from speechtrain.bench.peers import read_wav
    from speechtrain.recipes.score import score_audio

    refs = work / "held_out"
    folders = {side: work / side for side in ("ours", "theirs")}
    for d in (refs, *folders.values()):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    theirs = gen  # the end of its training: folded in place (their weight norm's modules cannot be deep-copied)
    theirs.eval()
    theirs.remove_weight_norm()  # their inference.py
    for path in _utterances(corpus)[-HELD_OUT:]:
        shutil.copy(path, refs / path.name)
        mel = mel_fn(torch.from_numpy(read_wav(path)[0]).unsqueeze(0), h.fmax)  # (1, 80, T)
        with torch.no_grad():
            audio = {"ours": task.vocode(mel)[0], "theirs": theirs(mel).squeeze().numpy()}
        for side, wav in audio.items():
            sf.write(str(folders[side] / path.name), wav.clip(-1, 1), h.sampling_rate, "FLOAT")
    out: dict[str, dict[str, float | None]] = {}
    for side, folder in folders.items():
        result = score_audio(folder, refs, kind="vocoder")
        out[side] = {r.metric: r.model for r in result.rows}
    out["recordings"] = {r.metric: r.recordings for r in result.rows}  # the ceiling, the same for both
    return out


# -- VITS against Piper ------------------------------------------------------------------------------------------


def _piper_step(piper: Any, opts: tuple[Any, Any], batch: Any) -> dict[str, float]:
    """Piper's ``VitsModel.training_step`` without Lightning's logging: both losses from one forward, then G
    stepped, then D (D's loss from its forward on the detached output, before either step)."""
    opt_g, opt_d = opts
    loss_g, loss_d, m = piper._compute_loss(batch)
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    names = {"disc": "disc", "mel_l1": "mel", "kl": "kl", "dur": "dur", "adv": "gen", "fm": "fm"}
    return {**{k: float(m[v]) for k, v in names.items()}, "gen_total": float(loss_g.detach())}


def vits_steps(corpus: Path, steps: int, seed: int, work: Path) -> Trajectory:
    """``steps`` optimizer steps of Piper's ``training_step`` and of our VITS task from Piper's initial weights, at
    the peer definition's optimizer (AdamW lr 2e-4, betas 0.8/0.99, eps 1e-9 for both networks, as the peer row
    sets Piper's discriminator), over one sequence of batches (:func:`crop_batches`' 1.2 s crops, random Piper-style
    phoneme ids per step), ``torch.manual_seed(seed + step)`` before each side's step. Not the same procedure by
    design: ours steps D, then computes G's losses with the updated D (VITS's train.py); Piper computes both from
    one forward and steps G first; Piper's loop never steps its schedulers (constant lr), ours decays x0.999875 per
    epoch. No held-out scoring (a TTS row needs the judge's CER: the time-to-quality runs do that)."""
    import peer_vits as pv
    from piper.train.vits.mel_processing import spectrogram_torch
    from same_start import VITS_TERMS, _our_vits, _piper_model, piper_batch

    from speechtrain.data.batch import Batch
    from speechtrain.models.vits.importers import import_jaywalnut310

    piper = _piper_model(seed, learning_rate_d=pv.LR, betas_d=pv.BETAS, eps=pv.EPS)
    optim = (
        "optim.name=adamw",
        f"optim.lr={pv.LR}",
        f"optim.betas=[{pv.BETAS[0]},{pv.BETAS[1]}]",
        f"optim.eps={pv.EPS}",
        f"optim.weight_decay={pv.WD}",
        "optim.grad_clip=null",
        "optim.scheduler=exponential",
        f"optim.gamma={pv.GAMMA}",
        "optim.scheduler_interval=epoch",
    )
    cfg, task = _our_vits(optim)
    import_jaywalnut310({"model": piper.model_g.state_dict()}, {"model": piper.model_d.state_dict()}).load_into(task)
    parts = _our_parts(cfg, task, work / "ours_run")
    (opt_g, opt_d), _never_stepped = piper.configure_optimizers()
    frames, phonemes = 104, 12
    batches, per_epoch = crop_batches(corpus, steps, seed, pv.BATCH, frames * 256)
    g = torch.Generator().manual_seed(seed)
    run = Trajectory("vits vs piper", seed, per_epoch)
    piper.train()
    task.generator.train()
    task.discriminator.train()
    for step, audio in enumerate(batches):
        ids = torch.zeros(pv.BATCH, 2 * phonemes + 1, dtype=torch.long)
        ids[:, 1::2] = torch.randint(3, pv.SYMBOLS, (pv.BATCH, phonemes), generator=g)
        t = {
            "audio": audio,
            "audio_lengths": torch.full((pv.BATCH,), frames * 256),
            "tokens": ids,
            "token_lengths": torch.full((pv.BATCH,), ids.shape[1]),
        }
        spec = spectrogram_torch(audio.squeeze(1), 1024, 22050, 256, 1024)
        pb = piper_batch(t, spec)
        run.lr.append(
            {"ours": parts.optimizers.optimizers["gen"].param_groups[0]["lr"], "theirs": opt_g.param_groups[0]["lr"]}
        )
        torch.manual_seed(seed + step)
        theirs = _piper_step(piper, (opt_g, opt_d), pb)
        torch.manual_seed(seed + step)
        batch = Batch(t, [f"u{i}" for i in range(pv.BATCH)], 256, 22050)
        out = parts.runner.run([batch], step, step // per_epoch).out
        ours = {k: float(out[k]) for k in ("disc", "mel_l1", "kl", "dur", "adv", "fm")}
        ours["gen_total"] = float(out["loss"])
        run.steps.append(StepOne(run.peer, seed, ours, theirs, step=step + 1))
        if (step + 1) % per_epoch == 0:
            parts.optimizers.step_schedulers("epoch")  # Piper's loop steps none of its schedulers
    _, again = _our_vits(optim)
    import_jaywalnut310({"model": piper.model_g.state_dict()}, {"model": piper.model_d.state_dict()}).load_into(again)
    run.weights = weight_differences(task, again)
    assert set(run.steps[0].theirs) == set(VITS_TERMS)
    return run
