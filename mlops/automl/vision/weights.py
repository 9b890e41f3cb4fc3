"""Pretrained weights for Azure's image runner, offline.

The runner fetches each model's ImageNet (or COCO) weights from Azure's CDN through
torch.hub.load_state_dict_from_url, retrying for about a minute. This machine cannot reach that
CDN, so each file is looked for where torch.hub keeps it (TORCH_HOME, else ~/.cache/torch:
hub/checkpoints/<file name>) and in AZUREML_AUTOML_PRETRAINED_DIR (a folder of such files); the
file names are the CDN's, which are torchvision's and timm's for the same weights. Where neither
holds it, the model keeps its random initialisation and one warning line says so: the trial
runs, and its metrics are those of a model trained from scratch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlparse

FOLDER_VARIABLE = "AZUREML_AUTOML_PRETRAINED_DIR"


class RandomInit(dict):
    """Stands for weights this machine does not have: loading it keeps the model's own
    initialisation. The runner deletes a classifier head from a state dict and intersects it
    with the model's; both keep this marker as it is."""

    def __delitem__(self, key) -> None:
        return None

    def keys(self):
        return ("(random initialisation)",)


def folders() -> list[Path]:
    import torch.hub

    found = [Path(torch.hub.get_dir()) / "checkpoints"]
    if os.environ.get(FOLDER_VARIABLE):
        found.insert(0, Path(os.environ[FOLDER_VARIABLE]))
    return found


def load_weights(url: str, progress: bool = True, check_hash: bool = True, **kwargs):
    """The state dict `url` names, from a local folder; RandomInit when none holds it."""
    import torch.hub

    name = os.path.basename(urlparse(url).path)
    for folder in folders():
        if (folder / name).is_file():
            kwargs.pop("model_dir", None)
            return torch.hub.load_state_dict_from_url(url, model_dir=str(folder),
                                                      progress=False, **kwargs)
    print(f"warning: pretrained weights {name} are not on this machine (looked in "
          f"{', '.join(map(str, folders()))}; Azure downloads them from its CDN): the model "
          f"trains from random initialisation. Put the file in one of those folders to "
          "start from it as Azure does.", file=sys.stderr, flush=True)
    return RandomInit()


def install() -> None:
    """Route the runner's downloads to load_weights, and let RandomInit load as nothing."""
    import torch
    from azureml.automl.dnn.vision.common import pretrained_model_utilities as pretrained

    pretrained.PretrainedModelFactory._load_state_dict_from_url_with_retry = \
        staticmethod(load_weights)
    load_state_dict = torch.nn.Module.load_state_dict

    def load_or_keep(self, state_dict, *args, **kwargs):
        if isinstance(state_dict, RandomInit):
            return torch.nn.modules.module._IncompatibleKeys([], [])
        return load_state_dict(self, state_dict, *args, **kwargs)

    torch.nn.Module.load_state_dict = load_or_keep
    for module_name in ("azureml.automl.dnn.vision.common.pretrained_model_utilities",
                        "azureml.automl.dnn.vision.object_detection_yolo.models.yolo_wrapper"):
        module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
        for name in FILTERS:
            if callable(getattr(module, name, None)):
                setattr(module, name, keeping_marker(getattr(module, name)))


# what the runner passes a state dict through before loading it (a new dict each)
FILTERS = ("intersect_dicts", "checkpoint_filter_fn")


def keeping_marker(transform):
    def transform_or_keep(first, *args, **kwargs):
        return first if isinstance(first, RandomInit) else transform(first, *args, **kwargs)

    return transform_or_keep
