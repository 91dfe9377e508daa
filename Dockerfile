# Image a GPU node runs: Python 3.11, torch with CUDA, the project with its atari, mujoco, envpool
# and video extras, a Slurm client for requeue. Not yet built or run on a GPU by this project (docs/slurm.md, "Containers").
# Build: docker build -t distrl .
# Run:   docker run --gpus all --ipc=host -v $PWD/runs:/runs distrl python -m launch.train train.device=cuda
#
# Debian slim, not nvidia/cuda: the torch CUDA wheels bring their own CUDA runtime, cuBLAS, cuDNN and
# NCCL (nvidia-* wheels), and the driver comes from the host (--gpus, --nv, enroot). Bookworm's
# slurm-client is 22.05, the Slurm the tests' cluster runs.
FROM python:3.11-slim-bookworm

# The one torch pin: the same as setup.sh's (tests/test_dockerfile.py compares them). The index is
# the CUDA 12.8 build (needs a CUDA 12 driver on the host; runs on H100 and Blackwell); another
# build: --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 (older drivers) or .../cu130.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128

# NVIDIA_*: the NVIDIA runtime and enroot's hook mount the driver only when these are set (the
# nvidia/cuda images set them). Trajectory buffers live in /dev/shm: run with --ipc=host or a
# large --shm-size.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NCCL_DEBUG=WARN

# slurm-client: scontrol (requeue after the checkpoint; NodeAddr lookup). libstdc++6, zlib1g: what
# vizdoom's engine and ale-py link outside their wheels (ldd); libudev1: dlopened by vizdoom's SDL2.
# libibverbs1, ibverbs-providers: NCCL over InfiniBand (without them NCCL falls back to TCP sockets).
# libtcmalloc-minimal4: the node's allocator, preloaded by the entry points (launch/process/allocator.py).
# Debian's security updates replace exact versions quickly; pinning them breaks rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        slurm-client libstdc++6 zlib1g libudev1 libibverbs1 ibverbs-providers libtcmalloc-minimal4 \
    && rm -rf /var/lib/apt/lists/*

# Layers from the least to the most often changed: torch, then the dependencies (pyproject.toml
# alone, with empty package directories), then the code. A code change reinstalls nothing.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"

WORKDIR /opt/distrl
COPY pyproject.toml ./
RUN mkdir nodes sync launch && touch README.md && pip install -e ".[atari,mujoco,envpool,video]"

COPY README.md ./
COPY conf ./conf
COPY nodes ./nodes
COPY sync ./sync
COPY launch ./launch
# editable: Hydra reads conf/ next to launch/. The imports fail the build on a missing system library.
RUN pip install --no-deps -e . && python -c "import launch.train, vizdoom, ale_py, av, mujoco, envpool"

# Run directories (Hydra's output dirs) live under /runs: mount a volume there to keep them.
WORKDIR /runs
CMD ["python", "-m", "launch.train"]
