#!/usr/bin/env bash
# Builds the attnserve image from the top-level Dockerfile with podman and checks that it
# serves: too slow for CI (a full C++ build in the image), run by hand before a release.
#
#   scripts/image-test.sh            (as root or through sudo; ~15 min on 2 cores the first
#                                     time, minutes with its caches)
#   scripts/image-test.sh --base-only   (steps 1 and 2 only: prepare the base image)
#   scripts/image-test.sh --skip-build  (steps 4 and 5 on the image an earlier run built)
#
#  1. Installs podman and debootstrap (Debian packages) when missing.
#  2. Makes the debian:bookworm base image locally, with `debootstrap --variant=minbase
#     bookworm` and the host's apt sources, and `podman import`s it as
#     docker.io/library/debian:bookworm (cached in $IMAGE_TEST_CACHE; no registry needed).
#  3. `podman build --isolation=chroot --network=host` (host's apt package cache and a
#     ccache folder mounted for speed; neither ends up in the image).
#  4. Runs the server from the image's filesystem as the Deployment would: `podman image
#     mount`, then in a private mount namespace /proc, /dev and a tmpfs /tmp over the
#     read-only image root, the cpu overlay's ConfigMap files in /tmp/config, `chroot` as the
#     image's user with the Deployment's args and environment, on loopback ports.
#  5. Checks grpc.health.v1 says SERVING for the probes' service, one Infer through the
#     policy, /metrics, the preStop command's presence in the image, and a clean drain on
#     SIGTERM. Prints the elapsed time and the image size.
#
# Environment: IMAGE_TAG (default localhost/attnserve:image-test), IMAGE_TEST_CACHE (default
# ~/.cache/attnserve-image-test), DEBIAN_MIRROR (default: the host's apt source for bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$(date +%s)
tag=${IMAGE_TAG:-localhost/attnserve:image-test}
cache=${IMAGE_TEST_CACHE:-$HOME/.cache/attnserve-image-test}
# The host's Debian mirror: the first URI of its apt sources (deb822 or one-line format).
host_mirror() {
  { sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null
    sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\)[[:space:]]\+bookworm[[:space:]].*/\2/p' \
      /etc/apt/sources.list 2>/dev/null; } | grep -v security | head -1 || true
}
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
base=docker.io/library/debian:bookworm
log() { echo "image-test: [$(( $(date +%s) - start )) s] $*"; }
fail() { echo "image-test: FAILED: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || exec sudo --preserve-env=IMAGE_TAG,IMAGE_TEST_CACHE,DEBIAN_MIRROR "$0" "$@"

# 1. Tools.
missing=()
for p in podman debootstrap python3-grpcio python3-yaml protobuf-compiler-grpc; do
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
mkdir -p "$cache/ccache"

# 2. The base image.
if ! podman image exists "$base"; then
  tarball=$cache/bookworm-minbase.tar
  if [[ ! -s "$tarball" ]]; then
    [[ -n "$mirror" ]] || fail "no Debian mirror in the host's apt sources; set DEBIAN_MIRROR"
    log "debootstrap --variant=minbase bookworm"
    rootfs=$cache/rootfs
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      fail "debootstrap failed; see $cache/debootstrap.log"
    # The host's sources (bookworm, -updates, -security), as the official image has them.
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
      rm -f "$rootfs/etc/apt/sources.list"
      cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$rootfs"
  fi
  log "podman import $base"
  podman import --quiet --change 'CMD ["bash"]' "$tarball" "$base" >/dev/null
fi

if [[ "${1:-}" == "--base-only" ]]; then
  log "$base is ready"
  exit 0
fi

# 3. The image. The build stage's image is left untagged: pruned at the end.
build_seconds="skipped"
if [[ "${1:-}" == "--skip-build" ]]; then
  podman image exists "$tag" || fail "--skip-build: no image $tag"
else
  log "podman build -t $tag (a full C++ build: minutes; log in $cache/build.log)"
  build_start=$(date +%s)
  set +e
  podman build --isolation=chroot --network=host \
    --volume /var/cache/apt/archives:/var/cache/apt/archives \
    --volume "$cache/ccache:/root/.cache/ccache" \
    -t "$tag" -f Dockerfile . 2>&1 | tee "$cache/build.log" |
    grep --line-buffered -E 'STEP [0-9]+/[0-9]+|COMMIT'
  status=${PIPESTATUS[0]}
  set -e
  [[ $status -eq 0 ]] || fail "podman build exited $status; the end of $cache/build.log:
$(tail -30 "$cache/build.log")"
  build_seconds="$(( $(date +%s) - build_start )) s"
  podman image prune --force >/dev/null
  log "built in ${build_seconds}"
fi

# 4. The server from the image's filesystem, configured as the cpu overlay's Deployment.
mnt=$(podman image mount "$tag")
work=$(mktemp -d)
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill -KILL "$server_pid" 2>/dev/null || true
  podman image unmount "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
grpc_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Renders the overlay; writes its ConfigMap files to $work/config with /etc/attnserve (the
# mount path) read as /tmp/config; prints the server's args, the uid and the preStop command.
/usr/bin/python3 - "$root" "$work" >"$work/plan" <<'EOF'
import os, re, sys
root, work = sys.argv[1:]
sys.path.insert(0, os.path.join(root, "tests/deploy"))
import deploy_common as dc
resources = dc.render(os.path.join(root, "deploy/k8s/overlays/cpu"))
deployment, container = dc.server_container(resources)
config = dc.ServerConfig(resources)
(mount, data), = config.mounts.items()
os.makedirs(os.path.join(work, "config"))
for key, text in data.items():
    with open(os.path.join(work, "config", key), "w") as f:
        f.write(text.replace(mount.rstrip("/") + "/", "/tmp/config/"))
env = {"POD_NAME": "attnserve-image-test", "POD_IP": "127.0.0.1"}
args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)],
               a.replace(mount.rstrip("/") + "/", "/tmp/config/")) for a in config.args]
