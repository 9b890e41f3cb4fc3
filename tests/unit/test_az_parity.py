"""azml takes every argument `az ml` takes, for each verb it implements: the ml extension's
(Azure/azure-cli-extensions, src/machinelearningservices/azext_mlv2/manual/_params/*.py, and
the signatures in manual/custom/*.py; commands.py: supports_no_wait adds --no-wait,
confirmation adds --yes/-y) and az's own (-g, -w, --subscription, -o, --query, --debug,
--verbose, --only-show-errors). Each row is parsed, never run; published command lines too."""

from __future__ import annotations

import shlex
from functools import cache

import pytest

from mlops.cli import build_parser

AZ_GLOBAL = ("-g rg", "--resource-group rg", "-w ws", "--workspace-name ws",
             "--subscription 0000", "-o tsv", "--output yaml", "--query name", "--debug",
             "--verbose", "--only-show-errors")
ASSET_READ = ("-v 1", "--version 1", "-l latest", "--label latest", "--registry-name r")
ASSET_LIST = ("-n a", "--name a", "-r 5", "--max-results 5", "--include-archived",
              "--archived-only", "--registry-name r")
CREATE_ASSET = ("-f s.yml", "--file s.yml", "-n a", "--name a", "-v 2", "--version 2",
                "--set a=1 b=2", "--set a=1 --set b=2", "--registry-name r")
LOCAL = ("--local", "--local true", "--local false")

