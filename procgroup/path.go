package procgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentfs/agentfs/procfs"
)

// ownCgroup returns where this process's cgroup is in the file system
// (a cgroup2 mount's directory, and the cgroup's path relative to it),
// and its path in the hierarchy.
func ownCgroup() (mountpoint, rel string, err error) {
	self := Of(os.Getpid())
	if self == "" {
		return "", "", errors.New("this process is in no version-2 cgroup (/proc/self/cgroup has no 0:: line)")
	}
	mounts, err := procfs.Mounts(procfs.MountinfoPath)
	if err != nil {
		return "", "", err
	}
	dir, err := cgroupDir(mounts, self)
	if err != nil {
		return "", "", err
	}
	// dir = mountpoint + (self below the mount's root): the group's
	// directory is dir/name, its path self/name.
	return dir, self, nil
}

// cgroupDir returns the directory of cgroup path p (as /proc/PID/cgroup
// names it) on a cgroup2 mount of mounts that shows it. A mount shows
// the hierarchy from its root (mountinfo's Root field: "/" for a whole
// hierarchy, a cgroup's path for a bind mount of a subtree or a mount
// made in a cgroup namespace), so p must be that root or below it; a
// path outside this process's cgroup namespace ("/../x") is on no mount.
func cgroupDir(mounts []procfs.Mount, p string) (string, error) {
	if !filepath.IsAbs(p) || strings.HasPrefix(p, "/..") {
		return "", fmt.Errorf("this process's cgroup %q is outside its cgroup namespace: no cgroup2 mount here shows it", p)
	}
	found := false
	for _, m := range mounts {
		if m.FsType != "cgroup2" {
			continue
		}
		found = true
		if Within(p, m.Root) {
			return filepath.Join(m.Mountpoint, strings.TrimPrefix(p, strings.TrimSuffix(m.Root, "/"))), nil
		}
	}
	if !found {
		return "", errors.New("no cgroup2 file system is mounted")
	}
	return "", fmt.Errorf("no cgroup2 mount here shows this process's cgroup %s (each shows a subtree that does not hold it)", p)
}
