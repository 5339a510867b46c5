"""speechtrain side by side with the trainers its users would pick instead, on the same corpus and model.

    python bench/peers/run.py --install                       # once: the peers' packages, in their own venv
    python bench/peers/run.py --repeat 3 --steps 30 --warmup 5 --json peers.json --markdown peers.md --plot peers.png
    speechtrain bench --peers --repeat 3 ...                   # the same, from the command line

Per peer (``--peer xtts|vits|nsf|hifigan``, default: all), three rows in one ladder of interleaved passes
(``speechtrain.bench.ablate.run_ladder``): the peer's own trainer, speechtrain at the peer's exact settings
(model size, batch, precision, optimizer, steps) and speechtrain with the recipe's recommended settings; each
row times ``--steps`` optimizer steps after ``--warmup`` untimed ones, in a fresh process, and reports
audio-seconds per second, peak memory (RSS of the row's process on the CPU) and the mean loss of its last
``--losses-last`` steps. The table (``speechtrain.bench.peers``) gives the ratios "same settings" and
"autopilot" with the range of their per-pass ratios and a verdict ("inconclusive" where the passes allow no
conclusion). For nsf, hifigan and vits every row also writes audio for the same held-out items after its timed steps
(pass r: seed 1234 + r on every row), which the bench scores here with speechtrain.quality: the "quality after equal
audio" column, median and range over the passes, with a verdict against the peer's row.

The peers' packages (coqui-tts with its trainer, piper-tts[train]) are installed by ``--install`` into a venv of
their own (``--env``, default ~/.cache/speechtrain-peers/venv, with this Python's site-packages visible, so the
same torch); speechtrain's own install never pulls them. What a peer needs that this machine lacks (a torchaudio
build) is supplied by ``bench/peers/shims`` and named in the table. SingingVocoders and jik876/hifi-gan are no
packages: their code is read from a git checkout (``--singingvocoders DIR``, ``--jik876 DIR``: a clone or a bare git
dir) into the work folder at bench time.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import REPO, SEED, PeerDefinition, PeerOptions  # noqa: E402

DEFAULT_HOME = Path(os.environ.get("SPEECHTRAIN_PEERS_HOME", Path.home() / ".cache" / "speechtrain-peers"))
#: what --install puts into the peers' venv (pinned: the versions these runners were written against)
PEER_PACKAGES = [
    "coqui-tts==0.28.0",
    "coqui-tts-trainer==0.4.0",
    "piper-tts[train]==1.8.0",
    "pyworld==0.3.5",  # SingingVocoders imports it (its harvest f0); built from source
    "setuptools<81",  # pyworld 0.3.5 imports pkg_resources
    "cython>=3",  # Piper's runner compiles its monotonic_align/core.pyx (the wheel ships no build)
]


PEERS = ("xtts", "vits", "nsf", "hifigan")


def definition(key: str) -> PeerDefinition:
    """The peer's definition (``bench/peers/peer_<key>.py``)."""
    import importlib

    return importlib.import_module(f"peer_{key}").DEFINITION


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer", action="append", choices=list(PEERS), help="which peers (default: all)")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed optimizer steps per row (equal on every row; default 30); with --same-start: optimizer steps "
        "of each side from the same start (default 1: the step-1 losses)",
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--repeat", type=int, default=3, help="passes over the rows, interleaved")
    p.add_argument("--losses-last", type=int, default=10, help="the loss shown: mean over this many last steps")
    p.add_argument("--threads", type=int, default=None, help="torch threads per row (default: usable cores)")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the passes, one more profiled run per row (torch.profiler, not ranked): its top N operators",
    )
    p.add_argument("--max-spread", type=float, default=0.2, help="widest range of a ratio still called a result")
    p.add_argument("--home", type=Path, default=DEFAULT_HOME, help="venv and work files (default %(default)s)")
    p.add_argument("--install", action="store_true", help="install the peers' packages into HOME/venv first")
    p.add_argument("--singingvocoders", type=Path, default=None, help="git dir or clone of openvpi/SingingVocoders")
    p.add_argument("--jik876", type=Path, default=None, help="git dir or clone of jik876/hifi-gan")
    p.add_argument(
        "--piper-source", type=Path, default=None, help="git dir or clone of OHF-Voice/piper1-gpl (its core.pyx)"
    )
    p.add_argument(
        "--language",
        default=None,
        metavar="LANG",
        help="hifigan, vits: train on sentences of LANG spoken by espeak-ng (make-dataset --language's corpus) "
        "instead of the English demo corpus; Piper phonemizes with the same espeak-ng voice",
    )
    p.add_argument(
        "--utterances", type=int, default=None, metavar="N", help="hifigan, vits: the corpus's utterance count"
    )
    p.add_argument(
        "--size",
        choices=("peer", "tiny"),
        default="peer",
        help="vits: the peer's own model size (default) or the tiny recipe's sizes where Piper takes them",
    )
    p.add_argument(
        "--same-start",
        action="store_true",
        help="instead: each side's step-1 losses from the same initial weights (the peer's, through our importers), "
        "batch, phoneme ids and noise, --repeat seeds, for the vits (Piper's installed trainer) and hifigan "
        "(--jik876) peers, in this environment (bench/peers/same_start.py); with --steps K > 1 (hifigan): K steps "
        "of each side's own optimizer step over the same batches, every loss term per step and the held-out "
        "resynthesis scored by one scorer (bench/peers/same_start_steps.py)",
    )
    p.add_argument("--json", default=None, metavar="OUT")
    p.add_argument("--markdown", default=None, metavar="OUT")
    p.add_argument("--plot", default=None, metavar="OUT.png")
    return p.parse_args(argv)