# verb: (what it needs to parse at all, az's arguments: each with a value where it takes one)
PARITY: dict[str, tuple[str, tuple[str, ...]]] = {
    "job create": ("-f j.yml", ("-f j.yml", "--file j.yml", "-n x", "--name x",
                                "--set inputs.x=1 inputs.y=2", "--set a=1 --set b=2",
                                "--skip-validation", "-a o.yml", "--save-as o.yml", "-s",
                                "--stream", "-e", "--web")),
    "job validate": ("-f j.yml", ("--file j.yml", "-n x", "--name x", "--set a=1 b=2",
                                  "--set a=1 --set b=2")),
    "job show": ("-n x", ("--name x", "-e", "--web")),
    "job stream": ("-n x", ("--name x",)),
    "job cancel": ("-n x", ("--name x", "--no-wait")),
    "job list": ("", ("-r 5", "--max-results 5", "--all-results", "--all-results true",
                      "--all-results false", "--include-archived", "--archived-only",
                      "-p x", "--parent-job-name x")),
    "job download": ("-n x", ("--name x", "-p d", "--download-path d", "--output-name score",
                              "--all")),
    # az's generic update arguments (azure-cli's generic_update_command) and -e/--web
    "job update": ("-n x", ("--name x", "-e", "--web", "--set a=1 b=2", "--set a=1 --set b=2",
                            "--add a.b c=d 4", "--remove tags.a", "--remove a.b 0",
                            "--force-string")),
    "job archive": ("-n x", ("--name x",)),
    "job restore": ("-n x", ("--name x",)),
    "job show-services": ("-n x", ("--name x", "-i 1", "--node-index 0", "-e", "--web")),
    "model create": ("", (*CREATE_ASSET, "--datastore ds", "-s Production",
                          "--stage Production", "-p m", "--path m", "-t mlflow_model",
                          "--type custom_model", "--description d", "--tags a=1 b",
                          "-d azureml://registries/r/deploymenttemplates/t/versions/1",
                          "--default-deployment-template x", "--no-wait")),
    "data create": ("", (*CREATE_ASSET, "--datastore ds", "-d d", "--description d",
                         "--skip-validation", "-p d", "--path d", "-t uri_folder",
                         "--type mltable", "--no-wait")),
    "environment create": ("", (*CREATE_ASSET, "--tags a=1", "--description d",
                                "--datastore ds", "-i python:3.11", "--image python:3.11",
                                "-c conda.yml", "--conda-file conda.yml", "-b ctx",
                                "--build-context ctx", "-d Dockerfile",
                                "--dockerfile-path Dockerfile", "--os-type linux",
                                "-p azureml:e:1", "--path azureml:e:1", "--no-wait")),
    "component create": ("", (*CREATE_ASSET, "--skip-validation")),
    "online-endpoint create": ("", ("-f e.yml", "--file e.yml", "-n ep", "--name ep",
                                    "--auth-mode key", "--auth-mode aml_token", "--no-wait",
                                    "--set auth_mode=key tags.a=1", "-e", "--web", *LOCAL)),
    "online-endpoint show": ("-n ep", ("--name ep", "-e", "--web", *LOCAL)),
    "online-endpoint delete": ("-n ep", ("--name ep", "--no-wait", "-y", "--yes", *LOCAL)),
    "online-endpoint get-credentials": ("-n ep", ("--name ep",)),
    "online-endpoint regenerate-keys": ("-n ep", ("--name ep", "--key-type secondary",
                                                  "--no-wait")),
    "online-endpoint list": ("", LOCAL),
    "online-endpoint update": ("-n ep", ("--name ep", "-r 'blue=100'", "--traffic 'b=90 g=10'",
                                         "--mirror-traffic 'g=10'", "-f e.yml", "--file e.yml",
                                         "--set tags.a=1", "--no-wait", "-e", "--web",
                                         *LOCAL)),
    "online-endpoint invoke": ("-n ep -r q.json", ("--name ep", "-r q.json",
                                                   "--request-file q.json", "-d blue",
                                                   "--deployment-name blue", *LOCAL)),
    "online-deployment create": ("-f d.yml", (
        "--file d.yml", "-n blue", "--name blue", "-e ep", "--endpoint-name ep",
        "--all-traffic", "--no-wait", "--set instance_count=2 a=1", "--web",
        "--skip-script-validation", "--package-model", "--vscode-debug", "--vscode-debug true",
        "--local-enable-gpu", "--local-enable-gpu false", *LOCAL)),
    "online-deployment update": ("-n blue -e ep", (
        "-f d.yml", "--file d.yml", "-n blue", "--name blue", "-e ep", "--endpoint-name ep",
        "--no-wait", "--set instance_count=2", "--web", "--skip-script-validation",
        "--vscode-debug", "--local-enable-gpu", *LOCAL)),
    "online-deployment show": ("-n b -e ep", ("--name b", "--endpoint-name ep", "--web",
                                              *LOCAL)),
    "online-deployment delete": ("-n b -e ep", ("--no-wait", "-y", "--yes", *LOCAL)),
    "online-deployment list": ("-e ep", ("--endpoint-name ep", *LOCAL)),
    "online-deployment get-logs": ("-n b -e ep", ("-l 50", "--lines 50", "-c inference-server",
                                                  "--container storage-initializer", *LOCAL)),
    "batch-endpoint create": ("", ("-f e.yml", "--file e.yml", "-n e", "--name e",
                                   "--no-wait", "--set a=1 b=2")),
    "batch-endpoint update": ("-n e", ("--name e", "-f e.yml", "--file e.yml", "--no-wait",
                                       "--set defaults.deployment_name=d",
                                       "--defaults deployment_name=d")),
    "batch-endpoint show": ("-n e", ("--name e",)),
    "batch-endpoint delete": ("-n e", ("--name e", "--no-wait", "-y", "--yes")),
    "batch-endpoint list": ("", ()),
    "batch-endpoint list-jobs": ("-n e", ("--name e",)),
    "batch-endpoint invoke": ("-n e", (
        "--name e", "-d d", "--deployment-name d", "--input ./data", "--input-type uri_folder",
        "--input-type uri_file", "--output-path azureml://datastores/ws/paths/o", "-m 10",
        "--mini-batch-size 10", "-c 2", "--instance-count 2", "--job-name j", "-f i.yml",
        "--file i.yml", "--inputs '{}'", "--outputs '{}'", "--experiment-name x",
        "--set inputs.x.path=p")),
    "batch-deployment create": ("-f d.yml", ("--file d.yml", "-n d", "--name d", "-e e",
                                             "--endpoint-name e", "--no-wait", "--set-default",
                                             "--set a=1 b=2", "--skip-script-validation")),
    "batch-deployment update": ("-n d -e e", ("-f d.yml", "--file d.yml", "--name d",
                                             "--endpoint-name e", "--no-wait", "--set a=1")),
    "batch-deployment show": ("-n d -e e", ("--name d", "--endpoint-name e")),
    "batch-deployment delete": ("-n d -e e", ("--no-wait", "-y", "--yes")),
    "batch-deployment list": ("-e e", ("--endpoint-name e",)),
    "batch-deployment list-jobs": ("-n d -e e", ("--name d", "--endpoint-name e")),
}
PARITY.update({  # the ml extension's _params/_compute_params.py
    "compute create": ("", (
        "-f c.yml", "--file c.yml", "-n cpu", "--name cpu", "-t AmlCompute", "--type amlcompute",
        "--size Standard_DS3_v2", "--min-instances 0", "--max-instances 4",
        "-d 120", "--idle-time-before-scale-down 120", "--tier low_priority",
        "--description d", "--tags a=1 b", "-l westeurope", "--location westeurope",
        "--vnet-name v", "--subnet s", "--admin-username u", "--admin-password p",
        "--ssh-key-value k", "-p true", "--ssh-public-access-enabled true",
        "--user-tenant-id t", "--user-object-id o", "--identity-type SystemAssigned",
        "-i /r/1,/r/2", "--user-assigned-identities /r/1", "--enable-node-public-ip false",
        "--set max_instances=2", "--no-wait")),
    "compute show": ("-n cpu", ("--name cpu",)),
    "compute list": ("", ("--type AmlCompute", "-r 5", "--max-results 5")),
    "compute update": ("-n cpu", ("--name cpu", "--min-instances 1", "--max-instances 8",
                                  "-d 60", "--idle-time-before-scale-down 60", "--tags a=1",
                                  "--identity-type UserAssigned", "-i /r/1", "--set tier=dedicated",
                                  "--no-wait")),
    "compute delete": ("-n cpu", ("--name cpu", "-y", "--yes", "--no-wait")),
    "compute start": ("-n ci", ("--name ci", "--no-wait")),
    "compute stop": ("-n ci", ("--name ci", "--no-wait")),
    "compute restart": ("-n ci", ("--name ci", "--no-wait")),
    "model download": ("-n m -v 1", ("--name m", "--version 1", "-p d", "--download-path d",
                                     "--registry-name r")),
    # _params/_datastore_params.py
    "datastore create": ("-f d.yml", ("--file d.yml", "-n d", "--name d", "--set a=1 b=2")),
    "datastore show": ("-n d", ("--name d",)),
    "datastore list": ("", ("-r 5", "--max-results 5")),
    "datastore delete": ("-n d", ("--name d",)),
    # _params/_schedule_params.py (commands.py: create, update, enable, disable and delete
    # support --no-wait; update is az's generic update)
    "schedule create": ("-f s.yml", ("--file s.yml", "-n s", "--name s", "--set a=1 b=2",
                                     "--set a=1 --set b=2", "--no-wait")),
    "schedule show": ("-n s", ("--name s",)),
    "schedule list": ("", ("-r 5", "--max-results 5", "--include-disabled", "--disabled-only")),
    "schedule update": ("-n s", ("--name s", "--set trigger.expression='0 3 * * *'",
                                 "--add a.b c=d", "--remove tags.a", "--force-string",
                                 "--no-wait")),
    "schedule enable": ("-n s", ("--name s", "--no-wait")),
    "schedule disable": ("-n s", ("--name s", "--no-wait")),
    "schedule delete": ("-n s", ("--name s", "--no-wait")),
    "schedule trigger": ("-n s", ("--name s",)),
    # _params/_workspace_params.py: workspace verbs take the workspace as --name
    "workspace show": ("", ("-n ws", "--name ws", "-g rg")),
    "workspace list": ("", ("-g rg", "--filtered-kinds hub,project", "-r 5",
                            "--max-results 5")),
})
for _kind in ("model", "data", "environment", "component"):
    PARITY[f"{_kind} show"] = ("-n a", ("--name a", *ASSET_READ))
    PARITY[f"{_kind} archive"] = ("-n a", ("--name a", *ASSET_READ))
    PARITY[f"{_kind} restore"] = ("-n a", ("--name a", *ASSET_READ))
    PARITY[f"{_kind} list"] = ("", (*ASSET_LIST, *(("-s Staging", "--stage Staging")
                                                  if _kind == "model" else ()),
                                    *(("-v 1",) if _kind == "component" else ())))

