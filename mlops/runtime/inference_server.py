"""A deployment's inference server, started as its release starts on Azure's inference image, on
the environment's own Python (copied into a server's top layer as _mlops_inference_server.py;
standard library only, Python 3.7's syntax):

    python -m _mlops_inference_server --port N [--threads T] [--debug]

Azure's image runs, from its runit service (azureml-assets, e.g. commit 6135df15ed:
common/environments/deepspeed-mii-deployment/context/runit/gunicorn/run, and today's
assets/training/model_management/environments/mlflow-model-inference/context/runit/gunicorn/run):

    cd "${AML_APP_ROOT:-/var/azureml-app}"
    exec azmlinfsrv --entry_script "${AZUREML_ENTRY_SCRIPT:-main.py}" --port 31311

`azmlinfsrv` is `azureml_inference_server_http.amlserver:run` in every release on PyPI (0.1.5 to
1.5.1, read from their wheels): it sets the server's variables and gives gunicorn its own argv
(amlserver_linux.run: `-b DEFAULT_HOST:port -w WORKER_COUNT --timeout WORKER_TIMEOUT`). What
differs between release lines is what that argv names and how the entry script is found:

| release   | azureml-defaults | gunicorn app                                   | entry script     |
|-----------|------------------|------------------------------------------------|------------------|
| 0.1 - 0.6 | 1.34 - 1.42      | `entry:app`, the package's server/ on sys.path | basename, under  |
|           |                  | (its entry.py does `import create_app`)        | the entry's dir  |
| 0.7 - 1.5 | 1.44 and later   | `azureml_inference_server_http.server.entry:app` | realpath       |

so gunicorn on `azureml_inference_server_http.server.entry:app` cannot start 0.1-0.6 ("No module
named 'create_app'"). This launcher runs the release's own `amlserver.run()` for every line,
with two changes only: it binds 127.0.0.1 (azmlinfsrv binds DEFAULT_HOST, 0.0.0.0), and the
runtime's gunicorn settings (threaded workers, the debugger's config hook) reach gunicorn through
GUNICORN_CMD_ARGS, which gunicorn reads before its command line (the release's own -b, -w and
--timeout win). 0.1-0.6 read the entry script as its basename under AML_APP_ROOT (0.1-0.3,
0.4.2, 0.5 and 0.6 set AML_APP_ROOT to the entry's folder themselves; 0.4.14 keeps one already
set): AML_APP_ROOT is the entry script's folder for them, as those releases make it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

PACKAGE = "azureml_inference_server_http"
HOST = "127.0.0.1"
BASENAME_RELEASES = (0, 7)  # releases before this one load the entry script by its basename


def release(package) -> tuple:
    """The release as numbers: `__version__` (0.7 and later), else the package's VERSION file."""
    text = getattr(package, "__version__", "") or ""
    if not text:
        try:
            with open(os.path.join(os.path.dirname(package.__file__), "VERSION")) as handle:
                text = handle.read()
        except OSError:
            text = ""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def gunicorn_args(threads: int, debug: bool, given: str) -> str:
    """The runtime's gunicorn settings, before any the deployment sets itself (GUNICORN_CMD_ARGS
    in its environment_variables: later options win)."""
    ours = ["--worker-class", "gthread", "--threads", str(threads)]
    if debug:
        ours += ["--config", "python:_mlops_debug"]
    return " ".join([*map(shlex.quote, ours), given]).strip()


def prepare(entry: str, found: tuple, environ) -> list:
    """The variables and argv azmlinfsrv gets here; returns the argv."""
    entry = os.path.realpath(entry)
    if found and found < BASENAME_RELEASES:
        environ["AML_APP_ROOT"] = os.path.dirname(entry)
    return ["azmlinfsrv", "--entry_script", entry]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="_mlops_inference_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    try:
        package = __import__(PACKAGE)
        from azureml_inference_server_http import amlserver
    except ImportError as err:  # Azure's container checks with `pip show` and exits 100
        print("A required package azureml-inference-server-http is missing. Please install "
              f"azureml-inference-server-http before trying again ({err})", file=sys.stderr,
              flush=True)
        sys.exit(100)
    found = release(package)
    entry = os.environ.get("AZUREML_ENTRY_SCRIPT") or "main.py"
    os.chdir(os.environ.get("AML_APP_ROOT") or os.getcwd())
    os.environ["GUNICORN_CMD_ARGS"] = gunicorn_args(args.threads, args.debug,
                                                    os.environ.get("GUNICORN_CMD_ARGS", ""))
    sys.argv = [*prepare(entry, found, os.environ), "--port", str(args.port)]
    shown = ".".join(map(str, found)) or "?"
    print(f"inference server: azureml-inference-server-http {shown}, started as azmlinfsrv on "
          f"{HOST}:{args.port}", flush=True)
    amlserver.DEFAULT_HOST = HOST  # run() passes it to amlserver_linux.run as the bind host
    amlserver.run()


if __name__ == "__main__":
    main()
