"""What every `azml` verb shares: az's global arguments (-o, --query; the workspace ones are
taken and ignored, since the workspace is the local one), one-line notes on stderr, --set."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from mlops.cli.output import FORMATS

Handler = Callable[..., object]


class Warnings:
    """az's --only-show-errors: no warnings for this command."""

    shown = True


def note(text: str) -> None:
    """One line on stderr for what a local run does otherwise than Azure (az's warnings go
    there too; --only-show-errors leaves them out, as az does)."""
    if Warnings.shown:
        print(f"WARNING: {text}", file=sys.stderr)


def set_values(groups: list[list[str]]) -> list[str]:
    """`--set a=1 b=2 --set c=3`: every KEY=VALUE, in order."""
    return [value for group in groups for value in group]


def add_sets(parser: argparse.ArgumentParser, what: str = "set a field of the spec") -> None:
    """az's --set (the ml extension's params_override: nargs +, repeatable)."""
    parser.add_argument("--set", dest="sets", nargs="+", action="append", default=[],
                        metavar="KEY=VALUE", help=f"{what} (az's --set)")


def _truth(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: true or false")
    return text.lower() == "true"


def add_switch(parser: argparse.ArgumentParser, flag: str, what: str) -> None:
    """az's three-state flag (get_three_state_flag): `--local`, `--local true|false`."""
    parser.add_argument(flag, nargs="?", const=True, default=False, type=_truth,
                        metavar="{true,false}", help=what)


class Verb:
    """Adds a verb's parser with az's global arguments, and remembers its handler."""

    @staticmethod
    def add(group: argparse._SubParsersAction, name: str, handler: Handler,
            what: str, *, az_debug: bool = True) -> argparse.ArgumentParser:
        """The verb's parser; az_debug=False leaves az's --debug (its log level) to the verb
        (`job run --debug` picks a process to debug)."""
        parser = group.add_parser(name, help=what, description=what)
        parser.set_defaults(handler=handler)
        parser.add_argument("-o", "--output", choices=FORMATS, default="json",
                            help="output format (az's)")
        parser.add_argument("--query", help="a JMESPath query over the result (az's)")
        for flags in (("-g", "--resource-group"), ("-w", "--workspace-name"),
                      ("--subscription",), ("--registry-name",)):
            parser.add_argument(*flags, dest=flags[-1].lstrip("-").replace("-", "_"),
                                help=argparse.SUPPRESS)
        for flag in ("--debug", "--verbose", "--only-show-errors")[0 if az_debug else 1:]:
            parser.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
        return parser


class _Ordered(argparse.Action):
    """Each --set/--add/--remove, kept in the order given (az applies them so)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from mlops.api.generic_update import Edit

        kept = list(getattr(namespace, self.dest, None) or [])
        kept.append(Edit(action=option_string.lstrip("-"), values=tuple(values)))
        setattr(namespace, self.dest, kept)


def add_generic_update(parser: argparse.ArgumentParser) -> None:
    """az's generic update arguments (azure-cli's generic_update_command): --set KEY=VALUE,
    --add PATH VALUE..., --remove PATH [INDEX], --force-string; into `edits`, in order."""
    for flag, metavar, what in (
            ("--set", "KEY=VALUE", "set a value by its path (az's generic update)"),
            ("--add", "PATH VALUE", "add to a list by its path"),
            ("--remove", "PATH [INDEX]", "remove a key, or a list's item")):
        parser.add_argument(flag, dest="edits", nargs="+", action=_Ordered, default=[],
                            metavar=metavar, help=what)
    parser.add_argument("--force-string", action="store_true",
                        help="keep --set/--add values as text, not JSON")
