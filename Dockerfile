# attnserve-server on Debian 12. The build stage runs the README's setup and build; the
# runtime stage keeps the runtime libraries and the binaries. (The deployment issue adds the
# Kubernetes manifests and the image test.)
FROM debian:bookworm AS build
WORKDIR /src
COPY . .
RUN scripts/setup.sh --build-only && \
    BUILD_DIR=/build scripts/build.sh -DATTNSERVE_BUILD_TESTS=OFF -DATTNSERVE_BUILD_BENCH=OFF \
      -DATTNSERVE_CUDA=OFF

FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
      libtorch1.13 libopenblas0-openmp libgrpc++1.51 libprotobuf32 libprometheus-cpp-core1.0 \
      libabsl20220623 && \
    rm -rf /var/lib/apt/lists/* && \
    useradd --system --uid 10001 attnserve
COPY --from=build /build/server/attnserve-server /build/server/model/attnserve-export-model \
     /usr/local/bin/
USER 10001
EXPOSE 50051 9090
ENTRYPOINT ["/usr/local/bin/attnserve-server"]
