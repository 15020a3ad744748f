#!/bin/sh
# gpuprov detection probe: POSIX sh, read-only, sent to each host in one SSH round-trip
# (`sh -s`, this script on stdin). Every capture is framed by marker lines so that
# orchestrator.probe.split_output() can cut the stream back into the fixture's file names:
#
#   @@gpuprov-probe@@ begin NAME
#   <output>
#   # exit=N            (text captures: the command's exit status)
#   @@gpuprov-probe@@ end NAME
#
# A tool that is absent produces no capture (absence is a fact). Nothing here changes the
# host. The final line `@@gpuprov-probe@@ done` tells a complete run from a cut-off one.

LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export PATH
M='@@gpuprov-probe@@'
# `sh -s`: detection; `sh -s record`: also what no parser reads (provision detect --save);
# `sh -s converged-state ITEM...`: the live state of convergence-record items (below).
MODE=${1-}

have() { command -v "$1" >/dev/null 2>&1; }

# bounded CMD...: at most 60 s (exit 124 then, recorded like any other failure): nvidia-smi
# on a GPU in a bad state, or docker with a hung daemon, can block for minutes.
bounded() {
    if have timeout; then
        timeout 60 "$@"
    else
        "$@"
    fi
}

smi() { bounded nvidia-smi "$@"; }

# emit NAME RC: print $out framed, byte for byte (trailing blank lines kept), then "# exit=RC".
emit() {
    printf '%s begin %s\n%s' "$M" "$1" "$out"
    case $out in
    '' | *"
") ;;
    *) printf '\n' ;;
    esac
    printf '# exit=%s\n%s end %s\n' "$2" "$M" "$1"
}

# cap NAME CMD...: stdout and stderr of CMD. The trailing "x" keeps the output's final
# newlines, which command substitution would strip. Stdin is /dev/null: this script itself
# arrives on stdin and must not be eaten by a command.
cap() {
    name=$1
    shift
    out=$("$@" </dev/null 2>&1; rc=$?; printf x; exit "$rc")
    rc=$?
    out=${out%x}
    emit "$name" "$rc"
}

# capo NAME CMD...: stdout only (CSV and JSON must not be mixed with warnings).
capo() {
    name=$1
    shift
    out=$("$@" </dev/null 2>/dev/null; rc=$?; printf x; exit "$rc")
    rc=$?
    out=${out%x}
    emit "$name" "$rc"
}

# bg CAPTURE...: run a capture in the background, its output kept in a numbered file and
# printed after `wait` (slow tools -- nvidia-smi without persistence mode, dmesg -- overlap
# instead of adding up). Without mktemp, it runs in the foreground.
TMP=$(mktemp -d 2>/dev/null) || TMP=
[ -n "$TMP" ] && trap 'rm -rf "$TMP"' EXIT
seq=0
bg() {
    seq=$((seq + 1))
    if [ -n "$TMP" ]; then
        "$@" >"$TMP/$(printf '%03d' "$seq")" &
    else
        "$@"
    fi
}

# rd FILE: first line of a sysfs attribute into $v, empty when unreadable (no fork).
rd() {
    v=
    { read -r v <"$1"; } 2>/dev/null
}

pci_devices() {
    for d in /sys/bus/pci/devices/*; do
        [ -e "$d/vendor" ] || continue
        rd "$d/vendor"; vendor=$v
        rd "$d/device"; device=$v
        rd "$d/class"; class=$v
        rd "$d/subsystem_vendor"; sv=$v
        rd "$d/subsystem_device"; sd=$v
        rd "$d/current_link_speed"; cs=$v
        rd "$d/current_link_width"; cw=$v
        rd "$d/max_link_speed"; ms=$v
        rd "$d/max_link_width"; mw=$v
        rd "$d/numa_node"; numa=$v
        drv=
        if [ -e "$d/driver" ]; then
            drv=$(readlink "$d/driver" 2>/dev/null)
            drv=${drv##*/}
        fi
        printf '%s vendor=%s device=%s class=%s subsystem_vendor=%s subsystem_device=%s ' \
            "${d##*/}" "$vendor" "$device" "$class" "$sv" "$sd"
        printf 'current_link_speed="%s" current_link_width=%s max_link_speed="%s" ' \
            "$cs" "$cw" "$ms"
        printf 'max_link_width=%s numa_node=%s driver=%s\n' "$mw" "$numa" "$drv"
    done
}

