# One command surface: local targets run everything on this machine (CPU, offline); az targets
# wrap `az ml` for Azure. `make` alone lists the targets.

PYTHON ?= python3
VENV ?= .venv
# Training data: empty = the embedded synthetic default (generated offline, deterministic).
DATA ?=
SYNTHETIC_DATA ?= data/synthetic_fowl
OUT ?= runs/train-local-$(shell date +%Y%m%d-%H%M%S)
EPOCHS ?= 5
IMAGE_SIZE ?= 64
BATCH_SIZE ?= 16
LEARNING_RATE ?= 0.01
ARCH ?= resnet18
WEIGHTS ?= none
NPROC ?= 2
BENCH_DATA ?= ../shared/data/hymenoptera_data
MLFLOW_PORT ?= 5000
PYTEST_ARGS ?=
# Local MLflow store; on Azure the job's own MLFLOW_TRACKING_URI is used instead.
MLFLOW_TRACKING_URI ?= sqlite:///$(CURDIR)/mlflow.db
MLFLOW_EXPERIMENT_NAME ?= fowl-local

export MLFLOW_TRACKING_URI MLFLOW_EXPERIMENT_NAME

BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
TRAIN_DATA = $(if $(DATA),$(DATA),$(SYNTHETIC_DATA))
TRAIN_ARGS = --data $(TRAIN_DATA) --output_dir $(OUT) --epochs $(EPOCHS) \
	--image_size $(IMAGE_SIZE) --batch_size $(BATCH_SIZE) --learning_rate $(LEARNING_RATE) \
	--arch $(ARCH) --weights $(WEIGHTS)

.DEFAULT_GOAL := help
.PHONY: help setup test lint train-local train-local-ddp data-synthetic data-fowl mlflow-ui \
	bench-train clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

setup: $(STAMP) ## Create .venv with everything training, serving and the tests need

$(SYNTHETIC_DATA)/README.txt: scripts/make_synthetic_data.py | $(STAMP)
	$(PY) scripts/make_synthetic_data.py --out $(SYNTHETIC_DATA)

data-synthetic: $(SYNTHETIC_DATA)/README.txt ## Generate the embedded synthetic two-class data

data-fowl: $(STAMP) ## Download the real fowl zip (needs internet) and check it
	$(PY) scripts/download_data.py --out data/fowl_data.zip

test: $(STAMP) ## Run the test suite (offline, CPU)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP) ## Lint Python with ruff
	$(BIN)/ruff check src scripts tests

train-local: $(STAMP) $(if $(DATA),,$(SYNTHETIC_DATA)/README.txt) ## Main job on CPU (DATA= or the synthetic default)
	$(PY) -m image_classifier.train $(TRAIN_ARGS)
	@echo "model: $(OUT)/model   MLflow: $(MLFLOW_TRACKING_URI) (make mlflow-ui)"

train-local-ddp: $(STAMP) $(if $(DATA),,$(SYNTHETIC_DATA)/README.txt) ## Same job, NPROC processes via torchrun (gloo)
	$(BIN)/torchrun --standalone --nproc_per_node $(NPROC) -m image_classifier.train $(TRAIN_ARGS)
	@echo "model: $(OUT)/model   MLflow: $(MLFLOW_TRACKING_URI) (make mlflow-ui)"

mlflow-ui: $(STAMP) ## Browse local MLflow runs on http://127.0.0.1:$(MLFLOW_PORT)
	$(BIN)/mlflow ui --backend-store-uri $(MLFLOW_TRACKING_URI) --host 127.0.0.1 --port $(MLFLOW_PORT)

bench-train: $(STAMP) ## Benchmark training vs tutorial-style settings (BENCH_DATA=)
	$(PY) scripts/bench_train.py --data $(BENCH_DATA)

clean: ## Remove local runs, generated data and caches (keeps .venv)
	rm -rf runs outputs data/synthetic_fowl .pytest_cache .ruff_cache
