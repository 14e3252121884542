#!/usr/bin/env bash
# Build a release bucketfs and install it with its mount helper, systemd units
# and man page. Idempotent: rerunning overwrites the same files.
#
#   scripts/install.sh                          build, install under /usr/local
#   PREFIX=/usr DESTDIR=/tmp/pkg scripts/install.sh     stage for a package
#   BUCKETFS_SKIP_BUILD=1 BUCKETFS_BINARY=.build/debug/bucketfs scripts/install.sh
#                                               install an existing binary
#
# Variables (defaults in brackets):
#   PREFIX [/usr/local]   DESTDIR [empty: install for real]
#   BINDIR [$PREFIX/bin]                     bucketfs
#   SBINDIR [/sbin]                          mount.fuse.bucketfs; mount(8) looks
#                                            for helpers in /sbin (and /sbin/fs.d,
#                                            /sbin/fs) only, whatever PREFIX is
#   UNITDIR [$PREFIX/lib/systemd/system]     bucketfs@.service (systemd reads
#                                            /usr/local/lib/systemd/system too)
#   MANDIR [$PREFIX/share/man]               man8/bucketfs.8, man8/mount.fuse.bucketfs.8
#   DOCDIR [$PREFIX/share/doc/bucketfs]      examples: .mount unit, fstab lines, .env file
#   SYSCONFDIR [/etc]                        bucketfs/ (the services' .env files)
#   SWIFT_BUILD_FLAGS [--static-swift-stdlib]  extra `swift build` flags; the
#                                            static standard library keeps the
#                                            installed binary independent of the
#                                            Swift toolchain's location
# Installed files name the binary by its final path ($BINDIR/bucketfs, without
# DESTDIR).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
BINDIR=${BINDIR:-$PREFIX/bin}
SBINDIR=${SBINDIR:-/sbin}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
MANDIR=${MANDIR:-$PREFIX/share/man}
DOCDIR=${DOCDIR:-$PREFIX/share/doc/bucketfs}
SYSCONFDIR=${SYSCONFDIR:-/etc}
SWIFT_BUILD_FLAGS=${SWIFT_BUILD_FLAGS---static-swift-stdlib}