gpus_information() {
    for f in /proc/driver/nvidia/gpus/*/information; do
        [ -r "$f" ] || continue
        printf '== %s\n' "${f%/information}"
        cat "$f"
    done
}

secure_boot() {
    if have mokutil; then
        mokutil --sb-state
        return
    fi
    var=/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
    if [ -r "$var" ]; then
        # 4 bytes of attributes, then the value byte
        printf 'efivar SecureBoot=%s\n' "$(od -An -tu1 -j4 -N1 "$var" | tr -d ' ')"
    elif [ -d /sys/firmware/efi ]; then
        echo "EFI boot; SecureBoot variable not readable"
    else
        echo "EFI variables are not supported on this system"
    fi
}

kernel_log() {
    if log=$(dmesg 2>/dev/null); then
        :
    elif have journalctl; then
        log=$(journalctl -k -b -q --no-pager 2>/dev/null) || return 1
    else
        return 1
    fi
    printf '%s\n' "$log" | grep -i -E 'nvidia|NVRM|Xid|nvswitch'
    return 0
}

query_gpu() {
    f='index,name,pci.bus_id,pci.device_id,pci.sub_device_id,uuid,serial,driver_version'
    f="$f,vbios_version,memory.total,mig.mode.current,mig.mode.pending,persistence_mode"
    f="$f,ecc.mode.current,ecc.mode.pending,ecc.errors.uncorrected.volatile.total,compute_cap"
    f="$f,power.limit,clocks.max.sm,clocks.current.sm,pcie.link.gen.current"
    f="$f,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max,retired_pages.pending"
    f="$f,remapped_rows.pending,remapped_rows.failure"
    # drivers before R535 name the reasons field clocks_throttle_reasons
    smi --query-gpu="$f,clocks_event_reasons.active,temperature.gpu" --format=csv ||
        smi --query-gpu="$f,clocks_throttle_reasons.active,temperature.gpu" --format=csv
}

services() {
    sc=$(systemctl show --property=Id,LoadState,ActiveState,UnitFileState -- \
        nvidia-persistenced.service nvidia-fabricmanager.service docker.service \
        containerd.service 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ]; then
        printf '%s\n' "$sc"
        return "$rc"
    fi
    printf '%s\n' "$sc" | awk -F= '
        function flush() {
            if (load == "not-found" || enabled == "") enabled = "not-found"
            print id, active, enabled
            id = ""; load = ""; active = ""; enabled = ""
        }
        $1 == "Id" { id = $2 }
        $1 == "LoadState" { load = $2 }
        $1 == "ActiveState" { active = $2 }
        $1 == "UnitFileState" { enabled = $2 }
        $0 == "" && id != "" { flush() }
        END { if (id != "") flush() }'
}

rpm_packages() {
    rpm -qa --qf '%{NAME}\t%{VERSION}-%{RELEASE}\n' 'nvidia*' 'libnvidia*' 'cuda*' \
        'kmod-nvidia*' 'datacenter-gpu-manager*' 'docker*' 'containerd*' 'moby*'
    rc=$?
    for f in /etc/dnf/plugins/versionlock.list /etc/yum/pluginconf.d/versionlock.list; do
        [ -r "$f" ] && sed -n 's/^\([^#].*\)$/#versionlock \1/p' "$f"
    done
    return $rc
}

cdi_specs() {
    for f in /etc/cdi/*.yaml /etc/cdi/*.json /var/run/cdi/*.yaml /var/run/cdi/*.json; do
        [ -e "$f" ] && printf '%s\n' "$f"
    done
    return 0
}

# Convergence records (issue 20, docs/reruns.md): each role writes, at the end of a
# successful run, /var/lib/gpuprov/converged/<role>.json with the state it owns as lines
# "KIND NAME VALUE..." (file, pkg, unit, module). converged_state prints those lines for the
# items it is given; the roles record its output (their last task, the collection's module
# gpuprov.nvidia.converged_record, runs `sh -s converged-state ITEM...` with this script on
# stdin) and the probe prints it again for the items each record
# lists, so the recorded and the live state come from this one function.
CONVERGED=${GPUPROV_CONVERGED_DIR:-/var/lib/gpuprov/converged}  # the variable: unit tests

# from_batch NAME: the state of package NAME ("VERSION WANT" or "missing -") in s, from the
# one dpkg-query converged_state ran for all the packages it was given; status 1 where that
# query cannot stand for NAME's own (not in it, or more than one line: asked alone, as before)
from_batch() {
    case " $pkgs " in *" $1 "*) ;; *) return 1 ;; esac
    found=
    count=0
    while IFS= read -r line; do
        case $line in
        "$1 "*)
            found=${line#"$1" }
            count=$((count + 1))
            ;;
        esac
    done <<EOF
$batch
EOF
    [ "$count" -le 1 ] || return 1
    case $found in
    installed\ *) s=${found#installed } ;;
    *) s='missing -' ;;
    esac
}

converged_state() {
    # One dpkg-query for the packages (a call each cost about 7 ms on a lab host's 281
    # packages, more on a real host's): only names of Debian's characters, the ones that
    # query lists as given (a NAME:ARCH or a pattern is asked alone below).
    pkgs=
    batch=
    if have dpkg-query; then
        for item in "$@"; do
            case $item in
            'pkg ' | 'pkg -'* | 'pkg '*[!abcdefghijklmnopqrstuvwxyz0123456789+.-]*) ;;
            'pkg '*) pkgs="$pkgs ${item#pkg }" ;;
            esac
        done
        if [ -n "$pkgs" ]; then
            # shellcheck disable=SC2016,SC2086 # dpkg-query's format; the names split on spaces
            batch=$(
                IFS=' '
                dpkg-query -W -f='${Package} ${db:Status-Status} ${Version} ${db:Status-Want}\n' \
                    -- $pkgs 2>/dev/null
            )
        fi
    fi
    for item in "$@"; do
        kind=${item%% *}
        name=${item#* }
        case $kind in
        file)
            if [ -f "$name" ] && s=$(sha256sum <"$name" 2>/dev/null); then
                printf 'file %s %s\n' "$name" "${s%% *}"
            else
                printf 'file %s missing\n' "$name"
            fi
            ;;
        pkg)
            if from_batch "$name"; then # a batch exists only where dpkg-query does
                :
            elif have dpkg-query; then
                # shellcheck disable=SC2016 # dpkg-query's format syntax
                s=$(dpkg-query -W -f='${db:Status-Status} ${Version} ${db:Status-Want}' \
                    -- "$name" 2>/dev/null)
                case $s in
                installed\ *) s=${s#installed } ;;
                *) s='missing -' ;;
                esac
            elif have rpm; then
                s=$(rpm -q --qf '%{EPOCHNUM}:%{VERSION}-%{RELEASE}' -- "$name" 2>/dev/null) ||
                    s=missing
                w=install
                for f in /etc/dnf/plugins/versionlock.list /etc/yum/pluginconf.d/versionlock.list; do
                    [ -r "$f" ] && grep -q "^$name-[0-9]" "$f" && w=hold
                done
                s="$s $w"
            else
                s='missing -'
            fi
            printf 'pkg %s %s\n' "$name" "$s"
            ;;
        unit)
            e=$(systemctl is-enabled -- "$name" 2>/dev/null) || e=${e:-missing}
            a=$(systemctl is-active -- "$name" 2>/dev/null) || a=${a:-missing}
            printf 'unit %s %s %s\n' "$name" "$e" "$a"
            ;;
        module)
            rd "/sys/module/$name/version"
            printf 'module %s %s\n' "$name" "${v:-missing}"
            ;;
        *) printf 'unknown %s\n' "$item" ;;
        esac
    done
}

if [ "$MODE" = converged-state ]; then
    shift
    converged_state "$@"
    exit 0
fi

# converged_live RECORD: the live state of the items RECORD lists (its "state" lines).
converged_live() {
    set -f
    old=$IFS
    IFS='
'
    # shellcheck disable=SC2046 # one item a line: split on newlines only, no globbing
    converged_state $(sed -n -E 's/^ *"(file|pkg|unit|module) ([^ "]+) .*$/\1 \2/p' "$1")
    IFS=$old
    set +f
}

cap os-release.txt cat /etc/os-release
cap uname-r.txt uname -r
cap uname-m.txt uname -m
cap proc-uptime.txt cat /proc/uptime
cap secureboot.txt secure_boot
cap sysfs-pci-devices.txt pci_devices
[ -r /proc/driver/nvidia/version ] && cap proc-driver-nvidia-version.txt cat /proc/driver/nvidia/version
[ -d /proc/driver/nvidia/gpus ] && cap proc-driver-nvidia-gpus-information.txt gpus_information
cap lsmod.txt cat /proc/modules
bg cap dmesg-nvidia.txt kernel_log

if have nvidia-smi; then
    bg cap nvidia-smi-L.txt smi -L
    bg cap nvidia-smi-version.txt smi --version
    bg capo nvidia-smi-query-gpu.csv query_gpu
    bg cap nvidia-smi-q.txt smi -q
    bg cap nvidia-smi-topo-m.txt smi topo -m
    bg cap nvidia-smi-nvlink-s.txt smi nvlink -s
    bg cap nvidia-smi-nvlink-e.txt smi nvlink -e
    # What no parser reads, kept for a record of the host (`sh -s record`: `provision detect
    # --save`, the real fixtures' set): each nvidia-smi costs its NVML start-up, and the MIG
    # role and the verify suite list the instances themselves where a layout is planned.
    if [ "$MODE" = record ]; then
        bg cap nvidia-smi.txt smi
        bg cap nvidia-smi-mig-lgip.txt smi mig -lgip
        bg cap nvidia-smi-mig-lgipp.txt smi mig -lgipp
        bg cap nvidia-smi-mig-lgi.txt smi mig -lgi
        bg cap nvidia-smi-mig-lcip.txt smi mig -lcip
        bg cap nvidia-smi-mig-lci.txt smi mig -lci
    fi
fi

if have dpkg-query; then
    # shellcheck disable=SC2016 # ${...} is dpkg-query's format syntax, not the shell's
    bg capo dpkg-query.txt dpkg-query -W \
        -f='${binary:Package}\t${Version}\t${db:Status-Want}\t${db:Status-Status}\n' \
        'nvidia*' 'libnvidia*' 'cuda*' 'linux-modules-nvidia*' 'datacenter-gpu-manager*' \
        'docker*' 'containerd*' 'moby*' 'runc'
elif have rpm; then
    bg capo rpm-qa.txt rpm_packages
fi
have systemctl && bg cap systemctl-is-active.txt services
have docker && bg capo docker-info.txt bounded docker info --format '{{json .}}'
[ -f /etc/docker/daemon.json ] && cap docker-daemon-json.txt cat /etc/docker/daemon.json
if [ -d /etc/cdi ] || [ -d /var/run/cdi ]; then
    cap cdi-specs.txt cdi_specs
fi
have nvidia-ctk && bg cap nvidia-ctk-version.txt nvidia-ctk --version
# NVLink5 (HGX B200/B300), detected as NVIDIA's driver container does: a device whose VPD
# contains SW_MNG (an NVSwitch management port). Two views, one mark each (SW_MNG, - or
# unreadable: grep's own answer, so an I/O error is never a "no"):
# - infiniband-vpd.txt: /sys/class/infiniband/*/device/vpd (NVIDIA's path; needs mlx5_ib);
# - pci-vpd.txt: every Mellanox physical function (vendor 0x15b3) under /sys/bus/pci/devices,
#   whose vpd exists whatever driver is bound (mode 0600: root only); `ADDR MARK [IBDEV...]`.
# mlx5_core and ib_umad: lsmod.txt.
vpd_mark() {
    if [ ! -r "$1" ]; then
        printf 'unreadable'
        return 0
    fi
    grep -q SW_MNG "$1" 2>/dev/null
    case $? in
    0) printf 'SW_MNG' ;;
    1) printf '%s' - ;;
    *) printf 'unreadable' ;;
    esac
}
infiniband_vpd() {
    for f in /sys/class/infiniband/*/device/vpd; do
        [ -e "$f" ] || continue
        d=${f%/device/vpd}
        printf '%s %s\n' "${d##*/}" "$(vpd_mark "$f")"
    done
    return 0
}
mellanox_vpd() {
    for d in /sys/bus/pci/devices/*; do
        [ -e "$d/vpd" ] && [ ! -e "$d/physfn" ] || continue
        rd "$d/vendor"
        [ "$v" = 0x15b3 ] || continue
        ib=
        for i in "$d"/infiniband/*; do [ -e "$i" ] && ib="$ib ${i##*/}"; done
        printf '%s %s%s\n' "${d##*/}" "$(vpd_mark "$d/vpd")" "$ib"
    done
    return 0
}
[ -d /sys/class/infiniband ] && cap infiniband-vpd.txt infiniband_vpd
cap pci-vpd.txt mellanox_vpd
# The multi-node fabric (issue 30): RDMA devices (EFA, InfiniBand HCAs) and what NCCL needs
# to use them. rdma.txt, one fact a line (orchestrator/parsers/fabric.py):
#   device NAME pci=ADDR vendor=0x.. device=0x..   /sys/class/infiniband/NAME (device: its PCI
#                                                  function; EFA names them efa_N)
#   port NAME N state=".." phys_state=".." rate=".." link_layer=".."   ports/N/ (kernel ABI
#                                                  sysfs-class-infiniband)
#   uverbs NAME        /dev/infiniband/uverbsN      memlock VALUE   `ulimit -l` (KiB|unlimited)
#   peermem PATH       a path NCCL takes for GPUDirect peer memory (fabric.yaml gpudirect)
#   efa_installer VER  /opt/amazon/efa_installed_packages' "EFA installer version:" line
#   ofi_nccl PATH      the aws-ofi-nccl plugin's libraries under /opt/amazon/ofi-nccl/lib
# fi-info-efa.txt: `fi_info -p efa -t FI_EP_RDM` (PATH or the installer's /opt/amazon/efa/bin);
# ibstatus.txt: `ibstatus` where infiniband-diags is installed.
rdma() {
    for d in /sys/class/infiniband/*; do
        [ -d "$d" ] || continue
        pci=- vendor=- device=-
        if [ -L "$d/device" ]; then
            pci=$(readlink -f "$d/device" 2>/dev/null)
            pci=${pci##*/}
            rd "$d/device/vendor"; vendor=${v:--}
            rd "$d/device/device"; device=${v:--}
        fi
        printf 'device %s pci=%s vendor=%s device=%s\n' "${d##*/}" "$pci" "$vendor" "$device"
        for p in "$d"/ports/*; do
            [ -d "$p" ] || continue
            rd "$p/state"; st=$v
            rd "$p/phys_state"; ph=$v
            rd "$p/rate"; rt=$v
            rd "$p/link_layer"; ll=$v
            printf 'port %s %s state="%s" phys_state="%s" rate="%s" link_layer="%s"\n' \
                "${d##*/}" "${p##*/}" "$st" "$ph" "$rt" "$ll"
        done
    done
    for u in /dev/infiniband/uverbs*; do
        [ -e "$u" ] && printf 'uverbs %s\n' "${u##*/}"
    done
    printf 'memlock %s\n' "$(ulimit -l 2>/dev/null || echo -)"
    for f in /sys/module/nvidia_peermem/version /sys/kernel/mm/memory_peers/nv_mem/version \
        /sys/kernel/mm/memory_peers/nv_mem_nc/version; do
        [ -e "$f" ] && printf 'peermem %s\n' "$f"
    done
    [ -r /opt/amazon/efa_installed_packages ] &&
        sed -n 's/^EFA installer version:[[:space:]]*\([^[:space:]]*\).*/efa_installer \1/p' \
            /opt/amazon/efa_installed_packages
    for f in /opt/amazon/ofi-nccl/lib/*.so /opt/amazon/ofi-nccl/lib/*/*.so; do
        [ -e "$f" ] && printf 'ofi_nccl %s\n' "$f"
    done
    return 0
}
fi_info_efa() {
    if have fi_info; then
        bounded fi_info -p efa -t FI_EP_RDM
    else
        bounded /opt/amazon/efa/bin/fi_info -p efa -t FI_EP_RDM
    fi
}
cap rdma.txt rdma
if have fi_info || [ -x /opt/amazon/efa/bin/fi_info ]; then
    bg cap fi-info-efa.txt fi_info_efa
