"""Benchmark local environments: building a cached layer, and what reusing one adds to a run.

    python scripts/bench_envs.py [--environment NAME_OR_SPEC ...] [--repeat 5]

For each environment (an environment or job spec, or a name; default: the curated scikit-learn
1.5 image from the generated catalogue, on its own Python 3.10,
tests/fixtures/envs/repo-env.yml, a repository environment with 44 pins, and `spark:3.4`, what
a Spark job on runtime 3.4 with no environment of its own gets: pyspark, a JDK and the runtime's
pandas/numpy/pyarrow/scipy), in a fresh cache:
1. create: its cached layer, built from the package registry, timed;
2. reuse: the same environment again as a new run meets it (its interpreter found, the cached
   environment checked against its manifest, a top layer made), median of --repeat.
Then, for comparison, the project's own environment (.venv alone + a top layer), and a job's
first `import sklearn` in the first environment's layers vs in .venv (median).
Targets: first build <= 8 s for the curated image and <= 20 s for the 44-pin repository
environment; reuse < 0.1 s added to a run. The package caches (pip's, uv's) are left as they are:
run twice for a warm cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def environment(value: str):
    """A curated or registry name as it is, an environment spec file as its definition (a job
    spec: the environment it names), or `spark:<runtime_version>` as a Spark job with no
    environment."""
    from mlops.environments.envspec import EnvironmentRef

    if value.startswith("spark:"):
        from mlops.runtime.spark import line_for

        line = line_for({"runtime_version": value.removeprefix("spark:")}, None, "bench").line
        return line.environment(None, ROOT)
    path = ROOT / value
    if value.endswith((".yml", ".yaml")) and path.is_file():
        import yaml

        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "command" in data:  # a job spec: the environment it names
            data = data.get("environment")
        return EnvironmentRef(value=data, base=path.parent)
    return EnvironmentRef(value=value, base=ROOT)


def new_run(envs, ref, folder: Path):
    """The environment stage as a new run meets it: the interpreter looked for again and the
    cached environment checked against its manifest, as before its first use in a process."""
    from mlops.environments import interpreters, layers

    interpreters.find.cache_clear()
    layers.CHECKED.clear()
    return envs.activate(ref, folder, "bench")


def measure(value: str, repeat: int, tmp: Path) -> dict:
    from mlops.environments.activation import Environments
    from mlops.environments.envspec import EnvironmentRef

    os.environ["LOCAL_ENVS_DIR"] = str(tmp / f"cache-{abs(hash(value))}")
    envs, ref = Environments(), environment(value)
    folder = tmp / f"task-{abs(hash(value))}"  # its own: a later environment replaces none
    own = EnvironmentRef(value="azureml:image-classifier@latest", base=ROOT / "jobs")
    create = timed(lambda: envs.layers(ref, "bench"))
    reuse = [timed(lambda: new_run(envs, ref, folder)) for _ in range(repeat)]
    project = [timed(lambda: envs.activate(own, folder, "bench")) for _ in range(repeat)]
    layered = envs.activate(ref, folder, "bench").variables
    size = sum(p.lstat().st_size for layer in envs.layers(ref, "bench").layers
               for p in layer.rglob("*") if not p.is_symlink())
    return {"create": create, "reuse": statistics.median(reuse), "size": size,
            "project": statistics.median(project), "env": layered}


def import_time(env: dict, repeat: int, module: str) -> float:
    return statistics.median(timed(lambda: subprocess.run(
        ["python", "-c", f"import {module}"], env={**os.environ, **env}, check=True))
        for _ in range(repeat))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environment", action="append",
                        help="a curated/registry name or an environment spec file (repeatable)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--module", default="sklearn",
                        help="what a job imports, timed in the first environment and in .venv")
    args = parser.parse_args(argv)
    names = args.environment or ["azureml://registries/azureml/environments/sklearn-1.5/"
                                 "labels/latest", "tests/fixtures/envs/repo-env.yml", "spark:3.4"]
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as tmp:
        results = {name: measure(name, args.repeat, Path(tmp)) for name in names}
        first = results[names[0]]
        venv = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        imports = {"layered": import_time(first["env"], args.repeat, args.module),
                   ".venv": import_time(venv, args.repeat, args.module)}
    for name, result in results.items():
        print(f"\nenvironment: {name}")
        print(f"{'  create the cached environment (first build)':<48}{result['create']:8.2f} s   "
              f"{result['size'] / 2**20:,.0f} MB")
        print(f"{'  reuse it + make a top layer (median)':<48}{result['reuse']:8.3f} s   "
              "target < 0.1 s")
    print(f"\n{'project env (.venv) + a top layer (median)':<48}{first['project']:8.3f} s")
    print(f"{f'python -c import {args.module}, first env (median)':<48}"
          f"{imports['layered']:8.2f} s")
    print(f"{f'python -c import {args.module}, .venv (median)':<48}{imports['.venv']:8.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
