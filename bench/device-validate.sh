#!/usr/bin/env bash
# gpuprov validation on the lent GPU machine (read-only for the GPUs): the host runtime, then the
# container path with a Docker engine carried in (docs/device.md says what is substituted).
#   bash bench/device-validate.sh        # results: $OUT/log.txt and $OUT/results.tgz
#   PARTS="payload docker cleanup" bash bench/device-validate.sh   # a subset (default: all)
# Parts: host (provision validate --runtime host, 3 runs), payload (the payload alone: timing
# per phase, and its own deadline on the real GPU), docker (engine, image, provision validate
# --runtime docker), cleanup (Ctrl-C and a leftover on the real engine; needs docker).
# Needs, carried in .whl/: ansible-core's wheel (inventory parsing) and docker-pack.tar.xz
# (dockerd, docker, containerd, containerd-shim-runc-v2, runc from Debian 12's docker.io
# 20.10.24 / containerd 1.6.20 / runc 1.1.5, docker-init from tini 0.19, libdevmapper).
# Never changes MIG, persistence, clocks, power, ECC; never resets a GPU; NVLS stays off.
set -u
out=${OUT:-/tmp/gpuprov-device}
res=/tmp/gpuprov-results
mkdir -p "$out" "$res"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_NOCOLOR=1 TERM=dumb
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH"
step() { echo; echo "=== $(date -u +%T) $*"; }
now() { date +%s.%N; }
took() { python3 -c "print(f'{$(now) - $1:.1f} s')"; }
provision() { python3 -m orchestrator.cli "$@"; }
inv=/tmp/gpuprov-device.yml
cat > "$inv" <<YAML
all:
  children:
    gpu_nodes:
      hosts:
        device:
          ansible_connection: local
          ansible_python_interpreter: $(command -v python3)
YAML
step "machine"; nvidia-smi -L; nvidia-smi topo -m; uname -r; python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count())'
test -f orchestrator/validate/p2p.py && echo "tree: has orchestrator/validate/p2p.py"

parts=" ${PARTS:-host payload docker cleanup} "
has() { case "$parts" in *" $1 "*) return 0;; esac; return 1; }
step "ECC counters (read-only)"; nvidia-smi -q -d ECC | sed -n '/ECC Errors/,/Retired/p'

if has host; then
step "host runtime: provision validate --runtime host, 3 runs"
for i in 1 2 3; do
  t=$(now)
  provision validate -i "$inv" --runtime host --report "$res/validate-host-$i.json" \
    --junit "$res/junit-host-$i.xml" > "$res/validate-host-$i.txt" 2>&1
  echo "run $i: exit=$? wall $(took "$t")"
  grep -E 'validate device|fail|warn' "$res/validate-host-$i.txt" | head -30
done
python3 - "$res/validate-host-1.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for h in doc["hosts"].values() if isinstance(doc["hosts"], dict) else doc["hosts"]:
    for c in h["validation"]["checks"]:
        print(f"{c['name']:<22} gpu={c['gpu']} {c['status']:<5} {c['value']} / {c['limit']} {c['unit']}")
PY
fi

if has payload; then
step "the payload alone: the spec gpuprov writes for this machine, then its timing per phase"
python3 - "$res" <<'PY'
import json, sys
from orchestrator.catalog import default_catalog
from orchestrator.parsers import parse_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script, split_output
from orchestrator.validate.runner import SubprocessExecutor, payload_target
raw = split_output("device", SubprocessExecutor()(probe_script(), timeout=120).stdout)
t = payload_target(parse_host("device", raw), raw, default_catalog(), load_policy("device", {}))
json.dump(t.spec, open(f"{sys.argv[1]}/spec.json", "w"), indent=1)
spec = dict(t.spec, deadline_s=9)  # its own deadline far too short: what a hang leaves
json.dump(spec, open(f"{sys.argv[1]}/spec-deadline.json", "w"), indent=1)
PY
for i in 1 2; do
  t=$(now); PYTHONPATH=orchestrator/validate/payload python3 -m gpucheck --spec "$res/spec.json"     --out "$res/payload-$i.json" 2> "$res/payload-$i.err"; echo "payload $i: exit=$? wall $(took "$t")"
done
python3 -c "import json,sys; d=json.load(open('$res/payload-2.json')); print('elapsed', d['elapsed_s'], 'parent', d.get('parent_s'), 'workers', d.get('worker_timing_s'))"
step "the payload's own deadline on the real GPU (deadline_s=9: the workers get about 4 s)"
t=$(now); PYTHONPATH=orchestrator/validate/payload python3 -m gpucheck --spec "$res/spec-deadline.json"   --out "$res/payload-deadline.json" 2> "$res/payload-deadline.err"; echo "exit=$? wall $(took "$t")"
python3 -c "
import json; d=json.load(open('$res/payload-deadline.json'))
for r in d['results']:
    if r['status'] != 'pass': print(r['name'], r['gpu'], r['status'], r['value'], '|', r['diagnosis'][:220])
print('results kept:', [r['name'] for r in d['results'] if r['status'] == 'pass'])"
sleep 1; echo "payload processes left: $(pgrep -fc 'gpucheck|multiprocessing.spawn' || true)"
fi

