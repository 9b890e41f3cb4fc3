"""`azml job ...`: the arguments `az ml job` takes, and what each verb does through Session."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from mlops.api.job_verbs import ListView
from mlops.api.session import Session
from mlops.api.views import JobView
from mlops.cli import job_manage
from mlops.cli.common import Verb, add_sets, add_switch, note, set_values
from mlops.cli.output import render
from mlops.errors import LocalRunError
from mlops.runtime import DebugRequest, add_debug_arguments, add_selection_arguments


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    job = groups.add_parser("job", help="run and manage jobs locally").add_subparsers(
        dest="verb", required=True,
        metavar="{create,run,validate,show,list,stream,cancel,download," + job_manage.VERBS + "}")
    create = verb.add(job, "create", _create, "create a job: checked, then run in the "
                      "background (--stream: follow it to its end)")
    create.add_argument("-f", "--file", required=True, type=Path, help="the job's YAML spec")
    create.add_argument("-n", "--name", help="the job's name (over the spec's)")
    create.add_argument("-s", "--stream", action="store_true", help="follow its log to the end")
    create.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")
    create.add_argument("-a", "--save-as", type=Path,
                        help="write the created job, as job show prints it, to this YAML file")
    add_sets(create, "override a spec value")
    create.add_argument("--skip-validation", action="store_true",
                        help="(accepted; the spec is checked as Azure checks it)")
    add_validate(job, verb)
    add_run(job, verb)
    for name, handler, what in (("show", _show, "show a job"),
                                ("stream", _stream, "print a job's log until it ends"),
                                ("cancel", _cancel, "stop a job")):
        each = verb.add(job, name, handler, what)
        each.add_argument("-n", "--name", required=True, help="the job's name")
        if name == "show":
            each.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")
        if name == "cancel":
            each.add_argument("--no-wait", action="store_true", help="return at once")
    listing = verb.add(job, "list", _list, "list the jobs, newest first")
    listing.add_argument("-r", "--max-results", type=int, default=50)
    add_switch(listing, "--all-results", "every job, not the first --max-results")
    listing.add_argument("-p", "--parent-job-name", help="(pipeline steps: not listed here)")
    listing.add_argument("--include-archived", action="store_true")
    listing.add_argument("--archived-only", action="store_true")
    download = verb.add(job, "download", _download, "copy a job's logs and outputs")
    download.add_argument("-n", "--name", required=True)
    download.add_argument("-p", "--download-path", type=Path, default=Path("."))
    download.add_argument("--output-name")
    download.add_argument("--all", dest="everything", action="store_true")
    job_manage.add(job, verb)


def add_validate(job: argparse._SubParsersAction, verb: type[Verb]) -> None:
    validate = verb.add(job, "validate", _validate, "check a job's spec as az ml job validate "
                        "does (azure-ai-ml's validate_job)")
    validate.add_argument("-f", "--file", required=True, type=Path, help="the job's YAML spec")
    validate.add_argument("-n", "--name", help="the job's name (over the spec's)")
    add_sets(validate, "override a spec value")


def add_run(job: argparse._SubParsersAction, verb: type[Verb]) -> None:
    """`azml job run`: local only (az has no twin): the job in the foreground, to its end, its
    exit code azml's; Ctrl-C stops it. What the make targets call."""
    run = verb.add(job, "run", _run, "run a job here in the foreground to its end (local "
                   "only: Ctrl-C stops it; --debug attaches a debugger)", az_debug=False)
    run.add_argument("-f", "--file", type=Path,
                     help="the job's YAML spec (with --resume: the resumed run's, unless given)")
    run.add_argument("-n", "--name", help="the job's name (over the spec's)")
    run.add_argument("--set", dest="sets", nargs="+", action="append", default=[],
                     metavar="KEY=VALUE", help="override a spec value, as az does")
    run.add_argument("--sets", dest="joined", default="", metavar="'KEY=VALUE ...'",
                     help="overrides in one string, split as a shell splits words")
    run.add_argument("--remove", action="append", default=[], metavar="KEY")
    run.add_argument("--run-dir", type=Path, help="run in this folder: an earlier run's "
                     "resumes there (a pipeline's completed steps are reused unless changed)")
    run.add_argument("--resume", metavar="NAME", help="resume the job of this name in its own "
                     "run folder (its spec unless -f)")
    run.add_argument("--max-procs", type=int, help="cap on processes at once (default: cores)")
    add_selection_arguments(run)
    add_debug_arguments(run)
    run.set_defaults(output="none")


def _validate(session: Session, args: argparse.Namespace) -> object:
    return session.validate_job(args.file, sets=set_values(args.sets), name=args.name)


def _run(session: Session, args: argparse.Namespace) -> int:
    try:
        joined = shlex.split(args.joined)
    except ValueError as err:
        raise LocalRunError(f"--sets: {err}: close the quote") from None
    sets = set_values(args.sets) + joined + ([f"name={args.name}"] if args.name else [])
    options = {"debug": DebugRequest.parse(args.debug, args.debug_port),
               "force_rerun": args.force_rerun, "explain": args.explain,
               "from_step": args.from_step, "only_steps": args.only_steps}
    if args.max_procs is not None:
        options["max_procs"] = max(1, args.max_procs)
    return replace(session, **options).run_job(args.file, sets=sets, removes=args.remove,
                                               run_dir=args.run_dir, resume=args.resume)


def _create(session: Session, args: argparse.Namespace) -> object:
    if args.web:
        note("--web opens Azure's Studio; the local job's page is its run folder (shown "
             "under services.Studio)")
    created = session.create_job(args.file, sets=set_values(args.sets), name=args.name)
    if args.save_as is not None:
        save_as(created, args.save_as)
    if args.stream:
        session.stream_job(str(created["name"]), sys.stdout)
    return created


def save_as(created: JobView, path: Path) -> None:
    """--save-as: the created job in YAML (azure-ai-ml's Job.dump: written over, its folder
    must exist)."""
    try:
        path.write_text(render(created, "yaml"), encoding="utf-8")
    except OSError:
        raise LocalRunError(f"--save-as: No such parent folder path or not a file path: "
                            f"{path} (the job {created['name']} was created)") from None


def _show(session: Session, args: argparse.Namespace) -> object:
    if args.web:
        note("--web opens Azure's Studio; the local job's page is its run folder")
    return session.show_job(args.name)


def _list(session: Session, args: argparse.Namespace) -> object:
    if args.parent_job_name:
        raise LocalRunError("--parent-job-name: a local pipeline's steps are folders of its "
                            "run (steps/<node>), not jobs of their own; azml job show -n "
                            f"{args.parent_job_name} names the run folder")
    view = ListView.of(args.include_archived, args.archived_only)
    limit = None if args.all_results else args.max_results
    if limit is not None:
        note(f"Displaying top {limit} results from the list command.")
    return session.list_jobs(limit, view)


def _stream(session: Session, args: argparse.Namespace) -> None:
    session.stream_job(args.name, sys.stdout)


def _cancel(session: Session, args: argparse.Namespace) -> None:
    session.cancel_job(args.name, wait=not args.no_wait)


def _download(session: Session, args: argparse.Namespace) -> None:
    session.download_job(args.name, path=args.download_path, output=args.output_name,
                         everything=args.everything)