say() { printf '==> %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

for dir in "$PREFIX" "$BINDIR" "$SBINDIR" "$UNITDIR" "$MANDIR" "$DOCDIR" "$SYSCONFDIR"; do
  case $dir in /*) ;; *) die "directories must be absolute: $dir" ;; esac
done

# --- the binary -----------------------------------------------------------------
if [ "${BUCKETFS_SKIP_BUILD:-0}" = 1 ]; then
  binary=${BUCKETFS_BINARY:-$REPO/.build/release/bucketfs}
  [ -x "$binary" ] || die "BUCKETFS_SKIP_BUILD=1 but no executable at $binary (set BUCKETFS_BINARY)"
else
  command -v swift >/dev/null 2>&1 || die "swift not found on PATH (https://swift.org/install)"
  say "swift build -c release --product bucketfs $SWIFT_BUILD_FLAGS"
  # shellcheck disable=SC2086  # flags are words
  swift build -c release --product bucketfs $SWIFT_BUILD_FLAGS
  # shellcheck disable=SC2086
  binary="$(swift build -c release $SWIFT_BUILD_FLAGS --show-bin-path)/bucketfs"
fi
# VERSION is the package's one version; the build writes it into the binary
# (Plugins/VersionSource), so a binary that says otherwise is stale.
version=$(cat VERSION)
built=$("$binary" --version) || die "$binary --version failed"
[ "$built" = "$version" ] || die "$binary is version $built, but VERSION says $version: rebuild it"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- files that name the binary, the helper and the config dir --------------------
sed -e "s#^BUCKETFS=.*#BUCKETFS=$BINDIR/bucketfs#" \
  scripts/mount.fuse.bucketfs >"$work/mount.fuse.bucketfs"
for unit in bucketfs@.service mnt-photos.mount; do
  sed -e "s#/usr/local/bin/bucketfs#$BINDIR/bucketfs#g" \
    -e "s#/etc/bucketfs/#$SYSCONFDIR/bucketfs/#g" \
    -e "s#/sbin/mount.fuse.bucketfs#$SBINDIR/mount.fuse.bucketfs#g" \
    "systemd/$unit" >"$work/$unit"
done
sed -e "s#/sbin/mount.fuse.bucketfs#$SBINDIR/mount.fuse.bucketfs#g" systemd/fstab.example >"$work/fstab.example"
sed -e "s#/etc/bucketfs/#$SYSCONFDIR/bucketfs/#g" systemd/bucketfs.env.example >"$work/bucketfs.env.example"

# --- the man page: a roff frame around the --help texts ------------------------------
# Help text inside .nf/.fi: backslashes doubled as \e, a leading . or ' guarded.
roff_text() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
help_of() { COLUMNS=80 "$binary" "$@" --help | roff_text; }
{
  printf '.TH BUCKETFS 8 "" "bucketfs %s" "System Administration"\n' "$version"
  cat <<'EOF'
.SH NAME
bucketfs, mount.fuse.bucketfs \- mount a Google Cloud Storage bucket as a directory
.SH SYNOPSIS
.B bucketfs mount
.RI [ options ] " gs://BUCKET" [ /PREFIX ] " MOUNTPOINT"
.br
.B bucketfs unmount
.I MOUNTPOINT
.br
.B mount \-t fuse.bucketfs
.RI [ BUCKET | gs://BUCKET ][ /PREFIX ] " MOUNTPOINT"
.RB [ \-o
.IR options ]
.SH DESCRIPTION
bucketfs is a FUSE filesystem: objects appear as files, prefixes as
directories, and object metadata as extended attributes (user.*).
.SH MOUNT
.nf
EOF
  help_of mount
  printf '.fi\n.SH UNMOUNT\n.nf\n'
  help_of unmount
  cat <<'EOF'
.fi
.PP
.B umount
.I MOUNTPOINT
works too for a mount made by root.
.SH MOUNT HELPER AND FSTAB
.B mount \-t fuse.bucketfs
and
.I /etc/fstab
lines of type
.B fuse.bucketfs
run
.IR /sbin/mount.fuse.bucketfs ,
which turns the option list into
.B bucketfs mount
arguments:
.BR ro ", " rw ", " allow_other ", " uid= ", " gid= ", " file_mode= ", " dir_mode=
are mount options;
.B anonymous
is \-\-anonymous,
.BI credentials= FILE
sets GOOGLE_APPLICATION_CREDENTIALS,
.BR endpoint= ", " page_size= ", " metadata_ttl= ", " negative_ttl= ", "
.BR request_timeout= ", " retry_deadline= ", " log_level= ", " log_file= ", "
.BR access_token_file= ", " metrics_addr= ", " otlp_endpoint=
are the options of the same names;
.BR _netdev ", " nofail ", " noauto ", " x\-systemd.*
and the other generic options are for mount(8) and systemd.
.PP
.nf
gs://photos  /mnt/photos  fuse.bucketfs  _netdev,nofail,allow_other,anonymous,ro  0  0
.fi
.SH SYSTEMD
.B bucketfs@.service
mounts at the path its instance names
.RB ( "systemctl enable \-\-now bucketfs@mnt\-photos.service"
mounts at /mnt/photos, see
.BR systemd\-escape (1)),
reading BUCKET, OPTIONS and any GOOGLE_APPLICATION_CREDENTIALS or
STORAGE_EMULATOR_HOST from
.IR /etc/bucketfs/INSTANCE.env .
It is Type=notify: bucketfs sends READY=1 once the mount answers and
STOPPING=1 on SIGTERM, SIGINT or SIGHUP, after which it finishes what is in
flight, unmounts and exits 0. A systemd .mount unit with
Type=fuse.bucketfs works through the mount helper.
.SH ENVIRONMENT
.TP
.B GOOGLE_APPLICATION_CREDENTIALS
the credentials file, when \-\-credentials is not given.
.TP
.B STORAGE_EMULATOR_HOST
an emulator's address (plain http, anonymous).
.TP
.BR SSL_CERT_FILE ", " SSL_CERT_DIR
the CA certificates trusted for the service, unless \-\-ca\-file names them.
.TP
.BR OTEL_EXPORTER_OTLP_ENDPOINT ", " OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ", " OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
where traces and metrics go without \-\-otlp\-endpoint;
.BR OTEL_EXPORTER_OTLP_HEADERS " (and the per-signal " *_HEADERS )
are sent with every export;
.B OTEL_METRIC_EXPORT_INTERVAL
is the metrics' push interval in milliseconds (60000);
.BR OTEL_TRACES_EXPORTER=none " or " OTEL_METRICS_EXPORTER=none
turns one signal off.
.SH FILES
.I /etc/bucketfs/*.env
.br
EOF
  printf '.I %s/examples/\n' "$DOCDIR"
  cat <<'EOF'
.SH SEE ALSO
.BR mount (8),
.BR fstab (5),
.BR systemd.mount (5),
.BR systemd.service (5),
.BR fusermount3 (1)
EOF
} >"$work/bucketfs.8"
printf '.so man8/bucketfs.8\n' >"$work/mount.fuse.bucketfs.8"

# --- install ------------------------------------------------------------------
say "installing bucketfs $version into ${DESTDIR:-/} (PREFIX=$PREFIX)"
install -d -m 0755 "$DESTDIR$BINDIR" "$DESTDIR$SBINDIR" "$DESTDIR$UNITDIR" "$DESTDIR$MANDIR/man8" \
  "$DESTDIR$DOCDIR/examples" "$DESTDIR$SYSCONFDIR/bucketfs"
install -m 0755 "$binary" "$DESTDIR$BINDIR/bucketfs"
install -m 0755 "$work/mount.fuse.bucketfs" "$DESTDIR$SBINDIR/mount.fuse.bucketfs"
install -m 0644 "$work/bucketfs@.service" "$DESTDIR$UNITDIR/bucketfs@.service"
install -m 0644 "$work/bucketfs.8" "$work/mount.fuse.bucketfs.8" "$DESTDIR$MANDIR/man8/"
install -m 0644 "$work/mnt-photos.mount" "$work/fstab.example" "$work/bucketfs.env.example" \
  "$DESTDIR$DOCDIR/examples/"

for file in "$BINDIR/bucketfs" "$SBINDIR/mount.fuse.bucketfs" "$UNITDIR/bucketfs@.service" \
  "$MANDIR/man8/bucketfs.8" "$MANDIR/man8/mount.fuse.bucketfs.8" "$DOCDIR/examples/"; do
  printf '    %s\n' "$DESTDIR$file"
done
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
  say "run 'systemctl daemon-reload' to make systemd see bucketfs@.service"
fi
