#!/bin/bash
# Re-measure docs/guides/containers.md on this box: base image, first build, whole cell in podman.
set -u
cd /work/ctr
log() { echo "$(date -u +%FT%TZ) $*" | tee -a steps.log; }
t() { local s=$(date +%s.%N); "$@"; local rc=$?; log "rc=$rc $(python3 -c "print(round($(date +%s.%N)-$s,1))") s: $*"; return $rc; }
log "load: $(cat /proc/loadavg)"
[ -d rootfs ] || t debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm rootfs http://deb.debian.org/debian >debootstrap.log 2>&1
t bash -c "tar -C rootfs -c . | podman import - localhost/debian-bookworm-base" >import.log 2>&1
rm -rf /work/ctr/main && git clone -q /work/main /work/ctr/main && cd /work/ctr/main && log "commit $(git rev-parse HEAD)"
log "load: $(cat /proc/loadavg)"
t /work/main/.venv/bin/python -m accelgrid container build cpu-2.13 --base localhost/debian-bookworm-base --engine podman > /work/ctr/build.log 2>&1
log "load: $(cat /proc/loadavg)"
t /work/main/.venv/bin/python -m accelgrid container run cpu-2.13 --base localhost/debian-bookworm-base --engine podman > /work/ctr/run.log 2>&1
log "load: $(cat /proc/loadavg)"
