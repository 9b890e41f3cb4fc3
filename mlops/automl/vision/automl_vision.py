"""One trial of an image AutoML job, on Azure's own runner (azureml-automl-dnn-vision).

The runtime starts this once per trial (mlops/automl/vision_job.py made the sweep). Its flags
are the job's: the task, the AutoML settings Azure hands every trial (`--settings`, JSON of the
spec's training_parameters, primary metric, label column), the data and the `best_model` output.
Every other argument is the trial's sampled hyperparameters, left on the command line for the
runner to parse as Azure passes them (`--model_name x --learning_rate y`, or for a search space
of several models `--model '{...}'`).

Before the runner starts: the MLTables become its label files (vision_data.py), its weight
downloads read local files (weights.py), and code generation (which calls Azure) is off. The
runner writes train_artifacts/ and the MLflow model as on Azure; the model is then this trial's
`best_model` output (the sweep keeps the best trial's).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import vision_data
import weights

TASK_TYPES = {"image_classification": "image-classification",
              "image_classification_multilabel": "image-classification-multilabel",
              "image_object_detection": "image-object-detection",
              "image_instance_segmentation": "image-instance-segmentation"}
MODEL = "outputs/mlflow-model"  # where the runner logs its model in the run
WORK = Path("automl_data")  # the label files, in the trial's working directory


@dataclass(kw_only=True)
class VisionConfig:
    task: str = "image_classification"
    settings: str = "{}"  # the AutoML settings every trial gets, as JSON
    target_column_name: str = "label"
    training_data: str = ""
    validation_data: str = ""
    best_model: str = ""


def parse(argv: list[str]) -> tuple[VisionConfig, list[str]]:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for f in fields(VisionConfig):
        parser.add_argument(f"--{f.name}", default=f.default)
    known, rest = parser.parse_known_args(argv)
    config = VisionConfig(**vars(known))
    if config.task not in TASK_TYPES:
        parser.error(f"--task {config.task}: one of {', '.join(TASK_TYPES)}")
    return config, rest


def label_files(config: VisionConfig) -> dict[str, str]:
    """The runner's file settings for the job's MLTables."""
    WORK.mkdir(exist_ok=True)
    classifying = config.task.startswith("image_classification")
    found = {"data_folder": str(WORK.resolve()), "images_folder": ".",
             "labels_file_root": str(WORK.resolve())}
    for key, data, name in (("labels_file", config.training_data, "train"),
                            ("validation_labels_file", config.validation_data, "validation")):
        if not data:
            continue
        out = WORK / (f"{name}.tsv" if classifying else f"{name}.jsonl")
        if classifying:
            count = vision_data.classification_file(
                Path(data), out, label=config.target_column_name,
                multilabel=config.task.endswith("multilabel"))
        else:
            count = vision_data.detection_file(Path(data), out, label=config.target_column_name)
        print(f"{name} data: {count} {'image(s)' if classifying else 'box(es)'} from {data}",
              flush=True)
        found[key] = out.name
    return found


def run_task(config: VisionConfig, settings: dict[str, object]) -> None:
    if config.task.startswith("image_classification"):
        from azureml.automl.dnn.vision.classification import runner

        runner.run(settings, multilabel=config.task.endswith("multilabel"))
    else:
        from azureml.automl.dnn.vision.object_detection import runner

        runner.run(settings)


def keep_model(best_model: str, run_id: str | None) -> None:
    """The MLflow model the runner logged to the trial's run (outputs/mlflow-model, as on
    Azure), in ./outputs and as the trial's `best_model` output."""
    model = Path("outputs") / "mlflow-model"
    if not (model / "MLmodel").is_file() and run_id:
        import mlflow

        mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=MODEL, dst_path=".")
    if not (model / "MLmodel").is_file():
        raise SystemExit(f"the runner logged no MLflow model ({MODEL}/MLmodel in run {run_id})")
    if best_model:
        shutil.copytree(model, best_model, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    config, hyperparameters = parse(sys.argv[1:] if argv is None else argv)
    try:
        settings = {**json.loads(config.settings), **label_files(config),
                    "task_type": TASK_TYPES[config.task],
                    "label_column_name": config.target_column_name,
                    "enable_code_generation": False}
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.argv = [sys.argv[0], *hyperparameters]  # the runner parses the trial's own arguments
    run_id = os.environ.get("MLFLOW_RUN_ID")  # MLflow's end_run() takes it out of os.environ
    mapping = vision_data.url_map()  # the job's variable, read once for every download
    weights.install(lambda url: vision_data.mapped(url, mapping))
    run_task(config, settings)
    keep_model(config.best_model, run_id)
    return 0


if __name__ == "__main__":
    try:
        status = main()
    finally:
        gc.freeze()  # no collection at shutdown: torch's and MLflow's objects cost seconds
    sys.exit(status)
