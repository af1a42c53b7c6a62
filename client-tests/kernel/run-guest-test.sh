#!/bin/bash
# run-guest-test.sh: prove the Linux kernel NBD client (nbd.ko + nbd-client)
# against any nbdkit plugin, inside a throw-away QEMU guest.
#
#   run-guest-test.sh [--] nbdkit [-U -] PLUGIN [KEY=VALUE ...]
#   NBDKIT_ARGS="PLUGIN KEY=VALUE ..." run-guest-test.sh
#   run-guest-test.sh                     # nbdkit memory size=256M
#
# nbdkit runs on the host with --run starting QEMU (TCG, no network).  Two
# virtio-serial ports are bridged to nbdkit's unix socket, one NBD connection
# each, the second opened only after the first has ended; inside the guest
# socat turns each port back into a unix socket for nbd-client.  The
# guest makes ext4 on /dev/nbd0, writes data and small files, records
# sha256sums, syncs, unmounts, runs e2fsck, disconnects, re-attaches the
# export as /dev/nbd1 over the second (fresh) connection, runs e2fsck again,
# mounts read-only and verifies every checksum.  The guest's verdict is the
# serial console line "GUEST-RESULT: PASS" or "GUEST-RESULT: FAIL rc=N".
#
# Exit status: 0 PASS, 1 FAIL, 2 usage error, 77 QEMU cannot run here at all.
#
# Environment (all optional):
#   EXPORT=name     export name given to nbd-client -N (default "": default export)
#   NBDKIT_ARGS     plugin and parameters, used when no command is given
#   WORK=dir        cache of kernel, modules, base initramfs (/var/tmp/plugq-kernel-cache)
#   TIMEOUT=secs    hard limit around QEMU (480)
#   DATA_MB=n       size of the big random file (32); NFILES=n small files (200)
#   NBD_BLOCKSIZE=n nbd-client -b (4096); NBD_TIMEOUT=n nbd-client -t (120)
#   MKFS_OPTS=...   extra mke2fs options, e.g. "-E nodiscard"
#   ACCEL=tcg|kvm   (tcg); CPU (max, or host with kvm); SMP (1); MEM (768)
#   KERNEL_PKG=linux-image-X-amd64  kernel package (default: what linux-image-amd64 depends on)
#   KEEP=1          keep the per-run directory (console log, initramfs)

set -u -o pipefail

export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
export LC_ALL=C

WORK=${WORK:-/var/tmp/plugq-kernel-cache}
EXPORT=${EXPORT-}
TIMEOUT=${TIMEOUT:-480}
DATA_MB=${DATA_MB:-32}
NFILES=${NFILES:-200}
NBD_BLOCKSIZE=${NBD_BLOCKSIZE:-4096}
NBD_TIMEOUT=${NBD_TIMEOUT:-120}
MKFS_OPTS=${MKFS_OPTS:-}
ACCEL=${ACCEL:-tcg}
if [ "$ACCEL" = kvm ]; then CPU=${CPU:-host}; else CPU=${CPU:-max}; fi
SMP=${SMP:-1}
MEM=${MEM:-768}
KEEP=${KEEP:-0}

# Bump when the layout of the cached base initramfs changes.
BASE_LAYOUT=1
# Modules the guest needs; their dependencies are resolved on the host.
MODULES="nbd ext4 virtio_pci virtio_console crc32c_generic crc32c_intel"

T0=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[host +$(since "$T0")s] $*"; }
die() { echo "FAIL: $*" >&2; echo "RESULT: FAIL"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

usage() {
    sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
    exit "${1:-0}"
}

# ------------------------------------------------------------ nbdkit command
case "${1:-}" in
    -h|--help) usage 0 ;;
    --) shift ;;
