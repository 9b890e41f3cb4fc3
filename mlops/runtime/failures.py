"""Why a failed task may have failed here and not on Azure: read from the last lines of its log.

A job whose environment asks for another Python ran on this machine's (environments/); an
error raised inside an installed package of the kinds a package made for another Python raises
gets a note that says so. A job whose environment nothing here defines ran in .venv (an unknown
image, or a Dockerfile that installs nothing this machine reads on one): a ModuleNotFoundError,
or a command the shell did not find (`Rscript: command not found`), gets a note naming the
environment, its image and the line that would define it. A job whose code asks azure-identity
for a token (DefaultAzureCredential, ManagedIdentityCredential) gets a note that the job's
identity on Azure ML compute answers it and this machine has none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mlops.environments.activation import Environments

FRAME = re.compile(r'^(?:\[process \d+\] )?\s*File "([^"]+)", line \d+')  # a traceback frame
RAISED = re.compile(r"^(?:\[process \d+\] )?(?:[\w.]+\.)?(\w+(?:Error|Exception)):")
VERSION_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError",
                  "SyntaxError", "UnpicklingError"}
# where installed packages live: a site-packages, or a layer's view of .venv's (layers.base_view)
INSTALLED = re.compile(r"/site-packages/|/view-[0-9a-f]{16}/")


def last_raised(tail: Iterable[str]) -> str:
    """The exception the last lines of a log end in ("" for none)."""
    raised = [found.group(1) for line in tail if (found := RAISED.search(line))]
    return raised[-1] if raised else ""


def missing_module(tail: Iterable[str]) -> bool:
    """The log ends in a ModuleNotFoundError: what the environment would have installed."""
    return last_raised(tail) == "ModuleNotFoundError"


MISSING_COMMAND = re.compile(r"(?:^|: )([\w.+-]+): (?:command )?not found\s*$")


def missing_command(tail: Iterable[str]) -> bool:
    """The log ends in a shell's 'command not found': a program the image would have held."""
    lines = [line for line in tail if line.strip()]
    return bool(lines) and any(MISSING_COMMAND.search(line) for line in lines[-3:])


def version_error(tail: Iterable[str]) -> bool:
    """The last lines of a log end in a Python traceback of the kinds a package made for another
    Python raises (an import, an attribute or a signature gone, a pickle of older classes), from
    an installed package (site-packages), not from the job's own code."""
    lines = list(tail)
    frames = [found.group(1) for line in lines if (found := FRAME.search(line))]
    return bool(frames) and last_raised(lines) in VERSION_ERRORS and \
        bool(INSTALLED.search(frames[-1]))


# Azure ML's run-history REST service, which a job reaches on its tracking URI's host (the
# responsible-AI gather and score-card components PATCH the run's properties there:
# azureml-assets' rai_component_utilities.add_properties_to_gather_run); the local tracking
# server answers it over HTTPS (run_history.py), so a failed call has one of these reasons
RUN_HISTORY = re.compile(r"(/history/v1\.0/[^\s'\"()]*?/runs/[^\s'\"()/]+)")
PLAIN_ONLY = ("the local tracking server answered plain HTTP only (its certificate could not be "
              "made: see the run's warning)")
WHY_FAILED = (
    ("CERTIFICATE_VERIFY_FAILED", "its client did not trust the local tracking server's "
     "certificate (the job's environment trusts it through certifi's bundle and a "
     "REQUESTS_CA_BUNDLE set outside the job; a client given another bundle must hold "
     "$MLOPS_LOCAL_CA too)"),
    ("WRONG_VERSION_NUMBER", PLAIN_ONLY), ("RECORD LAYER FAILURE", PLAIN_ONLY),
    ("NO HOST SUPPLIED", "the job's tracking URI has no host (a file or sqlite store, which "
     "no server answers for): track to the local store's server, or run this step on Azure"),
    ("CONNECTION REFUSED", "nothing answered on the tracking URI's host (the local tracking "
     "server had stopped, or the job tracks to a remote MLflow server, which has no run "
     "history): run the step again, or on Azure"),
)
ANSWERED = ("the local tracking server answered it with the error above, as Azure's run history "
            "answers such a call")


def service_note(tail: Iterable[str]) -> str:
    """For a log that ends after a failed call to Azure's run-history REST: the call, and why
    it failed here ("": no such call)."""
    lines = list(tail)
    called = next((found.group(1) for line in reversed(lines)
                   if (found := RUN_HISTORY.search(line))), "")
    if not called:
        return ""
    text = "\n".join(lines).upper()
    why = next((reason for mark, reason in WHY_FAILED if mark in text), ANSWERED)
    return (f"note: the job called Azure ML's run-history REST service ({called} on the "
            "tracking URI's host, as responsible-AI's add_properties_to_gather_run does): "
            f"{why} (docs/workspace.md, run history on the tracking host)")


# azure-identity's errors for a token it could not get (CredentialUnavailableError is one kind of
# ClientAuthenticationError, which a service's 401 raises too: the message names the credential)
AUTH_ERRORS = {"ClientAuthenticationError", "CredentialUnavailableError"}
CREDENTIAL = re.compile(r"\b(\w*Credential)\b")


def credential_note(tail: Iterable[str]) -> str:
    """For a log that ends in azure-identity failing to get a token (DefaultAzureCredential,
    ManagedIdentityCredential, ...): on Azure ML compute the job's identity answers it, and this
    machine has none, so the step needs Azure ("": the log ends otherwise)."""
    raised = [(found.group(1), line) for line in tail if (found := RAISED.search(line))]
    if not raised or raised[-1][0] not in AUTH_ERRORS:
        return ""
    credential = CREDENTIAL.search(raised[-1][1].split(":", 1)[1])
    if credential is None:
        return ""
    return (f"note: the job asked Microsoft Entra ID for a token ({credential.group(1)}, "
            "azure-identity), which on Azure ML compute the job's identity answers (the "
            "compute's managed identity, or the spec's identity:); this machine has no Azure "
            "identity, so this step needs Azure: run it there, or set a service principal's "
            "AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET in this shell, which the "
            "job sees (EnvironmentCredential reads them)")


def explain(environments: Environments, where: str, tail: Iterable[str]) -> list[str]:
    """The notes a failed task's log earns (none when nothing here explains it)."""
    lines = list(tail)
    notes = []
    caveat = environments.caveat(where)
    if caveat and version_error(lines):
        notes.append(caveat)
    undefined = environments.undefined_note(where)
    if undefined and (missing_module(lines) or missing_command(lines)):
        notes.append(undefined)
    notes += [note for note in [service_note(lines), credential_note(lines)] if note]
    return notes