if has docker || has cleanup; then
step "container path: Docker engine from Debian 12 packages, started by hand"
dk=/var/lib/gpuprov-dk
mkdir -p "$dk"
tar -C "$dk" -xJf .whl/docker-pack.tar.xz
ls -la "$dk/bin"
export PATH="$dk/bin:$PATH" DOCKER_HOST="unix://$dk/docker.sock"
(LD_LIBRARY_PATH="$dk/lib" setsid dockerd --data-root "$dk/data" --exec-root "$dk/exec" \
  --pidfile "$dk/dockerd.pid" -H "unix://$dk/docker.sock" --iptables=false --ip6tables=false \
  --bridge=none --ip-forward=false --ip-masq=false \
  --exec-opt native.cgroupdriver=cgroupfs > "$res/dockerd.log" 2>&1 &)
for _ in $(seq 80); do docker version >/dev/null 2>&1 && break; sleep 0.25; done
docker version; docker info 2>&1 | grep -E 'Storage Driver|Cgroup|Runtimes|Default Runtime|Init Binary|Kernel|Security'
step "local image: docker import of this machine's own files (system + /opt/torch/.venv)"
mkdir -p /tmp/imgextra/tmp /tmp/imgextra/root && chmod 1777 /tmp/imgextra/tmp
du -sh /opt/torch/.venv /usr 2>/dev/null
t=$(now)
tar --one-file-system -C / -cf - --exclude='./usr/local/cuda*' --exclude='./usr/local/nvidia' \
  --exclude='usr/local/cuda*' --exclude='usr/local/nvidia' --exclude='*/libcuda.so*' \
  --exclude='*/libnvidia-*.so*' --exclude='usr/share/doc' --exclude='usr/share/man' \
  bin sbin lib lib64 usr etc opt/torch -C /tmp/imgextra tmp root 2>"$res/tar.err" |
  docker import --change 'ENV PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV VIRTUAL_ENV=/opt/torch/.venv' - gpuprov-local:torch
echo "import: $(took "$t")"; docker image ls
fi
if has docker; then
step "as-is Docker 20.10 without the NVIDIA toolkit: --gpus all"
docker run --rm --gpus all --entrypoint python3 gpuprov-local:torch -c 'print(1)' 2>&1 | tail -2
step "provision validate --runtime docker without GPU support (diagnosis)"
provision validate -i "$inv" --runtime docker --image gpuprov-local:torch > "$res/validate-docker-nogpu.txt" 2>&1
echo "exit=$?"; grep -E 'gpu_payload|fix' "$res/validate-docker-nogpu.txt" | head -5
step "with bench/docker-gpus-shim.sh as docker (devices + driver libraries, as a CDI spec lists)"
mkdir -p /tmp/shim && cp bench/docker-gpus-shim.sh /tmp/shim/docker && chmod +x /tmp/shim/docker
export GPUPROV_REAL_DOCKER="$dk/bin/docker" GPUPROV_SHIM_SPEC="$res/shim-cdi.json" PATH="/tmp/shim:$PATH"
for i in 1 2; do
  t=$(now)
  provision validate -i "$inv" --runtime docker --image gpuprov-local:torch \
    --report "$res/validate-docker-$i.json" --junit "$res/junit-docker-$i.xml" > "$res/validate-docker-$i.txt" 2>&1
  echo "docker run $i: exit=$? wall $(took "$t")"
  grep -E 'validate device|fail|warn' "$res/validate-docker-$i.txt" | head -30
done
echo "containers left: $(docker ps -aq | wc -l)"
fi
if has cleanup; then
mkdir -p /tmp/shim && cp bench/docker-gpus-shim.sh /tmp/shim/docker && chmod +x /tmp/shim/docker
export GPUPROV_REAL_DOCKER="$dk/bin/docker" GPUPROV_SHIM_SPEC="$res/shim-cdi.json" PATH="/tmp/shim:$PATH"
step "cleanup on Ctrl-C: SIGINT to provision validate while the payload runs"
set -m  # job control: a background job's SIGINT is not ignored, as at a terminal
python3 -m orchestrator.cli validate -i "$inv" --runtime docker --image gpuprov-local:torch \
  > "$res/validate-docker-int.txt" 2>&1 &
pv=$!  # python itself, not a shell function's subshell
set +m
for _ in $(seq 120); do [ -n "$(docker ps -q --filter label=gpuprov.validation)" ] && break; sleep 0.25; done
docker ps --filter label=gpuprov.validation --format '{{.Names}} {{.Status}}'
sleep 1; kill -INT "$pv"; t=$(now); wait "$pv"; echo "provision exit=$? after SIGINT"
tail -4 "$res/validate-docker-int.txt"
for _ in $(seq 40); do [ -z "$(docker ps -aq --filter label=gpuprov.validation)" ] && break; sleep 0.25; done
echo "validation containers after SIGINT: $(docker ps -aq --filter label=gpuprov.validation | wc -l) ($(took "$t"))"
step "leftover: a container labelled as an expired validation, then a validation"
docker run -d --name gpuprov-validate-leftover --label gpuprov.validation=1 \
  --label gpuprov.validation.until=1 --network none --entrypoint sleep gpuprov-local:torch 600
provision validate -i "$inv" --runtime docker --image gpuprov-local:torch \
  --report "$res/validate-docker-left.json" > "$res/validate-docker-left.txt" 2>&1
echo "exit=$?"
python3 -c "
import json; d=json.load(open('$res/validate-docker-left.json')); h=list(d['hosts'].values())[0] if isinstance(d['hosts'], dict) else d['hosts'][0]
print([(c['name'], c['status'], c['value'], c['diagnosis'][:160]) for c in h['validation']['checks'] if c['name'] == 'leftover_container'])"
echo "containers left: $(docker ps -aq | wc -l)"
fi
if has docker || has cleanup; then kill "$(cat "$dk/dockerd.pid")" 2>/dev/null; fi
tar -C /tmp -czf "$out/results.tgz" gpuprov-results
