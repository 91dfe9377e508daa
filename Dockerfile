# Image a GPU node runs: CUDA runtime, Python, the project and its extras.
# Build: docker build -t distrl .
# Run:   docker run --gpus all --shm-size=8g -v $PWD/runs:/runs distrl python -m launch.train train.device=cuda
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

# Ubuntu's security updates replace exact versions quickly; pinning them breaks rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-pip \
    && rm -rf /var/lib/apt/lists/*

RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /opt/distrl
# dependencies first, so code changes do not rebuild the torch layer
COPY pyproject.toml README.md ./
RUN pip install "torch==2.5.1" --index-url https://download.pytorch.org/whl/cu124
COPY nodes ./nodes
COPY sync ./sync
COPY launch ./launch
COPY conf ./conf
RUN pip install -e ".[atari]"

# Run directories (Hydra's output dirs) live under /runs: mount a volume there to keep them.
WORKDIR /runs
CMD ["python", "-m", "launch.train"]