for _kind in ("model", "data", "environment"):  # _params/_<kind>_params.py: "ml <kind> update"
    PARITY[f"{_kind} update"] = ("-n a", (
        "--name a", *ASSET_READ, "--description d", "--set tags.a=1 description=d",
        "--set a=1 --set b=2", "--remove tags.a", "--force-string",
        *(("-s Production", "--stage Production") if _kind == "model" else ())))

LOCAL_ONLY = {"job run"}  # azml's own verb: az has no twin

# What az takes and azml does not, deliberately:
NOT_TAKEN = {
    # az's generic update (commands.py generic_update_command) edits the object az fetched
    # from the service; azml's update verbs take a spec (-f) and --set over what is recorded
    ("online-endpoint update", "online-deployment update", "batch-endpoint update",
     "batch-deployment update", "compute update"): ("--add", "--remove", "--force-string"),
    # shown only where AZURE_ML_CLI_PRIVATE_FEATURES_ENABLED is set (private_features_enabled)
    ("job cancel",): ("--tag", "-t"),
}

# Published command lines (each repository's own; `az ml` dropped, $VARS as words)
PUBLISHED = [
    # Azure/mlops-starter-sklearn scripts/jobs/train.sh
    "job create -f ./cli/jobs/train.yml --stream",
    # Azure/mlops-starter-sklearn scripts/operationalizing/deploy-online-endpoint-mlflow.sh
    "online-endpoint create --name EP -f ./endpoints/online_endpoint.yml",
    "online-deployment create --endpoint-name EP -f ./endpoints/online_deployment_mlflow.yml",
    # xiaoyan-ms/aml-gotest python/README.md
    "online-deployment create -f pytest-deployment.yml --all-traffic --resource-group RG "
    "--workspace-name WS",
    # vmunagala-insight/mslearn-mlops scripts/challenge5.sh
    "data create --file dataset_prod.yml --workspace-name WS --resource-group RG",
    # FrsECM/azml_training_v2.0 jobs/mnist_pipeline.sh
    "job create --file jobs/mnist_pipeline.yaml --subscription SUB --resource-group RG "
    "-w WS --verbose",
    # Azure-Samples/reasoning-over-ml src/feature_extraction/invoke.sh
    "batch-endpoint invoke --name EP --input azureml:heart-dataset-unlabeled@latest "
    "--query name -o tsv",
    "batch-endpoint invoke --name EP --deployment-name D --input "
    "https://azuremlexampledata.blob.core.windows.net/data/mnist/sample --input-type "
    "uri_folder --query name -o tsv",
    "job download --name J --output-name score --download-path ./",
    "batch-deployment create --file deployment-custom/deployment.yml --endpoint-name EP",
    # Azure/mlops-v2-training ml-pipelines/cli/deploy-batch-endpint.sh
    "batch-deployment create --file deploy/batch/batch-deployment.yml --set-default",
    # Azure-Samples/reasoning-over-ml src/feature_extraction/invoke.sh
    "batch-deployment list-jobs --name D --endpoint-name EP --query [].name",
    # NVIDIA/NVIDIA_AI_Enterprise_AzureML src/components/DeepStream/emotion/register_model.sh
    "model create --name emotion --path data/models/emotion --registry-name R --type "
    "custom_model --version 1 --tags 'NVIDIA AI Enterprise' 'Preview'",
    # danielsc/openai (a copy of Azure's how-to-deploy-online-endpoints, azureml-examples)
    "online-endpoint create --local -n EP -f endpoints/online/managed/sample/endpoint.yml",
    "online-deployment create --local -n blue --endpoint EP -f "
    "endpoints/online/managed/sample/blue-deployment.yml",
    "online-endpoint show -n EP --local",
    "online-deployment show --local --name blue --endpoint EP --query provisioning_state -o tsv",
    "online-endpoint invoke --local --name EP --request-file "
    "endpoints/online/model-1/sample-request.json",
    "online-endpoint show --local -n EP -o tsv --query scoring_uri",
    "online-endpoint update -n EP --traffic 'blue=100'",
    # Azure/azureml-examples cli/deploy-safe-rollout-online-endpoints.sh
    "online-deployment create --name EP -f endpoints/online/managed/saferollout/"
    "blue-deployment.yml --all-traffic",
    "online-deployment update --name blue --endpoint EP --set instance_count=2",
    "online-endpoint invoke --name EP --deployment green --request-file "
    "endpoints/online/model-2/sample-request.json",
    "online-endpoint delete --name EP --yes --no-wait",
    # the ml extension's own help (_help/_schedule_help.py)
    "schedule update --name my-schedule --set tags.key1=value1 tags.key2=value2 "
    "--resource-group my-resource-group --workspace-name my-workspace",
    "schedule trigger --name my-schedule --resource-group my-resource-group --workspace-name "
    "my-workspace",
    # Azure/azureml-examples cli/train.sh (hello_world_org_set)
    "job update -n RUN --set display_name='updated display name' experiment_name='updated "
    "experiment name' description='updated description' tags.hello='updated tag'",
    # docqai/docq infra/inference/azure/cli/update.sh
    "online-deployment update --name llama2-7b-chat-8 --workspace-name WS --resource-group RG "
    "--endpoint-name EP --file online-deployment-llama2-7b-chat-v8.yaml",
]


