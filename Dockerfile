# attnserve-server on Debian 12, in two stages. The build stage runs what README.md's quick
# start runs (scripts/setup.sh --build-only, then scripts/build.sh) and writes the default
# models as a model repository; the runtime stage keeps only the runtime libraries, the
# binaries and that repository, and runs as an unprivileged user.
#
#   podman build -t attnserve:0.1.0 .        (or docker build; scripts/image-test.sh tests it)
#
# BASE_IMAGE and CMAKE_ARGS make the CUDA variant (deploy/README.md, "Images"): a Debian 12
# image with NVIDIA's CUDA toolkit in /usr/local/cuda as BASE_IMAGE, a CUDA LibTorch (PyTorch's
# cxx11-ABI LibTorch zip, unpacked into the build context as libtorch/) and
#   --build-arg CMAKE_ARGS="-DATTNSERVE_CUDA=ON -DCMAKE_PREFIX_PATH=/src/libtorch"
# The runtime stage then needs the CUDA runtime too: start it from the same BASE_IMAGE and
# copy /src/libtorch/lib. That variant is not built or tested here (no GPU, no NVIDIA
# registry on these machines).
ARG BASE_IMAGE=debian:bookworm

FROM ${BASE_IMAGE} AS build
ARG CMAKE_ARGS="-DATTNSERVE_CUDA=OFF"
WORKDIR /src
COPY . .
# Tests and benchmarks off: the image needs the server, the exporter and the CLI only.
RUN scripts/setup.sh --build-only && \
    BUILD_DIR=/build scripts/build.sh -DATTNSERVE_BUILD_TESTS=OFF -DATTNSERVE_BUILD_BENCH=OFF \
      ${CMAKE_ARGS} && \
    /build/server/model/attnserve-export-model --models=all --out=/opt/attnserve/models

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="attnserve" \
      org.opencontainers.image.description="gRPC server for efficient-attention sequence models"
# The shared libraries the binaries link (tests/deploy/dockerfile_test.py checks that every
# one of them comes from a package listed here or from one of their dependencies).
RUN apt-get update && \
    apt-get install -y --no-install-recommends \
      libabsl20220623 \
      libcpp-httplib0.11 \
      libgrpc++1.51 \
      libhiredis0.14 \
      libmicrohttpd12 \
      libopenblas0-openmp \
      libpcre2-8-0 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libtorch1.13 \
      libutf8proc2 \
      libxxhash0 && \
    rm -rf /var/lib/apt/lists/* && \
    groupadd --system --gid 10001 attnserve && \
    useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin attnserve && \
    install -d -o 10001 -g 10001 -m 0700 /var/lib/attnserve/sessions
# /var/lib/attnserve/sessions: the dir: session store's mount point (an emptyDir in the
# Deployment; writable by the server's user where nothing is mounted).
COPY --from=build /build/server/attnserve-server /build/server/model/attnserve-export-model \
     /build/client/attnserve-cli /usr/local/bin/
COPY --from=build /opt/attnserve/models /opt/attnserve/models
# LibTorch's OpenMP pool: one thread; the server's --intra_op_threads sets ATen's.
ENV OMP_NUM_THREADS=1
USER 10001:10001
EXPOSE 50051 8000 9090
ENTRYPOINT ["/usr/local/bin/attnserve-server"]
CMD ["--model_repository=/opt/attnserve/models"]