esac
if [ $# -gt 0 ]; then
    cmd=("$@")
elif [ -n "${NBDKIT_ARGS:-}" ]; then
    read -r -a extra <<<"$NBDKIT_ARGS"
    cmd=(nbdkit "${extra[@]}")
    [ "$(basename -- "${extra[0]}")" = nbdkit ] && cmd=("${extra[@]}")
else
    cmd=(nbdkit memory size=256M)
fi
# nbdkit stops parsing options at the plugin name, so --run (and -U - when the
# caller gave no socket) go right after the nbdkit word.
nbdkit_at=-1
has_unix=0
for i in "${!cmd[@]}"; do
    w=${cmd[$i]}
    if [ "$nbdkit_at" -lt 0 ] && [ "$(basename -- "$w")" = nbdkit ]; then
        nbdkit_at=$i
    fi
    case "$w" in
        -U|-U?*|--unix|--unix=*) has_unix=1 ;;
        --run|--run=*) echo "the nbdkit command must not contain --run" >&2; exit 2 ;;
    esac
done
[ "$nbdkit_at" -ge 0 ] || { echo "no 'nbdkit' word in the command: ${cmd[*]}" >&2; exit 2; }
for v in DATA_MB NFILES NBD_BLOCKSIZE NBD_TIMEOUT TIMEOUT SMP MEM; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "$v must be a number" >&2; exit 2; }
done
case "$WORK" in /*) ;; *) WORK=$PWD/$WORK ;; esac
case "$WORK" in *,*) echo "WORK must not contain a comma (QEMU option syntax)" >&2; exit 2 ;; esac

# ------------------------------------------------------------ host packages
have() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
    [ "$(id -u)" = 0 ] || { echo "not root: cannot install $*" >&2; return 1; }
    local o=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=300)
    DEBIAN_FRONTEND=noninteractive apt-get install "${o[@]}" "$@" >"$WORK/apt.log" 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q -o DPkg::Lock::Timeout=300 >>"$WORK/apt.log" 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install "${o[@]}" "$@" >>"$WORK/apt.log" 2>&1; } ||
        { tail -n 20 "$WORK/apt.log" >&2; return 1; }
}

mkdir -p "$WORK" || die "cannot create WORK=$WORK"
exec 9>"$WORK/.lock"
flock 9   # one preparer at a time per cache; released before the guest runs

need=()
have qemu-system-x86_64 || need+=(qemu-system-x86)
have busybox || [ -x /bin/busybox ] || need+=(busybox-static)
have socat || need+=(socat)
{ have depmod && have modprobe && have modinfo; } || need+=(kmod)
have cpio || need+=(cpio)
have nbd-client || need+=(nbd-client)
{ have mke2fs && have e2fsck; } || need+=(e2fsprogs)
have nbdkit || need+=(nbdkit)
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt_install "${need[@]}" || echo "warning: apt-get install ${need[*]} failed" >&2
fi
have qemu-system-x86_64 || skip "qemu-system-x86_64 is not installed and could not be installed"
for c in socat depmod modprobe modinfo cpio nbd-client mke2fs e2fsck nbdkit dpkg-deb timeout flock; do
    have "$c" || die "required command '$c' is missing"
done
BUSYBOX=$(command -v busybox || echo /bin/busybox)

# Can QEMU run at all here?  Start a machine-less instance and quit it over QMP.
probe=$(printf '%s\n' '{"execute":"qmp_capabilities"}' '{"execute":"quit"}' |
        timeout 60 qemu-system-x86_64 -accel "$ACCEL" -machine none -nodefaults \
            -display none -monitor none -serial none -qmp stdio 2>&1)
probe_rc=$?
if [ $probe_rc -ne 0 ] || ! grep -q '"return"' <<<"$probe"; then
    skip "qemu-system-x86_64 -accel $ACCEL cannot run here (rc=$probe_rc): $(tail -n 3 <<<"$probe" | tr '\n' ' ')"
fi
log "host tools ready ($(qemu-system-x86_64 --version | head -n 1))"

# ------------------------------------------------------------ kernel + modules
kernel_pkg() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
# Extract the members matching the given tar patterns from a .deb (missing
# patterns are not an error: the caller checks what it got).
deb_extract() {
    local deb=$1 dest=$2; shift 2
    dpkg-deb --fsys-tarfile "$deb" |
        tar -x -C "$dest" --wildcards --no-same-owner "$@" 2>/dev/null
    return 0
}
# tar pattern for a module name: "_" and "-" are the same in module names.
mod_pattern() { printf '*/modules/%s/kernel/*/%s.ko*' "$KVER" "$(sed 's/[-_]/[-_]/g' <<<"$1")"; }

prepare_kernel() {
    local pkg=${KERNEL_PKG:-}
    [ -n "$pkg" ] || pkg=$(kernel_pkg)
    if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
        apt-get update -q -o DPkg::Lock::Timeout=300 >"$WORK/apt.log" 2>&1
        pkg=$(kernel_pkg)
    fi
    if [ -z "$pkg" ]; then
        # No package lists: fall back on a kernel cached earlier.
        local cached
        cached=$(ls -1d "$WORK"/kernel/*/.complete 2>/dev/null | sort -V | tail -n 1)
        [ -n "$cached" ] || die "cannot resolve the kernel package behind linux-image-amd64 (apt-cache depends)"
        pkg=linux-image-$(basename "$(dirname "$cached")")
    fi
    KVER=${pkg#linux-image-}
    KDIR=$WORK/kernel/$KVER
    [ -f "$KDIR/.complete" ] && return 0

    log "fetching $pkg"
    rm -rf "$KDIR"
    local tmp
    tmp=$(mktemp -d "$WORK/kernel-tmp.XXXXXX") || die "mktemp"
    chmod 755 "$tmp"
    id _apt >/dev/null 2>&1 && chown _apt "$tmp"
    (cd "$tmp" && apt-get download -q "$pkg" >"$tmp/download.log" 2>&1) ||
        { cat "$tmp/download.log" >&2; rm -rf "$tmp"; die "apt-get download $pkg failed"; }
    local deb
    deb=$(ls "$tmp"/*.deb) || die "no .deb downloaded"
    log "downloaded $(basename "$deb") ($(du -m "$deb" | cut -f1) MB); extracting the needed files"

    # Pass 1: the kernel image, the modules.* index files and the wanted
    # modules; then passes for dependencies until nothing new is needed.
    mkdir "$tmp/root"
    local want tried="" names n pats
    want=$MODULES
    pats=('./boot/vmlinuz-*' "*/modules/$KVER/modules.*")
    for n in $want; do pats+=("$(mod_pattern "$n")"); done
    deb_extract "$deb" "$tmp/root" "${pats[@]}"
    tried=" $want "
    for _pass in 1 2 3 4 5 6; do
        names=$(find "$tmp/root" -name '*.ko*' | while read -r f; do
                    modinfo -F depends "$f" | tr ',' '\n'
                    modinfo -F softdep "$f" | tr ' ' '\n' | grep -v ':$'
                done | sed '/^$/d' | sort -u)
        pats=()
        for n in $names; do
            case "$tried" in *" $n "*) continue ;; esac
            tried="$tried$n "
            pats+=("$(mod_pattern "$n")")
        done
        [ ${#pats[@]} -eq 0 ] && break
        deb_extract "$deb" "$tmp/root" "${pats[@]}"
    done

    local vmlinuz moddir
    vmlinuz=$(ls "$tmp"/root/boot/vmlinuz-* 2>/dev/null | head -n 1)
    [ -n "$vmlinuz" ] || die "no boot/vmlinuz-* in $pkg"
    moddir=$(ls -d "$tmp"/root/lib/modules/"$KVER" "$tmp"/root/usr/lib/modules/"$KVER" 2>/dev/null | head -n 1)
    [ -n "$moddir" ] || die "no modules for $KVER in $pkg"
    # busybox insmod wants plain .ko files.
    find "$moddir" -name '*.ko.xz' -exec xz -d {} + 2>/dev/null
    find "$moddir" -name '*.ko.zst' -exec sh -c 'for f; do zstd -q -d --rm "$f"; done' _ {} + 2>/dev/null
    find "$moddir" -name '*.ko.gz' -exec gzip -d {} + 2>/dev/null

    mkdir -p "$KDIR/lib/modules"
    mv "$moddir" "$KDIR/lib/modules/$KVER"
    mv "$vmlinuz" "$KDIR/vmlinuz"
    rm -rf "$tmp"
    depmod -b "$KDIR" "$KVER" || die "depmod failed"
    # Load order, resolved without the host's /etc/modprobe.d options.
    modprobe -C /dev/null -d "$KDIR" -S "$KVER" --show-depends -a $MODULES 2>"$KDIR/modprobe.err" |
        awk '$1 == "insmod" { print $2 }' |
        sed "s|^$KDIR/lib/modules/$KVER/||" | awk '!seen[$0]++' >"$KDIR/load-order"
    for n in nbd ext4 virtio_console; do
        grep -Eq "/$n\.ko$" "$KDIR/load-order" ||
            grep -Eq "/$n\.ko$" "$KDIR/lib/modules/$KVER/modules.builtin" ||
            die "module $n not found in $pkg ($(cat "$KDIR/modprobe.err"))"
    done
    touch "$KDIR/.complete"
    # Keep the cache small: only the current kernel.
    for d in "$WORK"/kernel/*/; do
        [ "${d%/}" = "$KDIR" ] || rm -rf "${d%/}"
    done
    log "kernel $KVER cached in $KDIR ($(du -sh "$KDIR" | cut -f1)): $(tr '\n' ' ' <"$KDIR/load-order" | sed 's|[^ ]*/||g; s|\.ko||g')"
}

# ------------------------------------------------------------ base initramfs
GUEST_TOOLS="nbd-client mke2fs e2fsck socat"
copy_with_libs() {
    local bin=$1 dest=$2 lib
    install -D -m 755 "$bin" "$dest" || return 1
    for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*'); do
        [ -e "$stage$lib" ] && continue
        mkdir -p "$stage$(dirname "$lib")" && cp -L "$lib" "$stage$lib" || return 1
    done
}
prepare_initramfs() {
    local stamp b
    stamp=$( {
        echo "layout $BASE_LAYOUT kernel $KVER"
        cat "$KDIR/load-order"
        for b in "$BUSYBOX" $(for t in $GUEST_TOOLS; do command -v "$t"; done); do
            stat -L -c '%n %s %Y' "$b"
            ldd "$b" 2>/dev/null | grep -o '/[^ ]*' | xargs -r stat -L -c '%n %s %Y'
        done
    } | sha256sum | cut -c1-16)
    BASE=$WORK/initramfs-base-$stamp.cpio
    [ -f "$BASE" ] && return 0

    log "building the base initramfs"
    stage=$(mktemp -d "$WORK/stage.XXXXXX") || die "mktemp"
    mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,opt/bin,etc,proc,sys,dev,run,mnt,tmp,lib/modules}
    copy_with_libs "$BUSYBOX" "$stage/bin/busybox" || die "copy busybox"
    for t in $GUEST_TOOLS; do
        copy_with_libs "$(command -v "$t")" "$stage/opt/bin/$t" || die "copy $t"
    done
    [ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$stage/etc/"
    ln -s /proc/mounts "$stage/etc/mtab"
    cp -a "$KDIR/lib/modules/$KVER" "$stage/lib/modules/"
    cp "$KDIR/load-order" "$stage/lib/modules/load-order"
    (cd "$stage" && find . | cpio -o -H newc -R 0:0 --quiet) >"$BASE.tmp" || die "cpio"
    mv "$BASE.tmp" "$BASE"
    rm -rf "$stage"
    for b in "$WORK"/initramfs-base-*.cpio; do [ "$b" = "$BASE" ] || rm -f "$b"; done
    log "base initramfs $(basename "$BASE") ($(du -m "$BASE" | cut -f1) MB)"
}

prepare_kernel
T_KERNEL=$(date +%s.%N)
prepare_initramfs
flock -u 9
exec 9>&-
T_PREP=$(date +%s.%N)

# ------------------------------------------------------------ per-run files
# (unix socket paths live in it: keep it short)
tmpbase=${TMPDIR:-/tmp}
[ ${#tmpbase} -le 60 ] || tmpbase=/tmp
RUNDIR=$(mktemp -d "$tmpbase/plugq-guest.XXXXXX") || die "mktemp"
LOG=$RUNDIR/console.log
case "$RUNDIR" in *,*) die "TMPDIR must not contain a comma" ;; esac
NBDKIT_PID=
cleanup() {
    # Interrupted while the guest runs: stop QEMU and nbdkit (ours, by pid).
    if [ -n "$NBDKIT_PID" ]; then
        [ -s "$RUNDIR/qemu.pid" ] && kill "$(cat "$RUNDIR/qemu.pid")" 2>/dev/null
        kill "$NBDKIT_PID" 2>/dev/null
    fi
    if [ "$KEEP" = 1 ]; then echo "kept $RUNDIR"; else rm -rf "$RUNDIR"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Single-quote a value for the guest's /bin/sh.
shq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

mkdir "$RUNDIR/extra"
{
    echo "EXPORT=$(shq "$EXPORT")"
    echo "DATA_MB=$DATA_MB NFILES=$NFILES"
    echo "NBD_BLOCKSIZE=$NBD_BLOCKSIZE NBD_TIMEOUT=$NBD_TIMEOUT"
    echo "MKFS_OPTS=$(shq "$MKFS_OPTS")"
} >"$RUNDIR/extra/test.conf"

cat >"$RUNDIR/extra/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
/bin/busybox --install -s
export PATH=/opt/bin:/bin:/sbin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
sh /test.sh
rc=$?
if [ "$rc" -eq 0 ]; then echo "GUEST-RESULT: PASS"; else echo "GUEST-RESULT: FAIL rc=$rc"; fi
sync
poweroff -f
EOF

cat >"$RUNDIR/extra/test.sh" <<'EOF'
# busybox sh prefers its own applets (mke2fs, nbd-client, ...) to PATH, so the
# real tools are called by their full path in /opt/bin.
. /test.conf
say() { read -r up _ </proc/uptime; echo "[guest ${up}s] $*"; }
fail() { rc=$1; shift; say "FAILED: $*"; exit "$rc"; }
now() { read -r up _ </proc/uptime; echo "$up"; }
rate() { awk -v mb="$1" -v a="$2" -v b="$(now)" 'BEGIN { d = b - a; if (d <= 0) d = 0.01; printf "%.1f MiB/s", mb / d }'; }

say "kernel $(uname -r), export '$EXPORT', ${DATA_MB} MiB + $NFILES files"

# 1. modules, in the order resolved on the host
while read -r ko; do
    name=${ko##*/}; name=${name%.ko}
    opts=
    [ "$name" = nbd ] && opts=nbds_max=4
    insmod "/lib/modules/$(uname -r)/$ko" $opts 2>/tmp/insmod.err ||
        echo "  insmod $name failed (ignored): $(cat /tmp/insmod.err)"
done </lib/modules/load-order
[ -b /dev/nbd0 ] && [ -b /dev/nbd1 ] || fail 10 "no /dev/nbd0 and /dev/nbd1 after loading nbd"
say "modules loaded"

# 2. virtio-serial ports by name (no udev: look in sysfs)
port_dev() {
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        for p in /sys/class/virtio-ports/vport*; do
            [ -r "$p/name" ] && [ "$(cat "$p/name")" = "$1" ] && { echo "/dev/${p##*/}"; return 0; }
        done
        sleep 0.5
    done
    return 1
}

# attach PORT DEV: bridge the port to a unix socket and connect nbd-client to it
attach() {
    port=$1 dev=$2
    pdev=$(port_dev "$port") || fail 11 "virtio-serial port $port not found"
    rm -f "/run/$port.sock"
    # ignoreeof: the port reads EOF until the host side has connected.
    /opt/bin/socat "UNIX-LISTEN:/run/$port.sock,unlink-early" "$pdev,ignoreeof" &
    SOCAT_PID=$!
    i=0
    while [ ! -S "/run/$port.sock" ]; do
        i=$((i + 1)); [ $i -gt 100 ] && fail 12 "socat did not listen on /run/$port.sock"
        sleep 0.1
    done
    if [ -n "$EXPORT" ]; then set -- -N "$EXPORT"; else set --; fi
    /opt/bin/nbd-client -unix "/run/$port.sock" "$dev" "$@" -b "$NBD_BLOCKSIZE" -t "$NBD_TIMEOUT" ||
        fail 13 "nbd-client could not attach $dev via $port"
    sz=$(cat "/sys/block/${dev#/dev/}/size")
    [ "$sz" -gt 0 ] || fail 14 "$dev has size 0"
    say "attached $dev via $pdev ($port): $((sz / 2048)) MiB, logical block size $(cat /sys/block/${dev#/dev/}/queue/logical_block_size)"
}

# detach DEV: disconnect and let socat finish
detach() {
    /opt/bin/nbd-client -d "$1" || fail "$2" "nbd-client -d $1 failed"
    i=0
    while kill -0 "$SOCAT_PID" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 50 ] && { kill "$SOCAT_PID"; break; }
        sleep 0.1
    done
}

attach nbd0 /dev/nbd0

# 3. filesystem and data
t=$(now)
/opt/bin/mke2fs -t ext4 -F -q $MKFS_OPTS /dev/nbd0 || fail 20 "mke2fs -t ext4 /dev/nbd0"
say "mkfs.ext4 done ($(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }') s)"
mount -t ext4 /dev/nbd0 /mnt || fail 21 "mount /dev/nbd0"
t=$(now)
dd if=/dev/urandom of=/mnt/big bs=65536 count=$((DATA_MB * 16)) 2>/dev/null || fail 22 "writing /mnt/big"
seq 1 100000 >/mnt/seq || fail 22 "writing /mnt/seq"
mkdir /mnt/dir
i=0
while [ $i -lt "$NFILES" ]; do
    dd if=/dev/urandom of=/mnt/dir/f$i bs=$(( (i * 131) % 7000 + 1 )) count=1 2>/dev/null ||
        fail 22 "writing /mnt/dir/f$i"
    i=$((i + 1))
done
(cd /mnt && find . -type f | sort | xargs sha256sum) >/run/sums || fail 23 "sha256sum"
nsums=$(wc -l </run/sums)
sync || fail 24 "sync"
say "wrote $DATA_MB MiB + $nsums files, synced ($(rate "$DATA_MB" "$t"))"
df -k /mnt | tail -n 1
umount /mnt || fail 25 "umount /mnt"
/opt/bin/e2fsck -f -n /dev/nbd0 || fail 26 "e2fsck after write (rc=$?)"
say "e2fsck clean"
detach /dev/nbd0 27
say "disconnected /dev/nbd0"

# 4. fresh connection, nothing cached
echo 3 >/proc/sys/vm/drop_caches
attach nbd1 /dev/nbd1
/opt/bin/e2fsck -f -n /dev/nbd1 || fail 30 "e2fsck after re-attach (rc=$?)"
say "e2fsck clean on the fresh connection"
mount -t ext4 -o ro /dev/nbd1 /mnt || fail 31 "mount -o ro /dev/nbd1"
t=$(now)
(cd /mnt && sha256sum -c /run/sums) >/tmp/check 2>&1
ok=$(grep -c ': OK$' /tmp/check)
if [ "$ok" -ne "$nsums" ]; then
    grep -v ': OK$' /tmp/check | head -n 20
    fail 32 "only $ok of $nsums checksums match after re-attach"
fi
nfound=$(cd /mnt && find . -type f | wc -l)
[ "$nfound" -eq "$nsums" ] || fail 33 "$nfound files on disk, $nsums expected"
say "all $ok checksums verified after re-attach ($(rate "$DATA_MB" "$t") read)"
umount /mnt || fail 34 "umount /mnt (ro)"
detach /dev/nbd1 35
say "disconnected /dev/nbd1"
exit 0
EOF
chmod 755 "$RUNDIR/extra/init" "$RUNDIR/extra/test.sh"
(cd "$RUNDIR/extra" && find . | cpio -o -H newc -R 0:0 --quiet) >"$RUNDIR/extra.cpio" || die "cpio"
# The kernel unpacks concatenated cpio archives one after the other.
cat "$BASE" "$RUNDIR/extra.cpio" >"$RUNDIR/initrd.cpio" || die "initrd"

# ------------------------------------------------------------ run
# nbdkit --run starts launch.sh, which starts QEMU and the host side of the
# bridge.  QEMU listens on one unix socket per virtio-serial port; the host
# joins nbd0.sock to nbdkit, and only once that first NBD connection has
# ended (the guest disconnected) nbd1.sock, so the second connection is fresh
# and no idle connection sits in nbdkit's handshake meanwhile (which would
# block plugins with a serializing thread model).
q() { printf '%q' "$1"; }
# shellcheck disable=SC2054 # the commas are QEMU's
qemu=(timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel "$ACCEL" -cpu "$CPU"
      -smp "$SMP" -m "$MEM" -nodefaults -no-user-config -nic none -display none -no-reboot
      -serial "file:$LOG" -pidfile "$RUNDIR/qemu.pid"
      -kernel "$KDIR/vmlinuz" -initrd "$RUNDIR/initrd.cpio"
      -device virtio-serial-pci
      -chardev "socket,id=c0,path=$RUNDIR/nbd0.sock,server=on,wait=off"
      -device virtserialport,chardev=c0,name=nbd0
      -chardev "socket,id=c1,path=$RUNDIR/nbd1.sock,server=on,wait=off"
      -device virtserialport,chardev=c1,name=nbd1
      -append "console=ttyS0 panic=-1 quiet")
{
    echo "#!/bin/bash"
    echo '# $1: nbdkit unix socket'
    printf '%q ' "${qemu[@]}"; echo '</dev/null &'
    echo 'qpid=$!'
    echo "rundir=$(q "$RUNDIR")"
    cat <<'EOS'
(
    for port in nbd0 nbd1; do
        while [ ! -S "$rundir/$port.sock" ]; do
            kill -0 "$qpid" 2>/dev/null || exit 0
            sleep 0.1
        done
        socat "UNIX-CONNECT:$rundir/$port.sock" "UNIX-CONNECT:$1" || exit 0
    done
) &
wait "$qpid"
rc=$?
wait
exit "$rc"
EOS
} >"$RUNDIR/launch.sh"
run="bash $(q "$RUNDIR/launch.sh") \"\$unixsocket\""
full=("${cmd[@]:0:nbdkit_at+1}" --run "$run")
[ $has_unix = 1 ] || full+=(-U -)
full+=("${cmd[@]:nbdkit_at+1}")

show() {
    for w; do
        case "$w" in *[!A-Za-z0-9_./=:,+-]*) printf ' %s' "$(shq "$w")" ;; *) printf ' %s' "$w" ;; esac
    done; echo
}
log "prepared in $(awk -v a="$T0" -v b="$T_PREP" 'BEGIN { printf "%.1f", b - a }') s; starting:"
show "${full[@]}"
echo "  with launch.sh running:"
show "${qemu[@]}"
: >"$LOG"
T_GUEST=$(date +%s.%N)
"${full[@]}" </dev/null &
NBDKIT_PID=$!
tail -n +1 -s 0.5 -F --pid=$NBDKIT_PID "$LOG" 2>/dev/null | tr -d '\r' &
TAIL_PID=$!
wait $NBDKIT_PID
rc=$?
NBDKIT_PID=
wait $TAIL_PID
T_END=$(date +%s.%N)

result=$(tr -d '\r' <"$LOG" | grep -a -o 'GUEST-RESULT: .*' | tail -n 1)
timing="timings: prepare $(awk -v a="$T0" -v b="$T_PREP" 'BEGIN { printf "%.1f", b - a }') s"
timing+=" (kernel $(awk -v a="$T0" -v b="$T_KERNEL" 'BEGIN { printf "%.1f", b - a }') s)"
timing+=", guest $(awk -v a="$T_GUEST" -v b="$T_END" 'BEGIN { printf "%.1f", b - a }') s"
timing+=", total $(since "$T0") s"
echo "$timing"
case "$rc" in
    124|137) echo "QEMU was stopped by the ${TIMEOUT} s timeout" ;;
    0) ;;
    *) echo "nbdkit/QEMU exited with status $rc" ;;
esac
if [ "$result" = "GUEST-RESULT: PASS" ]; then
    echo "RESULT: PASS"
    exit 0
fi
echo "guest verdict: ${result:-none}"
echo "RESULT: FAIL"
[ "$KEEP" = 1 ] || { KEEP=1; rm -f "$RUNDIR"/*.cpio; }
exit 1
