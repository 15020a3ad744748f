#!/bin/sh
# Build, sign and index the rpm TEST DOUBLES on a lab host (Debian's rpm, gnupg, createrepo-c).
# Usage: build.sh SRC OUT. SRC holds <repo path>/*.spec (+ their Source files) and
# <repo path>/modules.yaml, written by rpmrepo/build.py; OUT receives the repositories at the
# same paths, each with repodata/ (modules included) and the public key of its signer:
# <cuda repo>/testdouble.pub (stands in for NVIDIA's D42D0685.pub),
# epel/RPM-GPG-KEY-EPEL-9.testdouble and os/<dist>/<arch>/testdouble-os.pub (the OS's kernels). Keys are made here, per build, and never leave the host.
set -eu
src=$1
out=$2
export GNUPGHOME="$out/.gnupg"
mkdir -p "$GNUPGHOME" && chmod 700 "$GNUPGHOME"
key() { # uid -> generate once
    gpg --batch --list-keys "$1" >/dev/null 2>&1 ||
        gpg --batch --passphrase '' --quick-gen-key "$1" rsa3072 sign never 2>/dev/null
}
key "gpuprov lab CUDA test double <cuda-testdouble@gpuprov.invalid>"
key "gpuprov lab EPEL test double <epel-testdouble@gpuprov.invalid>"
key "gpuprov lab OS test double <os-testdouble@gpuprov.invalid>"
cd "$src"
for dir in $(find . -name '*.spec' -printf '%h\n' | sort -u); do
    dir=${dir#./}
    case "$dir" in
        epel/*) signer="gpuprov lab EPEL test double"; pub="$out/epel/RPM-GPG-KEY-EPEL-9.testdouble" ;;
        os/*) signer="gpuprov lab OS test double"; pub="$out/$dir/testdouble-os.pub" ;;
        *) signer="gpuprov lab CUDA test double"; pub="$out/$dir/testdouble.pub" ;;
    esac
    mkdir -p "$out/$dir"
    for spec in "$dir"/*.spec; do
        rpmbuild -bb --quiet --define "_topdir $out/.build" --define "_sourcedir $src/$dir" \
            --define "_rpmdir $out/$dir" --define "_build_id_links none" "$spec" >/dev/null
    done
    # rpmsign warns once per package that stdin is no terminal: keep its log for failures.
    find "$out/$dir" -name '*.rpm' -print0 | xargs -0 rpmsign --addsign \
        --define "_gpg_name $signer" --define "__gpg /usr/bin/gpg" >"$out/.sign.log" 2>&1 ||
        { grep -v GPG_TTY "$out/.sign.log" >&2; exit 1; }
    gpg --batch --armor --export "$signer" >"$pub"
    createrepo_c --quiet "$out/$dir"
    if [ -f "$dir/modules.yaml" ]; then
        modifyrepo_c --mdtype=modules "$dir/modules.yaml" "$out/$dir/repodata" >/dev/null
    fi
done
rm -rf "$out/.build" "$out/.sign.log"
echo "built: $(find "$out" -name '*.rpm' | wc -l) test-double rpms"
