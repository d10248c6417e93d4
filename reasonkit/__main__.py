"""Run the series 02 -> 06 in one process, one session, one deadline: ``python -m reasonkit run``.

What the notebooks 02_dataset_rebalance to 06_evaluation do, without their plots of the
data and the curves: build the data splits, train SFT, DPO and GRPO (exporting the GRPO
model), evaluate every finished stage (and, with ``eval.gsm8k_test`` set, GSM8K's test
split). Before training it prints the time model (:func:`reasonkit.runtime._hardware.time_model`)
and whether the stages left fit the session's deadline; once each stage has warmed up it
prints its measured ETA. At the deadline a stage stops cleanly; run the command again (in
a new session: on Kaggle, with this session's output attached as an input) and it goes on
where it stopped: finished stages are skipped, a stopped one resumes from its checkpoint.

    python -m reasonkit run               # the preset and run from REASONKIT_PRESET / _RUN
    python -m reasonkit run --preset gemma3-1b --run first
    python -m reasonkit plan              # only the time model, nothing trained

The GRPO model is exported as a PEFT adapter, a merged Hugging Face directory and an f16
GGUF file with an Ollama Modelfile (``runs/<run>/grpo/{adapter,merged,gguf}``). ``push``
uploads one export to the Hugging Face Hub or Kaggle Models (:func:`reasonkit.models.push`):

    python -m reasonkit push runs/tiny/grpo/gguf --to hf:<you>/reasonkit-tiny --dry-run
    python -m reasonkit push runs/first/grpo/merged --to kaggle:<you>/reasonkit/transformers/1b

Exit status: 0 when the series is done (or the push made, or planned), 3 when it stopped for
the deadline (resumable), 2 when a push cannot go ahead (it says why).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

from reasonkit import evaluate, models, notebook, train
from reasonkit.config import TRAIN_STAGES, Preset
from reasonkit.presets import get_preset
from reasonkit.runtime import RunDir, hardware, mesh, runs, session

TRAINING = TRAIN_STAGES
STOPPED = 3
REFUSED = 2  # a push that cannot go ahead: an incomplete export, no credentials, a bad destination
GGUF = "f16"  # the GGUF export's tensor type: the merged weights without quantization error
START_MARGIN_S = 180.0  # no stage starts with less left: it would stop while loading or compiling


def eval_is_current(run: RunDir) -> bool:
    """``eval`` finished after every stage it should hold, and holds each of them."""
    if not run.is_finished("eval"):
        return False
    info = run.finished_info("eval")
    stages = evaluate.stages_to_evaluate(run)
    return info.get("stages") == stages and all(
        run.finished_info(s).get("finished_at", "") <= info.get("finished_at", "") for s in stages[1:])


def todo(run: RunDir) -> list[str]:
    """The stages still to run, in order (``eval`` unless it is current)."""
    left = [s for s in TRAINING if not run.is_finished(s)]
    return left + (["eval"] if left or not eval_is_current(run) else [])


def seconds_left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.time()


def plan(preset: Preset, run: RunDir, deadline: float | None, eval_prompts: int | None = None,
         hw: hardware.HardwareInfo | None = None, gsm8k_prompts: int | None = None) -> hardware.TimeModel:
    """Print the time model of the stages still to run, against the deadline."""
    hw = hw or hardware.detect()
    print(hw.summary())
    model = hardware.time_model(preset, hw, eval_prompts=eval_prompts, gsm8k_prompts=gsm8k_prompts)
    print(model.report(seconds_left(deadline), stages=todo(run)))
    return model


def export_grpo(preset: Preset, run: RunDir, result: train.StageResult | None) -> None:
    """GRPO's adapters as a PEFT adapter, merged into the base, and as a GGUF file
    (``grpo/adapter``, ``grpo/merged``, ``grpo/gguf``), once."""
    if train.exported(run, "grpo", gguf=GGUF):
        return
    result = result or train.train_or_load(preset, run, "grpo")  # finished earlier: loads it
    print(f"exported the GRPO model to {train.export(result, preset, run, gguf=GGUF)}")


def _start_session(preset_name: str | None) -> session.Session:
    """The session, its step memory as the preset named on the command line asks (else as
    $REASONKIT_PRESET's does: "auto" is resolved later, once JAX may start)."""
    named = preset_name not in (None, "auto")
    return session.start_session(optimisations=get_preset(preset_name).optimisations if named else None)


def run_series(preset_name: str | None = None, run_name: str | None = None) -> int:
    """02 -> 06 in this process, resuming where an earlier call stopped; the exit status."""
    mesh.init_distributed()  # a no-op on one host; on several, first: process 0 alone writes the runs
    started = _start_session(preset_name)
    preset = get_preset(preset_name)
    run = RunDir.create(run_name or os.environ.get("REASONKIT_RUN") or preset.name, root=started.root)
    print(f"preset {preset.name!r}: {preset.description}\nrun {run.path}")
    deadline = started.deadline

    models.read_platform_secrets()  # Gemma weights: HF_TOKEN or KAGGLE_* secrets, never printed
    model_dir = models.resolve_source(preset.model)
    tok = models.load_tokenizer(model_dir / "tokenizer.model", vocab_size=preset.model.vocab_size)
    splits, _ = runs.build_data(run, preset, lambda text: len(tok.EncodeAsIds(text)))
    print(f"data: {splits.sizes()} ({run.stage('data')})")
    gsm8k = evaluate.load_gsm8k_test(preset.eval)  # an unreadable source fails now, not after training
    model = plan(preset, run, deadline, len(splits.eval), gsm8k_prompts=len(gsm8k[0]) if gsm8k else None)

    for stage in TRAINING:
        if run.is_finished(stage):
            print(f"{stage}: finished earlier ({run.finished_info(stage).get('steps')} steps)")
            if stage == "grpo":
                export_grpo(preset, run, None)
            continue
        left = seconds_left(deadline)
        if left is not None and left < START_MARGIN_S:
            print(f"{stage}: not started, {max(left, 0):.0f} s before the deadline; run again in a "
                  "new session to go on from here")
            return STOPPED
        result = train.train_or_load(preset, run, stage, deadline=deadline)
        if not result.finished:
            print(f"{stage} stopped at step {result.steps} for the deadline; run again in a new "
                  "session to resume it")
            return STOPPED
        if stage == "grpo":
            export_grpo(preset, run, result)
        del result
        models.free()

    stages = evaluate.stages_to_evaluate(run)
    if eval_is_current(run):
        print(f"eval: current ({run.stage('eval') / 'stage_table.md'})")
    else:
        need, left = model.seconds("eval") * len(stages) / len(hardware.EVAL_STAGES), seconds_left(deadline)
        if left is not None and need + START_MARGIN_S > left:
            print(f"eval: not started, the time model gives it {hardware.format_duration(need)} and "
                  f"{hardware.format_duration(max(left, 0))} are left; run again in a new session")
            return STOPPED
        results, seconds = evaluate.evaluate_run(preset, run, stages)
        k = preset.eval.num_samples
        files = {**notebook.eval_tables(results, k), "stages.png": notebook.plot_stages(results, k),
                 "lengths.png": notebook.plot_lengths(results, preset.eval.max_generation_length),
                 "domains_accuracy.png": notebook.plot_domains(results, metric="accuracy"),
                 "domains_format.png": notebook.plot_domains(results, metric="format_rate")}
        evaluate.save_run(run, preset, results, seconds, files)
    print((run.stage("eval") / "stage_table.md").read_text(), end="")
    gsm8k = run.stage("eval") / "gsm8k_table.md"  # with eval.gsm8k_test set (docs/gsm8k.md)
    if gsm8k.is_file():
        print(gsm8k.read_text(), end="")
    print(f"done: {run.path}")
    return 0


def push(export_dir: str, to: str, *, dry_run: bool, force: bool, private: bool) -> int:
    """``python -m reasonkit push``: one export to the Hub or Kaggle Models; the exit status."""
    try:
        models.push(export_dir, to, dry_run=dry_run, force=force, private=private)
    except models.PushError as e:
        print(f"push refused: {e}", file=sys.stderr)
        return REFUSED
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reasonkit", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("run", "plan", "push"),
                    help="run: the series 02 -> 06, resuming; plan: only the time model; "
                         "push: upload an export to the Hugging Face Hub or Kaggle Models")
    ap.add_argument("export_dir", nargs="?", help="push: the export directory, e.g. runs/<run>/grpo/gguf")
    ap.add_argument("--preset", help="a preset name (default: $REASONKIT_PRESET, else auto)")
    ap.add_argument("--run", help="the run's name (default: $REASONKIT_RUN, else the preset's)")
    ap.add_argument("--to", help="push: hf:<owner>/<name> or kaggle:<owner>/<model>/<framework>/<variation>")
    ap.add_argument("--dry-run", action="store_true",
                    help="push: check the export and list what would go where; send nothing")
    ap.add_argument("--force", action="store_true", help="push: send files that went there before")
    ap.add_argument("--private", action="store_true", help="push: a new Hugging Face repository is private")
    args = ap.parse_args(argv)
    if args.command == "push" and not (args.export_dir and args.to):
        ap.error("push needs an export directory and --to, e.g. "
                 "`push runs/tiny/grpo/gguf --to hf:<you>/<name>`")
    if args.command != "push" and (args.export_dir or args.to or args.dry_run or args.force or args.private):
        ap.error(f"{args.command} takes no export directory, --to, --dry-run, --force or --private "
                 "(push does)")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # a notebook's `!python -m ...` shows it live
    if args.command == "push":
        return push(args.export_dir, args.to, dry_run=args.dry_run, force=args.force, private=args.private)
    if args.command == "plan":
        started = _start_session(args.preset)
        preset = get_preset(args.preset)
        name = args.run or os.environ.get("REASONKIT_RUN") or preset.name
        plan(preset, RunDir.create(name, root=started.root), started.deadline)
        return 0
    return run_series(args.preset, args.run)


if __name__ == "__main__":
    sys.exit(main())
