package daemon

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/agentfs/agentfs/kernelinfo"
)

// User namespaces for agentfs run as a normal user.
//
// A normal user cannot mount, and FUSE mounts made through fusermount3
// live in the shared mount namespace, where the project path cannot be
// covered. So agentfs run, as a normal user, starts its session in a
// new user namespace (its user is root there: uid_map "0 UID 1") with a
// new mount namespace, where the daemon mounts directly; the command
// then runs in a nested user namespace that maps the user back to its
// own uid (uid_map "UID 0 1"), so that it sees itself, the project's
// files and the files it creates as the user's, and keeps no
// capabilities.

// UsernsError explains that no user namespace could be made (err is
// what the kernel said), with the fix.
func UsernsError(err error) error {
	why := "the kernel does not allow unprivileged user namespaces here"
	if errors.Is(err, syscall.ENOSPC) {
		// clone(2) says ENOSPC for a count of user namespaces at its
		// limit, 0 included: "no space left on device" misleads.
		err = errors.New("the limit of user namespaces is reached (ENOSPC)")
	}
	if r := kernelinfo.UsernsRestrictions(); len(r) > 0 {
		why += " (" + strings.Join(r, ", ") + ")"
	}
	return fmt.Errorf("agentfs run as a normal user needs a user namespace, and creating one failed: %v: %s: run agentfs run as root (sudo), or allow them (e.g. sysctl -w kernel.unprivileged_userns_clone=1, user.max_user_namespaces=15000, kernel.apparmor_restrict_unprivileged_userns=0, as applies)", err, why)
}

// UsernsMountHint says what may forbid a FUSE mount in a user
// namespace, for the error of a failed mount there.
func UsernsMountHint() string {
	hint := "mounting FUSE inside a user namespace needs Linux 4.18 or later and no security module forbidding it"
	if r := kernelinfo.UsernsRestrictions(); len(r) > 0 {
		hint += "; this system sets " + strings.Join(r, ", ")
	}
	return hint + ": run agentfs run as root (sudo), or lift the restriction"
}