@cache
def parser():
    return build_parser()


def parses(line: str) -> None:
    try:
        parser().parse_args(shlex.split(line))
    except SystemExit as err:  # argparse's refusal: az's argument azml does not know
        pytest.fail(f"azml {line}: exit {err.code}")


def test_every_verb_azml_implements_has_its_az_arguments_listed():
    sub = parser()._subparsers._group_actions[0].choices  # noqa: SLF001
    verbs = {f"{group} {verb}" for group, parser in sub.items()
             for verb in parser._subparsers._group_actions[0].choices}  # noqa: SLF001
    assert verbs - LOCAL_ONLY == set(PARITY)


@pytest.mark.parametrize("verb", sorted(PARITY))
def test_each_of_az_s_arguments_parses(verb):
    base, arguments = PARITY[verb]
    for argument in (*arguments, *AZ_GLOBAL):
        parses(f"{verb} {base} {argument}")
    parses(f"{verb} {base} {' '.join(arguments)} {' '.join(AZ_GLOBAL[::2])}")


@pytest.mark.parametrize("line", PUBLISHED)
def test_published_command_lines_parse(line):
    parses(line)


def test_what_az_does_not_take_is_still_refused(capsys):
    """The table's rows are not passing because anything parses."""
    for line in ("job create -f j.yml --no-such-flag", "model create --label x",
                 "data create -t custom_model", "online-endpoint update -n e --add a b",
                 "job list --all-results maybe"):
        with pytest.raises(SystemExit) as refused:
            parser().parse_args(shlex.split(line))
        assert refused.value.code == 2, line
    capsys.readouterr()


def test_short_names_mean_what_they_mean_to_az_for_each_kind():
    parse = parser().parse_args
    model = parse(shlex.split("model create -n m -p m -s Production -d T --set a=1 b=2"))
    assert (model.stage, model.default_deployment_template, model.description) == (
        "Production", "T", "")
    assert model.sets == [["a=1", "b=2"]]
    assert parse(shlex.split("data create -n d -p d -d words")).description == "words"
    environment = parse(shlex.split("environment create -n e -b ctx -d docker/Dockerfile"))
    assert (environment.dockerfile_path, environment.description) == ("docker/Dockerfile", "")
    update = parse(shlex.split("online-endpoint update -n e -r 'blue=100'"))
    assert update.traffic == "blue=100"
    invoke = parse(shlex.split("batch-endpoint invoke -n e -m 5 -c 2 --debug"))
    assert (invoke.mini_batch_size, invoke.instance_count, invoke.debug) == ("5", "2", "")
