#!/bin/sh
# Entrypoint of the cheeto image (one image, every role: see README "Containers").
#
#  1. munge (site workers only): a key mounted at $MUNGE_KEY is COPIED to
#     /etc/munge/munge.key (0400, owned by munge; the mount itself is never chowned or
#     chmodded) and munged is started as the munge user. Needs the container to start
#     as root (docker run --user 0); the entrypoint then drops to $CHEETO_RUN_AS.
#  2. git deploy key (puppet_sync): a key mounted at $GIT_SSH_KEY is copied to
#     $CHEETO_SSH_DIR/git_id (0400) and GIT_SSH_COMMAND is exported with host keys
#     VERIFIED (StrictHostKeyChecking=yes) against the baked GitHub keys plus, when
#     mounted, $KNOWN_HOSTS (which adds to the baked keys, never replaces them).
#  3. the API's token key (`daemon api` only): it must outlive the container, or a
#     recreated container signs everyone out. The key is kept in the store
#     (api.jwt_key: store), or its file (api.jwt_key_file, default
#     $STATE_DIRECTORY/jwt.key = /var/lib/cheeto/state/jwt.key) is on a mounted volume
#     or bind mount: its mount is looked up in $MOUNTINFO (/proc/self/mountinfo). The
#     container's own layer, or an anonymous volume (docker run without -v for the
#     image's VOLUME: gone with `docker run --rm` or a recreated container), is refused
#     with one line, exit 2. CHEETO_EPHEMERAL_KEY=1 allows it (a throwaway demo).
#  4. exec cheeto "$@" (as $CHEETO_RUN_AS when started as root).
#
# Every path can be overridden, and ROOT prefixes all of the defaults, so the tests run
# this script against a temporary directory.
set -eu

ROOT=${ROOT:-}
MUNGE_KEY=${MUNGE_KEY:-$ROOT/run/munge.key}
MUNGE_USER=${MUNGE_USER:-munge}
MUNGE_ETC=${MUNGE_ETC:-$ROOT/etc/munge}
MUNGE_RUN=${MUNGE_RUN:-$ROOT/run/munge}
MUNGE_STATE=${MUNGE_STATE:-$ROOT/var/lib/munge}
MUNGE_LOG=${MUNGE_LOG:-$ROOT/var/log/munge}
MUNGED=${MUNGED:-munged}
MUNGED_ARGS=${MUNGED_ARGS:-}
GIT_SSH_KEY=${GIT_SSH_KEY:-$ROOT/run/cheeto/git-ssh-key}
KNOWN_HOSTS=${KNOWN_HOSTS:-$ROOT/run/cheeto/known_hosts}
BAKED_KNOWN_HOSTS=${BAKED_KNOWN_HOSTS:-$ROOT/etc/cheeto/ssh/known_hosts.github}
CHEETO_SSH_DIR=${CHEETO_SSH_DIR:-$ROOT/var/lib/cheeto/ssh}
CHEETO_RUN_AS=${CHEETO_RUN_AS:-cheeto}
MOUNTINFO=${MOUNTINFO:-/proc/self/mountinfo}
CHEETO_EPHEMERAL_KEY=${CHEETO_EPHEMERAL_KEY:-}

say() { printf 'docker-entrypoint: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
die_config() { say "error: $*"; exit 2; }

is_root=false
[ "$(id -u)" = 0 ] && is_root=true

# Who runs cheeto: $CHEETO_RUN_AS when we start as root (a name, uid or uid:gid; "root"
# keeps root), else whoever we already are.
run_uid=$(id -u)
run_gid=$(id -g)
if $is_root && [ "$CHEETO_RUN_AS" != root ]; then
    case $CHEETO_RUN_AS in
        *:*) run_uid=${CHEETO_RUN_AS%%:*}; run_gid=${CHEETO_RUN_AS#*:} ;;
        *) run_uid=$(id -u "$CHEETO_RUN_AS") || die "CHEETO_RUN_AS: no user $CHEETO_RUN_AS"
           run_gid=$(id -g "$CHEETO_RUN_AS") ;;
    esac
fi

# -- 1. munge ---------------------------------------------------------------------------
if [ -f "$MUNGE_KEY" ]; then
    $is_root || die "a munge key is mounted at $MUNGE_KEY, but munged must be started by" \
        "root: run the container with --user 0 (cheeto itself still drops to" \
        "CHEETO_RUN_AS=$CHEETO_RUN_AS)"
    install -d -m 0700 -o "$MUNGE_USER" -g "$MUNGE_USER" "$MUNGE_ETC" "$MUNGE_STATE" \
        "$MUNGE_LOG"
    install -d -m 0755 -o "$MUNGE_USER" -g "$MUNGE_USER" "$MUNGE_RUN"
    # a copy: a read-only host mount is never chowned or chmodded
    install -m 0400 -o "$MUNGE_USER" -g "$MUNGE_USER" "$MUNGE_KEY" "$MUNGE_ETC/munge.key"
    MUNGE_SOCKET=$MUNGE_RUN/munge.socket.2
    # shellcheck disable=SC2086  # MUNGED_ARGS is a list of extra options
    runuser -u "$MUNGE_USER" -- "$MUNGED" --key-file="$MUNGE_ETC/munge.key" \
        --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_RUN/munged.pid" \
        --seed-file="$MUNGE_STATE/munged.seed" --log-file="$MUNGE_LOG/munged.log" \
        $MUNGED_ARGS || die "munged did not start (see $MUNGE_LOG/munged.log)"
    if command -v munge >/dev/null 2>&1; then
        munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 ||
            die "munged runs but a credential round trip failed (is the key right?)"
    fi
    export MUNGE_SOCKET
    say "munged started with the key from $MUNGE_KEY"
