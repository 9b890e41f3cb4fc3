"""Pretrained weights for Azure's image runner, offline.

The runner fetches each model's ImageNet (or COCO) weights from Azure's CDN through
torch.hub.load_state_dict_from_url, retrying for about a minute. This machine cannot reach that
CDN, so each file is looked for at the path the run's mapping file gives its URL
(assets/local-paths.yml, the URL or a prefix of it), in AZUREML_AUTOML_PRETRAINED_DIR (a folder
of such files) and where torch.hub keeps it (TORCH_HOME, else ~/.cache/torch:
hub/checkpoints/<file name>); the file names are the CDN's, which are torchvision's and timm's
for the same weights. Where neither
holds it, the model keeps its random initialisation and one warning line says so: the trial
runs, and its metrics are those of a model trained from scratch.
"""

from __future__ import annotations

import functools
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


def candidates(url: str, locate) -> list[Path]:
    """Where the file `url` names may be: the path the run's mapping gives it (`locate`), then
    the folders."""
    name = os.path.basename(urlparse(url).path)
    mapped = locate(url) if locate is not None else None
    return [*([Path(mapped)] if mapped else []), *(folder / name for folder in folders())]


def load_weights(url: str, progress: bool = True, check_hash: bool = True, *, locate=None,
                 **kwargs):
    """The state dict `url` names, from a local file; RandomInit when none holds it."""
    import torch.hub

    kwargs.pop("model_dir", None)
    places = candidates(url, locate)
    for path in places:
        if path.is_file():
            return torch.hub.load_state_dict_from_url(url, model_dir=str(path.parent),
                                                      file_name=path.name, progress=False,
                                                      **kwargs)
    print(f"warning: pretrained weights {os.path.basename(urlparse(url).path)} are not on this "
          f"machine (looked at {', '.join(map(str, places))}; Azure downloads "
          "them from its CDN): the model trains from random initialisation. Put the file "
          "there, or map its URL in assets/local-paths.yml, to start from it as Azure does.",
          file=sys.stderr, flush=True)
    return RandomInit()


def install(locate=None) -> None:
    """Route the runner's downloads to load_weights (`locate`: the run's URL mapping), and let
    RandomInit load as nothing."""
    import torch
    from azureml.automl.dnn.vision.common import pretrained_model_utilities as pretrained

    pretrained.PretrainedModelFactory._load_state_dict_from_url_with_retry = \
        staticmethod(functools.partial(load_weights, locate=locate))
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