fi
have ibstatus && bg cap ibstatus.txt bounded ibstatus
# Installed kernels and the NVIDIA module each would load (issue 16): a kernel that boots
# without one loses the host its GPUs. One line per kernel (/lib/modules, /boot), per module
# file with modinfo's version and signer, per DKMS tree entry; then the boot loader's default
# where readable, and whether the DKMS signing certificate is enrolled (mokutil --test-key).
# Key paths: dkms's own defaults (Debian's dkms 3.0.10 /usr/sbin/dkms: /var/lib/dkms/mok.pub,
# on Ubuntu /var/lib/shim-signed/mok/MOK.der), or mok_certificate= in /etc/dkms/framework.conf.
kernels() {
    printf 'running %s\n' "$(uname -r)"
    for k in $({
        ls -1 /lib/modules 2>/dev/null
        for f in /boot/vmlinuz-*; do [ -e "$f" ] && printf '%s\n' "${f#/boot/vmlinuz-}"; done
    } | sort -u); do
        vm=no; [ -e "/boot/vmlinuz-$k" ] && vm=yes
        hd=no; [ -e "/lib/modules/$k/build/Makefile" ] && hd=yes
        printf 'kernel %s vmlinuz=%s headers=%s\n' "$k" "$vm" "$hd"
        [ -d "/lib/modules/$k" ] || continue
        find "/lib/modules/$k" \( -name 'nvidia.ko*' -o -name 'nvidia-current.ko*' \) \
            2>/dev/null | while read -r m; do
            ver=$(modinfo -F version "$m" 2>/dev/null | head -n 1)
            sig=$(modinfo -F signer "$m" 2>/dev/null | head -n 1)
            printf 'module %s %s version=%s signer=%s\n' "$k" "$m" "${ver:--}" "${sig:--}"
        done
    done
    for d in /var/lib/dkms/*/*/*/*/module; do
        [ -d "$d" ] || continue
        r=${d#/var/lib/dkms/}
        # <module>/<version>/<kernel>/<arch>/module; `source` links into /usr/src
        case $r in */source/* | */build/*) continue ;; esac
        printf 'dkms %s\n' "$(printf '%s' "${r%/module}" | tr / ' ')"
    done
    for f in /boot/grub/grubenv /boot/grub2/grubenv; do
        [ -r "$f" ] && sed -n 's/^saved_entry=/grubenv saved_entry=/p' "$f"
    done
    for f in /boot/grub/grub.cfg /boot/grub2/grub.cfg; do
        [ -r "$f" ] || continue
        sed -n 's/^[[:space:]]*set default="\{0,1\}\([^"]*\)"\{0,1\}$/grub default=\1/p' "$f" | head -n 1
        sed -n 's/^[[:space:]]*linux[a-z16]*[[:space:]]\{1,\}\([^[:space:]]*\).*/grub linux \1/p' "$f" | head -n 1
        break
    done
    have grubby && printf 'grubby %s\n' "$(grubby --default-kernel 2>/dev/null)"
    # rpm hosts: the package that installed each kernel and its -devel package (what DKMS
    # builds against). RHEL 9: kernel-core holds vmlinuz, kernel-devel the headers and
    # makefiles (RHEL 9 "Managing, monitoring and updating the kernel", 1.3); Amazon Linux
    # 2023: kernel / kernel-devel, and kernel6.12 / kernel6.12-devel for its 6.12 kernels.
    have rpm && rpm -qa --qf 'rpm %{NAME} %{VERSION}-%{RELEASE}.%{ARCH}\n' kernel kernel-core \
        kernel-devel 'kernel6.*' 2>/dev/null | grep -E '^rpm kernel(6\.[0-9]+)?(-core|-devel)? ' | sort
    cert=$(sed -n 's/^[[:space:]]*mok_certificate="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' \
        /etc/dkms/framework.conf /etc/dkms/framework.conf.d/*.conf 2>/dev/null | tail -n 1)
    for c in $cert /var/lib/dkms/mok.pub /var/lib/shim-signed/mok/MOK.der; do
        [ -f "$c" ] || continue
        if have mokutil; then
            t=$(mokutil --test-key "$c" 2>&1)
            case $t in
            *"already enrolled"*) printf 'mok %s enrolled\n' "$c" ;;
            *"not enrolled"*) printf 'mok %s not-enrolled\n' "$c" ;;
            *) printf 'mok %s unknown\n' "$c" ;;
            esac
        else
            printf 'mok %s unknown\n' "$c"
        fi
    done
    return 0
}
bg cap kernels.txt kernels
# an unfinished driver upgrade leaves the host drained (roles/driver_upgrade)
[ -f /var/lib/gpuprov/upgrade.json ] && cap gpuprov-upgrade.txt cat /var/lib/gpuprov/upgrade.json
# What a stopped run left to recover (parsers/recovery.py), one fact a line, only when there
# is any: dpkg's journal (a file of /var/lib/dpkg/updates/ whose name is all digits: apt's
# debSystem::CheckUpdates, Debian/apt@0205540433 apt-pkg/deb/debsystem.cc, then refuses with
# "dpkg was interrupted, you must manually run 'dpkg --configure -a'"), and the restarts a
# role owes (roles/docker: /var/lib/gpuprov/docker-restart-pending).
recovery() {
    n=0
    for f in /var/lib/dpkg/updates/*; do
        case ${f##*/} in '' | *[!0-9]*) ;; *) n=$((n + 1)) ;; esac
    done
    [ "$n" -gt 0 ] && printf 'dpkg_journal %s\n' "$n"
    for f in /var/lib/gpuprov/*-restart-pending; do
        [ -f "$f" ] && printf 'restart_pending %s\n' "${f##*/}"
    done
    return 0
}
[ -n "$(recovery)" ] && cap recovery.txt recovery
# Reboots a role recorded against the boot it ran in (parsers/reboot.py; roles/infiniband:
# DOCA-OFED's ib_core is active only after one): this boot's id and each record's first line.
# roles/nvidia_driver's record (a driver installed, not loaded: nvidia_driver_reboot forbid)
# holds its reasons: its modification time beside the boot's (/proc/stat btime) says whether
# it was written on this boot.
reboot_pending() {
    records=$(for f in /var/lib/gpuprov/reboot-required-*; do
        [ -f "$f" ] && printf 'record %s %s\n' "${f##*/}" "$(head -n 1 "$f")"
    done
    f=/var/lib/gpuprov/reboot-required
    [ -f "$f" ] && printf 'since %s %s %s\n' "${f##*/}" "$(stat -c %Y "$f")" "$(head -n 1 "$f")")
    [ -n "$records" ] && printf 'boot_id %s\nboot_time %s\n%s\n' \
        "$(cat /proc/sys/kernel/random/boot_id)" \
        "$(sed -n 's/^btime //p' /proc/stat)" "$records"
    return 0
}
[ -n "$(reboot_pending)" ] && cap reboot-pending.txt reboot_pending
for r in "$CONVERGED"/*.json; do
    [ -f "$r" ] || continue
    role=${r##*/}
    role=${role%.json}
    # converged-ROLE.json and converged-ROLE-live.txt (orchestrator/parsers/converged.py)
    live=converged-$role-live.txt
    capo "converged-$role.json" cat "$r"
    # each record's live state (one dpkg-query for its packages, systemctl per unit) beside the rest
    bg capo "$live" converged_live "$r"
done
# the lab's GPU simulator marker (tests/lab/gpusim): every GPU fact of this host is simulated
for f in /etc/gpusim/profile.yaml /etc/gpusim/profile; do
    if [ -f "$f" ]; then
        cap gpusim.txt cat "$f"
        break
    fi
done

wait
if [ -n "$TMP" ]; then
    for f in "$TMP"/*; do
        [ -f "$f" ] && cat "$f"
    done
fi
printf '%s done\n' "$M"