fi

# -- 2. git deploy key ----------------------------------------------------------------------
if [ -f "$GIT_SSH_KEY" ]; then
    install -d -m 0700 "$CHEETO_SSH_DIR"
    install -m 0400 "$GIT_SSH_KEY" "$CHEETO_SSH_DIR/git_id"
    if $is_root; then
        chown "$run_uid:$run_gid" "$CHEETO_SSH_DIR" "$CHEETO_SSH_DIR/git_id"
    fi
    known=""
    for file in "$BAKED_KNOWN_HOSTS" "$KNOWN_HOSTS"; do
        if [ -f "$file" ]; then
            case $file in *[[:space:]\'\"]*) die "no spaces or quotes in host key paths: $file" ;; esac
            known="${known:+$known }$file"
        fi
    done
    [ -n "$known" ] || die "no SSH host keys: neither $BAKED_KNOWN_HOSTS nor $KNOWN_HOSTS" \
        "exists, and host keys are always verified"
    GIT_SSH_COMMAND="ssh -i '$CHEETO_SSH_DIR/git_id' -o IdentitiesOnly=yes -o BatchMode=yes"
    GIT_SSH_COMMAND="$GIT_SSH_COMMAND -o StrictHostKeyChecking=yes -o UpdateHostKeys=no"
    GIT_SSH_COMMAND="$GIT_SSH_COMMAND -o 'UserKnownHostsFile=$known'"
    export GIT_SSH_COMMAND
    # commit identity from the environment (no ~/.gitconfig to write)
    export GIT_AUTHOR_NAME="${GIT_AUTHOR_NAME:-cheeto-daemon}"
    export GIT_AUTHOR_EMAIL="${GIT_AUTHOR_EMAIL:-cheeto-daemon@localhost}"
    export GIT_COMMITTER_NAME="${GIT_COMMITTER_NAME:-$GIT_AUTHOR_NAME}"
    export GIT_COMMITTER_EMAIL="${GIT_COMMITTER_EMAIL:-$GIT_AUTHOR_EMAIL}"
    say "git deploy key installed; host keys from $known"
fi

# -- 3. the API's token key ---------------------------------------------------------------
# Is this `cheeto [options] daemon api ...` (and not a quick --help)?
is_api=false
previous=
for arg in "$@"; do
    case $arg in
        -h|--help|--key-path) is_api=false; break ;;
        -*) ;;
        *) [ "$previous" = daemon ] && [ "$arg" = api ] && is_api=true
           previous=$arg ;;
    esac
done

# The mount holding PATH, as "<root in its file system> <mount point>" (the longest mount
# point that is PATH or one of its parents; octal escapes as mountinfo writes them).
mount_of() {
    awk -v path="$1" '
        function unescape(s) { gsub(/\\040/, " ", s); gsub(/\\011/, "\t", s); return s }
        { point = unescape($5)
          if (point == "/" || path == point || index(path, point "/") == 1) {
              if (length(point) > best) { best = length(point); found = unescape($4) " " point }
          } }
        END { print found }' "$MOUNTINFO"
}

if $is_api && [ -z "$CHEETO_EPHEMERAL_KEY" ]; then
    # cheeto says why in one line when it cannot tell (a bad config): exit with its code
    key=$(cheeto "$@" --key-path) || exit $?
    if [ "$key" != store ]; then
        [ -r "$MOUNTINFO" ] || die_config "cannot read $MOUNTINFO to check the token key's volume"
        mount=$(mount_of "$key")
        source_root=${mount%% *}
        point=${mount#* }
        case $key in /*) ;; *) point=/ ;; esac
        if [ -z "$mount" ] || [ "$point" = / ]; then
            die_config "the API's token key $key is not on a volume: a recreated container" \
                "would make a new key and sign everyone out. Mount a volume at" \
                "$(dirname "$key") (docker run -v cheeto-api-state:$(dirname "$key")), or" \
                "set api.jwt_key: store (docs/deployment-containers.md)"
        fi
        case $source_root in
            */volumes/[0-9a-f][0-9a-f][0-9a-f][0-9a-f]*[0-9a-f]/_data)
                anonymous=${source_root%/_data}
                anonymous=${anonymous##*/}
                if [ "${#anonymous}" -eq 64 ]; then
                    die_config "the API's token key $key is on an anonymous volume ($point):" \
                        "it is gone with the container (docker run --rm, a recreate). Name" \
                        "it: docker run -v cheeto-api-state:$point, or set api.jwt_key: store"
                fi ;;
        esac
    fi
fi

# -- 4. cheeto --------------------------------------------------------------------------------
if $is_root && [ "$CHEETO_RUN_AS" != root ]; then
    exec setpriv --reuid="$run_uid" --regid="$run_gid" --clear-groups -- cheeto "$@"
fi
exec cheeto "$@"
