"""What an environment's requirement lines become before they are resolved here
(mlops/environments/requirements.py)."""

from __future__ import annotations

from mlops.environments.requirements import public_releases, unfetchable

PYTORCH_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def test_a_local_version_only_a_skipped_index_serves_becomes_its_public_release():
    """`torch==2.0.1+cpu` comes from PyTorch's index on Azure; PyPI accepts no local versions,
    so here PyPI's torch 2.0.1 stands in, said in a line, instead of a resolution that fails
    and is blamed on Azure's build."""
    lines = ["torch==2.0.1+cpu", "six==1.16.0", 'torchvision==0.15.2+cpu; python_version > "3"']
    assert unfetchable(PYTORCH_INDEX)
    kept, said = public_releases(lines, [PYTORCH_INDEX])
    assert kept == ["torch==2.0.1", "six==1.16.0", 'torchvision==0.15.2; python_version > "3"']
    assert len(said) == 2 and "only the skipped index serves" in said[0]
    assert public_releases(lines, ["-f https://download.pytorch.org/whl/torch_stable.html"])[0] \
        == kept


def test_without_a_skipped_index_a_local_version_pin_stays_as_azure_reads_it():
    """No index serves it on Azure either: the pin stays and fails as Azure's build fails it."""
    assert public_releases(["torch==2.0.1+cpu"], []) == (["torch==2.0.1+cpu"], [])
    assert public_releases(["torch==2.0.1+cpu"], ["git+https://github.com/a/b"]) == \
        (["torch==2.0.1+cpu"], [])
