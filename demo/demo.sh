#!/usr/bin/env bash
# The agentfs demo: mount a copy of a sample project, change it through
# the mount, and show that the project itself never changes.
#
#   demo/demo.sh [PATH-TO-AGENTFS]      (make demo builds it and runs this)
#
# Each step is a function named step_*, run in the order of STEPS; to add
# one, write the function and add its name to STEPS. A step that finds
# something wrong calls fail, which stops the demo with exit 1.
set -euo pipefail
unset MAKEFLAGS MFLAGS MAKELEVEL # the sample's make is not a sub-make of ours

AGENTFS=${1:-agentfs}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/agentfs-demo.XXXXXX")
proj=$work/project # the lower directory: a copy, so the repo is never touched
mnt=$work/ws       # the mountpoint

STEPS=(
	step_mount
	step_read
	step_edit
	step_delete
	step_rename_dir
	step_build
	step_snapshot
	step_branch
	step_bound
	step_status
	step_unmount
)

# --- helpers -----------------------------------------------------------

if [ -t 1 ]; then bold=$'\033[1m' dim=$'\033[2m' off=$'\033[0m'; else bold= dim= off=; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
# run shows a command (quoted as you would type it), then runs it.
run() {
	local shown=() a
	for a in "$@"; do
		if [[ $a =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then shown+=("$a"); else shown+=("'${a//\'/\'\\\'\'}'"); fi
	done
	printf '%s$ %s%s\n' "$dim" "${shown[*]}" "$off"
	"$@"
}
fail() {
	echo "demo: $*" >&2
	exit 1
}

# tree_sum prints a checksum of a tree: every path with its type, mode,
# owner, size, mtime and content.
tree_sum() {
	(
		cd "$1"
		find . -printf '%p %y %m %U:%G %s %T@ %l\n' | LC_ALL=C sort
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
	) | sha256sum | cut -c1-16
}

need_fuse() {
	if [ ! -e /dev/fuse ] && [ "$(id -u)" = 0 ]; then
		modprobe fuse 2>/dev/null || true
	fi
	[ -e /dev/fuse ] || fail "/dev/fuse is missing: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse"
	if ! command -v fusermount3 >/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			echo "installing fuse3"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null
		elif [ "$(id -u)" != 0 ]; then
			fail "fusermount3 is missing: install fuse3 (apt-get install fuse3)"
		fi
	fi
}

cleanup() {
	if grep -q " $mnt " /proc/self/mountinfo 2>/dev/null; then
		"$AGENTFS" unmount "$mnt" || true
	fi
	rm -rf "$work"
}

# --- steps -------------------------------------------------------------

step_mount() {
	say "mount the project $proj at $mnt"
	run "$AGENTFS" mount --lower "$proj" "$mnt"
	run ls -l "$mnt" "$mnt/src"
}

step_read() {
	say "read a file: it comes straight from the project"
	run cat "$mnt/src/util/greet.c"
}

step_edit() {
	say "edit it through the mount: the first write copies it up"
	run sed -i 's/hello, %s/hi there, %s/' "$mnt/src/util/greet.c"
	run cat "$mnt/src/util/greet.c"
	echo "the project's own copy is unchanged:"
	run cat "$proj/src/util/greet.c"
	cmp -s "$proj/src/util/greet.c" "$here/sample/src/util/greet.c" || fail "the project's file changed"
}

step_delete() {
	say "delete a file: the mount hides it (a whiteout); the project keeps it"
	run rm "$mnt/README.md"
	run ls "$mnt"
	[ ! -e "$mnt/README.md" ] || fail "README.md is still visible in the mount"
	run ls "$proj"
	[ -f "$proj/README.md" ] || fail "README.md vanished from the project"
}

step_rename_dir() {
	say "rename a directory of the project (the kernel's overlayfs says EXDEV here)"
	run mv "$mnt/src/util" "$mnt/src/lib"
	run ls "$mnt/src" "$proj/src"
	sed -i 's#src/util/#src/lib/#g' "$mnt/Makefile"
}

step_build() {
	say "build inside the mount: the output lands in the mount only"
	if ! command -v cc >/dev/null || ! command -v make >/dev/null; then
		echo "(skipped: no C compiler or make on this machine)"
		return
	fi
	(cd "$mnt" && run make && run ./hello)
	[ ! -e "$proj/hello" ] || fail "the build wrote into the project"
}

step_snapshot() {
	say "take a snapshot (instant: files are shared until changed), break something, restore"
	local id
	id=$(cd "$mnt" && "$AGENTFS" snapshot create -m "it builds" | tail -n 1)
	printf '%s$ agentfs snapshot create -m "it builds"%s\n%s\n' "$dim" "$off" "$id"
	run rm -r "$mnt/src"
	run ls "$mnt"
	(cd "$mnt" && run "$AGENTFS" restore "$id")
	run ls "$mnt" "$mnt/src"
	[ -f "$mnt/src/lib/greet.c" ] || fail "restore did not bring src back"
	(cd "$mnt" && run "$AGENTFS" snapshot list)
}

step_branch() {
	say "a branch: another attempt at the same path, switched for every process at once"
	(cd "$mnt" && run "$AGENTFS" branch create polite)
	(cd "$mnt" && run "$AGENTFS" branch switch polite)
	run sed -i 's/hi there, %s/good day, %s/' "$mnt/src/lib/greet.c"
	run grep -h 'good day' "$mnt/src/lib/greet.c"
	(cd "$mnt" && run "$AGENTFS" branch switch main)
	run grep -h 'hi there' "$mnt/src/lib/greet.c"
	grep -q 'hi there' "$mnt/src/lib/greet.c" || fail "main shows the branch's change"
	(cd "$mnt" && run "$AGENTFS" branch list)
}

step_bound() {
	say "two branches at once: a command bound to branch polite sees it, everyone else sees main"
	(cd "$mnt" && run "$AGENTFS" exec -b polite -- grep -h 'good day' src/lib/greet.c)
	run grep -h 'hi there' "$mnt/src/lib/greet.c"
	(cd "$mnt" && "$AGENTFS" exec -b polite -- grep -q 'good day' src/lib/greet.c) || fail "the bound command does not see its branch"
	grep -q 'hi there' "$mnt/src/lib/greet.c" || fail "an unbound process sees the bound branch"
}

step_status() {
	say "status of the mount (run from inside it)"
	(cd "$mnt/src" && run "$AGENTFS" status)
}

step_unmount() {
	say "unmount: the changes are discarded, the project was never modified"
	run "$AGENTFS" unmount "$mnt"
	after=$(tree_sum "$proj")
	echo "project checksum before: $before"
	echo "project checksum after:  $after"
	[ "$before" = "$after" ] || fail "the project changed: this is a bug"
	echo "the project is exactly as it was."
}

# --- main --------------------------------------------------------------

trap cleanup EXIT
need_fuse
command -v "$AGENTFS" >/dev/null || fail "$AGENTFS not found: run make demo, or pass the binary's path"
cp -a "$here/sample" "$proj"
mkdir -p "$mnt"
before=$(tree_sum "$proj")
for step in "${STEPS[@]}"; do
	"$step"
done
