#!/usr/bin/env bash
# The agentfs demo: mount a sample project, change it through the mount,
# and show that the project itself never changes.
set -euo pipefail
AGENTFS=${1:-agentfs}
work=$(mktemp -d /tmp/agentfs-demo.XXXXXX)
proj=$work/project
mnt=$work/ws
here=$(cd "$(dirname "$0")" && pwd)
cp -a "$here/sample" "$proj"
mkdir -p "$mnt"
cleanup() {
	"$AGENTFS" unmount "$mnt" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
tree_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16); }

before=$(tree_sum "$proj")
step "mount the project at $mnt"
run "$AGENTFS" mount --lower "$proj" "$mnt"
run ls -la "$mnt" "$mnt/src"

step "read a file: it comes straight from the project"
run cat "$mnt/src/util/greet.c"

step "edit it through the mount: the first write copies it up"
run sed -i 's/hello, %s/hi there, %s/' "$mnt/src/util/greet.c"
run cat "$mnt/src/util/greet.c"
echo "the project's own copy is unchanged:"
run cat "$proj/src/util/greet.c"

step "delete a file: a whiteout hides it; the project keeps it"
run rm "$mnt/README.md"
run ls "$mnt"
run ls "$proj"

step "rename a directory (overlayfs would say EXDEV)"
run mv "$mnt/src/util" "$mnt/src/lib"
run ls "$mnt/src"

step "status of the mount (from inside it)"
(cd "$mnt" && run "$AGENTFS" status)

step "unmount: the changes are discarded"
run "$AGENTFS" unmount "$mnt"
after=$(tree_sum "$proj")
echo "project checksum before: $before"
echo "project checksum after:  $after"
if [ "$before" != "$after" ]; then
	echo "the project changed: this is a bug" >&2
	exit 1
fi
echo "the project was never modified."