def venv_python(home: Path) -> Path:
    return home / "venv" / "bin" / "python"


def install(home: Path) -> None:
    """The peers' packages into ``home/venv`` (system site-packages visible: the same torch, no second copy)."""
    py = venv_python(home)
    if not py.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(home / "venv")], check=True)
    print(f"installing {' '.join(PEER_PACKAGES)} into {home / 'venv'}", flush=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)


def peer_env() -> dict[str, str]:
    """The peer rows' environment: the shims and this checkout (the torchaudio shim uses speechtrain's mel)."""
    paths = [str(HERE / "shims"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def peer_command(home: Path, runner: str, spec_path: Path, out: str = "OUT.json") -> list[str]:
    return [str(venv_python(home)), str(HERE / runner), str(spec_path), out]


def run_peer_row(home: Path, runner: str, spec: Any) -> Any:
    """Measure a peer row: its runner in the peers' venv, in a fresh process, as ``run_spec`` does ours."""
    from speechtrain.bench.measure import RunFailed, RunResult, last_error_line

    with tempfile.TemporaryDirectory(prefix="speechtrain-peer-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(asdict(spec), default=str))
        proc = subprocess.run(
            peer_command(home, runner, spec_path, str(out_path)), capture_output=True, text=True, env=peer_env()
        )
        if proc.returncode != 0 or not out_path.is_file():
            raise RunFailed(last_error_line(proc.stderr or proc.stdout or "") or f"exit status {proc.returncode}")
        return RunResult.from_raw(json.loads(out_path.read_text()))


def pass_spec(defn: PeerDefinition, spec: Any, key: str, r: int, quality_root: Path | None) -> Any:
    """Pass ``r`` of a row of a scored peer: every row trains with the seed ``SEED + r`` (the peer's own seed
    setting, our ``train.seed``) and writes its audio for the held-out items into ``quality_root/<key>/pass_<r>``.
    A peer without a quality plan keeps its spec as it is."""
    import copy

    from speechtrain.bench.ablate import set_dotted

    if defn.quality is None:
        return spec
    seed = SEED + r
    if spec.kind == "peer":
        raw = defn.seeded(spec.raw, seed)
    else:
        raw = copy.deepcopy(spec.raw)
        set_dotted(raw, "train.seed", seed)
    folder = str(quality_root / key / f"pass_{r}") if quality_root is not None else None
    return replace(spec, raw=raw, quality_dir=folder)


def score_quality(
    defn: PeerDefinition, ctx: dict[str, Any], ours: Any, keys: list[str], repeat: int, root: Path
) -> Any:
    """Score every row's audio of every pass in this environment, with one scorer for all (speechtrain.quality at
    our recipe's mel settings), against the held-out recordings; a pass that left no audio scores None."""
    import functools

    from speechtrain.bench.peers import PeerQuality, score_audio_folder
    from speechtrain.config import build_config
    from speechtrain.data.features import log_mel_numpy

    plan = defn.quality
    assert plan is not None
    items = list(ctx["held_out"])
    references = {i: Path(ctx["corpus"]) / "wavs" / f"{i}.wav" for i in items}
    mel_fn = functools.partial(log_mel_numpy, settings=build_config(ours.raw).data)
    quality = PeerQuality(plan.kind, items, list(plan.metrics), [SEED + r for r in range(repeat)], plan.what)
    for key in keys:
        quality.scores[key] = []
        for r in range(repeat):
            folder = root / key / f"pass_{r}"
            if not any(folder.glob("*.wav")):
                quality.scores[key].append(None)
                continue
            print(f"[{defn.key}] scoring {key} (pass {r + 1}/{repeat})", flush=True)
            report = score_audio_folder(folder, references, plan.kind, mel_fn)
            quality.scores[key].append({"scores": report.scores, "failed": report.failed, "items": report.items})
    return quality


def peer_options(args: argparse.Namespace) -> PeerOptions:
    return PeerOptions(language=args.language, utterances=args.utterances, size=args.size)


def refused_options(chosen: list[str], options: PeerOptions) -> str | None:
    """Why the options asked cannot run with the peers chosen (a peer that does not take one), or None."""
    for key in chosen:
        defn = definition(key)
        left = [name for name in options.asked() if name not in defn.options]
        if left:
            flags = ", ".join(f"--{name}" for name in left)
            takers = [k for k in PEERS if all(n in definition(k).options for n in left)]
            return f"{flags}: the {key} peer does not take it (it trains on its own corpus and size); choose " + (
                f"--peer {' --peer '.join(takers)}" if takers else "no such peer"
            )
    return None


def measure_peer(defn: PeerDefinition, args: argparse.Namespace, recommendation: dict[str, Any]) -> Any:
    """One peer's ladder: its own trainer, ours at its settings, ours with the autopilot."""
    from speechtrain.bench.ablate import Variant, run_ladder
    from speechtrain.bench.measure import RunFailed, RunSpec, run_spec
    from speechtrain.bench.peers import AUTO, PEER, SAME, PeerRun
    from speechtrain.progress import Progress
    from speechtrain.recipes.bench import usable_cores

    work = args.home / "work" / defn.key
    work.mkdir(parents=True, exist_ok=True)
    threads = args.threads or usable_cores()
    common = {"steps": args.steps, "warmup": args.warmup, "threads": threads, "record_losses": args.losses_last}
    variants = [
        Variant(PEER, defn.peer_label, kind="peer"),
        Variant(SAME, "speechtrain, the peer's settings"),
        Variant(AUTO, "speechtrain, the recipe's settings (autopilot)"),
    ]
    why_not = defn.needs()
    ctx: dict[str, Any] | None = None
    quality_root = work / "quality"
    if quality_root.exists():  # an earlier run's audio is never scored as this run's
        shutil.rmtree(quality_root)
    if why_not:  # without the peer there is nothing to compare with: no row runs
        for v in variants:
            v.skip_reason = why_not
        specs: list[Any] = [None, None, None]
    else:
        ctx = defn.prepare(work, peer_options(args))
        specs = [
            RunSpec(name=variants[0].label, raw=defn.peer_raw(ctx), kind="peer", **common),
            RunSpec(name=variants[1].label, raw=defn.ours_raw(ctx, False, recommendation), **common),
            RunSpec(name=variants[2].label, raw=defn.ours_raw(ctx, True, recommendation), **common),
        ]
    commands = {}
    for v, spec in zip(variants, specs):
        if spec is None:
            continue
        path = work / f"spec_{v.key}.json"
        path.write_text(json.dumps(asdict(spec), indent=1, default=str))
        if v.key == PEER:
            env = f"PYTHONPATH={HERE / 'shims'}:{REPO}"
            commands[v.key] = f"{env} " + shlex.join(peer_command(args.home, defn.runner, path))
        else:
            commands[v.key] = (
                f"PYTHONPATH={REPO} {shlex.quote(sys.executable)} -m speechtrain.recipes.bench {path} OUT.json"
            )

    def execute(spec: RunSpec) -> Any:
        if spec.kind == "peer":
            return run_peer_row(args.home, defn.runner, spec)
        return run_spec(spec, isolate=True)

    now = {"row": "", "pass": 0}  # the ladder names the row and pass it measures next (on_row), then executes

    def on_row(i: int, v: Variant, r: int) -> None:
        now.update(row=v.key, **{"pass": r})

    def execute_pass(spec: RunSpec) -> Any:
        return execute(pass_spec(defn, spec, str(now["row"]), int(now["pass"]), quality_root))

    # "peers: vits: row k of 3 (pass p of P): NAME (m:ss so far, about m:ss left)", its figures as it ends
    say = Progress(f"peers: {defn.key}")
    rows = run_ladder(
        variants, specs, repeat=args.repeat, isolate=False, execute=execute_pass, on_row=on_row, progress=say
    )
    quality = None
    if defn.quality is not None and ctx is not None:
        quality = score_quality(defn, ctx, specs[1], [v.key for v in variants], args.repeat, quality_root)
    profiles = {}
    if args.profile > 0:  # where the time goes: one more run per measured row, under the profiler, not ranked
        for v, spec, row in zip(variants, specs, rows):
            if spec is None or row.result is None:
                continue
            print(f"[{defn.key}] {v.label} (profiled run)", flush=True)
            try:
                profiles[v.key] = execute(replace(spec, profile=args.profile)).profile or []
            except RunFailed as exc:
                print(f"[{defn.key}] profiling {v.label} failed: {exc}", flush=True)
    return PeerRun(
        key=defn.key,
        title=str((ctx or {}).get("title", defn.title)),
        rows=rows,
        settings=str((ctx or {}).get("settings", defn.settings))
        + f"; {args.steps} timed steps after {args.warmup}, {threads} torch threads per row",
        shims=defn.shims,
        commands=commands,
        loss_keys=defn.loss_keys,
        notes=defn.notes,
        profiles=profiles,
        quality=quality,
        quality_note=defn.quality_note,
    )


def main(argv: list[str] | None = None) -> int:
    """The peers' tables; the ladder's progress lines on standard error for the command's duration (a caller's
    own logging, e.g. a test's, is as it was afterwards)."""
    from speechtrain.logs import logging_for_command

    with logging_for_command() as log:
        return _main(argv, log)


def _main(argv: list[str] | None, log: Any) -> int:
    args = parse(argv)
    from speechtrain.bench.ablate import recommendation
    from speechtrain.bench.measure import device_info, probe
    from speechtrain.bench.peers import build_peer_report, peers_markdown, write_peers_plot
    from speechtrain.bench.report import write_json

    refusal = refused_options(args.peer or list(PEERS), peer_options(args))
    if refusal:  # before anything is installed or run
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    if args.same_start:
        from same_start import run_same_start

        command = "python bench/peers/run.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        peers = args.peer or ["vits", "hifigan"]
        return run_same_start(peers, args.repeat, args.jik876, args.json, args.steps or 1, args.markdown, command)
    if args.steps is None:
        args.steps = 30
    if args.install:
        install(args.home)
    if not venv_python(args.home).is_file():
        print(f"the peers' environment is missing: run `python {HERE / 'run.py'} --install` first", file=sys.stderr)
        return 2
    if args.singingvocoders is not None:
        os.environ["SPEECHTRAIN_SINGINGVOCODERS"] = str(args.singingvocoders)
    if args.jik876 is not None:
        os.environ["SPEECHTRAIN_JIK876"] = str(args.jik876)
    if args.piper_source is not None:
        os.environ["SPEECHTRAIN_PIPER_SOURCE"] = str(args.piper_source)
    chosen = args.peer or list(PEERS)
    probe_result = probe(measure=False)
    rec = recommendation(probe_result)
    runs = []
    for k, key in enumerate(chosen, 1):
        log.info(f"peers: {key}, {k} of {len(chosen)}")
        runs.append(measure_peer(definition(key), args, rec))
    info = device_info(probe_result)
    command = "python bench/peers/run.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    notes = [
        f"each row: {args.warmup} warm-up steps, then exactly {args.steps} timed steps in a fresh process; "
        f"{args.repeat} passes over the rows, interleaved; the median pass, the range of the passes, and each "
        "ratio's range over the per-pass paired ratios; 'inconclusive' where that range crosses 1.0x or is wider "
        f"than {args.max_spread:.0%}",
        "peak memory: the row's process peak RSS (VmHWM) on the CPU",
    ]
    report = build_peer_report(runs, info, command, notes, args.max_spread)
    print()
    print(peers_markdown(report))
    if args.json:
        print(f"wrote {write_json(report, args.json)}")
    if args.markdown:
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# speechtrain vs the peers\n\n- command: `{command}`\n\n" + peers_markdown(report))
        print(f"wrote {path}")
    if args.plot and report["runs"]:
        print(f"wrote {write_peers_plot(report, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