print(" ".join(args))
print(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"])
print(container["lifecycle"]["preStop"]["exec"]["command"][0])
EOF
mapfile -t plan <"$work/plan"
args=${plan[0]} uid=${plan[1]} prestop=${plan[2]}
[[ -x "$mnt$prestop" ]] || fail "the preStop command $prestop is not in the image"
grep -q "^[^:]*:[^:]*:$uid:" "$mnt/etc/passwd" || fail "uid $uid is not a user of the image"
log "starting attnserve-server from the image (uid $uid, read-only root, tmpfs /tmp): $args"
# shellcheck disable=SC2016
unshare --mount --propagation private -- bash -c '
  set -e
  mnt=$1; work=$2; uid=$3; shift 3
  mount -t proc proc "$mnt/proc"
  mount --rbind /dev "$mnt/dev"
  mount -t tmpfs -o size=64m,mode=1777 tmpfs "$mnt/tmp"
  # The emptyDir of the dir: session store, as the kubelet mounts it.
  mount -t tmpfs -o size=256m,mode=1777 tmpfs "$mnt/var/lib/attnserve/sessions"
  cp -r "$work/config" "$mnt/tmp/config"
  exec chroot --userspec="$uid:$uid" "$mnt" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
    OMP_NUM_THREADS=1 POD_NAME=attnserve-image-test POD_IP=127.0.0.1 \
    /usr/local/bin/attnserve-server "$@"
' image-test "$mnt" "$work" "$uid" $args --host=127.0.0.1 --port="$grpc_port" \
  --metrics_port="$metrics_port" --http_port=-1 >"$work/server.log" 2>&1 &
server_pid=$!

# 5. What a kubelet and a client would see.
/usr/bin/python3 - "$root" "$grpc_port" "$metrics_port" "$server_pid" "$work/server.log" <<'EOF'
import os, sys, time, urllib.request
root, grpc_port, metrics_port, pid, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, os.path.join(root, "tests/deploy"))
import deploy_common as dc
import grpc
pb, rpc, health, stubs = dc.grpc_stubs(root)
deadline, status = time.time() + 180, None
while time.time() < deadline:
    status = dc.health_check(health, grpc_port, "")
    if status == "SERVING":
        break
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("image-test: FAILED: the server exited:\n" + open(log).read())
    time.sleep(1)
print(f"image-test: grpc.health.v1 Check(service=\"\") -> {status}")
if status != "SERVING":
    sys.exit("image-test: FAILED: not SERVING:\n" + open(log).read())
with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
    reply = rpc.AttnServeStub(channel).Infer(pb.InferRequest(model="auto", tokens=[1, 2, 3, 4]))
print(f"image-test: Infer(model=auto, 4 tokens) -> model {reply.model!r} ({reply.policy_reason})")
assert reply.model == "standard", reply
if hasattr(reply, "server"):  # the pod identity the Deployment passes
    print(f"image-test: answered by {reply.server.instance_name!r} at {reply.server.advertise_address!r}")
    assert reply.server.instance_name == "attnserve-image-test", reply.server
with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
    text = r.read().decode()
assert "attnserve_requests_total" in text, text[:500]
rss = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("process_resident_memory_bytes ")]
print(f"image-test: /metrics -> {len(text.splitlines())} lines; resident memory {rss[0] / 2**20:.0f} MiB")
EOF
grep -E "^(model|policy|device|instance|attnserve-server listening)" "$work/server.log" | sed 's/^/image-test: server: /'
models=$(grep -c "^model .* loaded in" "$work/server.log" || true)
[[ $models -eq 5 ]] || fail "expected the 5 default models from /opt/attnserve/models, the log has $models"
kill -TERM "$server_pid"
drain_start=$(date +%s)
code=0
wait "$server_pid" || code=$?
server_pid=""
[[ $code -eq 0 ]] || fail "the server exited $code after SIGTERM: $(tail -5 "$work/server.log")"
log "SIGTERM: drained and exited 0 in $(( $(date +%s) - drain_start )) s"

size=$(podman image inspect --format '{{.Size}}' "$tag")
log "PASSED: $tag, $(( size / 1024 / 1024 )) MiB; podman build ${build_seconds}; total $(( $(date +%s) - start )) s"
