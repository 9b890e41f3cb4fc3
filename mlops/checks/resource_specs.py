"""Specs of a workspace's other resources: compute instances and attached computes, datastores,
the workspace itself, registries, schedules, connections, feature stores and sets, serverless
endpoints, marketplace subscriptions, capability hosts. No JSON schema of theirs is vendored
here, so azure-ai-ml's own loader checks them: the load function `az ml <kind> create -f` calls
(its marshmallow schema, and the entity's own rules where the loader runs them), as the CLI
would before it sends the resource. `make validate` refused all of them as an unknown $schema.
"""

from __future__ import annotations

import copy
import logging

from mlops.checks import sdk_findings
from mlops.specs import Finding, Spec

# the kind a $schema names -> the azure-ai-ml entity its load function (`az ml <kind> create -f`)
# loads (entities/_load_functions.py); those marked AUTOGEN are built from the dict and checked
# by their _validate, as load_from_autogen_entity does
LOADERS = {
    "computeInstance": "Compute", "kubernetesCompute": "Compute", "vmCompute": "Compute",
    "virtualMachineCompute": "Compute", "synapseSparkCompute": "Compute",
    "datastore": "Datastore", "azureBlob": "Datastore", "azureFile": "Datastore",
    "azureDataLakeGen1": "Datastore", "azureDataLakeGen2": "Datastore", "oneLake": "Datastore",
    "workspace": "Workspace", "registry": "Registry", "schedule": "Schedule",
    "workspaceConnection": "WorkspaceConnection", "connection": "WorkspaceConnection",
    "featureStore": "FeatureStore", "featureSet": "FeatureSet",
    "featureStoreEntity": "FeatureStoreEntity", "serverlessEndpoint": "ServerlessEndpoint",
    "marketplaceSubscription": "MarketplaceSubscription", "capabilityHost": "CapabilityHost",
    "index": "Index",
}
AUTOGEN = ("ServerlessEndpoint", "MarketplaceSubscription")


def loader_layer(spec: Spec) -> list[Finding]:
    """azure-ai-ml's load of the spec as it stands (after --set): load_common's two steps (the
    entity's class by its type, then its _load), so that a refusal keeps the marshmallow
    messages by key, each at the line of the key it names."""
    from azure.ai.ml import entities
    from marshmallow import ValidationError as LoaderError

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)  # its experimental-class notes
    data = copy.deepcopy(spec.data)
    base = getattr(entities, LOADERS[spec.kind])
    try:
        if base.__name__ in AUTOGEN:
            base(data)._validate()
            return []
        cls, _ = base._resolve_cls_and_type(data=data, params_override=[])
        cls._load(data=data, yaml_path=spec.path)
    except LoaderError as err:
        return sdk_findings.from_loader(spec, err.messages)
    except Exception as err:  # noqa: BLE001 - the SDK raises many types; all mean "invalid"
        return sdk_findings.from_other(spec, err)
    return []
