"""Benchmark local environments: building a cached layer, and what reusing one adds to a run.

    python scripts/bench_envs.py [--environment azureml:AzureML-sklearn-1.5@latest] [--repeat 5]

1. create: a fresh cache, then the layer for an environment without torch (default: the curated
   scikit-learn 1.5 stand-in: scikit-learn, pandas 1.5, scipy 1.10, numpy 1.26, joblib), timed;
2. reuse: the same environment again (cached layer found, top layer made), median of --repeat;
3. the same for the project's own environment (.venv alone + a top layer), for comparison;
4. a job's first `import sklearn` in the layered environment vs in .venv (median).
Targets (issue 10): create < 30 s, reuse < 1 s added to a run.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environment", default="azureml:AzureML-sklearn-1.5@latest")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as tmp:
        os.environ["LOCAL_ENVS_DIR"] = str(Path(tmp) / "cache")
        from mlops.envs import Environments

        envs = Environments()
        where, folder = "bench", Path(tmp) / "task"
        create = timed(lambda: envs.layers(args.environment, ROOT, where))
        reuse = [timed(lambda: envs.activate(args.environment, ROOT, folder, where))
                 for _ in range(args.repeat)]
        project = [timed(lambda: envs.activate("azureml:image-classifier@latest",
                                               ROOT / "jobs", folder, where))
                   for _ in range(args.repeat)]
        layered = envs.activate(args.environment, ROOT, folder, where)
        imports = {name: statistics.median(
            timed(lambda e=env: subprocess.run(["python", "-c", "import sklearn"], env=e,
                                                check=True)) for _ in range(args.repeat))
            for name, env in (("layered", {**os.environ, **layered}),
                              (".venv", {**os.environ, "PATH": f"{Path(sys.executable).parent}"
                                         f"{os.pathsep}{os.environ['PATH']}"}))}
    print(f"\nenvironment: {args.environment}")
    print(f"{'create the cached layer (no torch)':<48}{create:8.2f} s   target < 30 s")
    print(f"{'reuse it + make a top layer (median)':<48}{statistics.median(reuse):8.3f} s   "
          "target < 1 s")
    print(f"{'project env (.venv) + a top layer (median)':<48}"
          f"{statistics.median(project):8.3f} s")
    print(f"{'python -c import sklearn, layered (median)':<48}{imports['layered']:8.2f} s")
    print(f"{'python -c import sklearn, .venv (median)':<48}{imports['.venv']:8.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
