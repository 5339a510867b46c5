"""Same start, K optimizer steps: HiFi-GAN against jik876's train.py step, each side with its own step code.

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
        head = f"| {self.peer} seed {self.seed}, step | lr | " + " | ".join(f"{t} ours / theirs" for t in terms)
        lines = [head + " | largest rel. diff |", "| --- " * (len(terms) + 3) + "|"]
        for s, lr, rel in zip(self.steps, self.lr, self.relative(), strict=True):
            cells = " | ".join(f"{s.ours[t]:.5f} / {s.theirs[t]:.5f}" for t in terms)
            lines.append(f"| {s.step} | {lr['theirs']:.4g} | {cells} | {rel:.1e} |")
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
