package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/hostpath"
)

// Where agentfs keeps its own files.
//
// Private stores (mounts without --store) live on disk, not in /run or
// $XDG_RUNTIME_DIR, so that large copy-ups do not fill memory:
// /var/tmp/agentfs for root, $XDG_CACHE_HOME/agentfs (~/.cache/agentfs)
// for other users; the next candidate when that is inside the lower tree
// or the mountpoint (e.g. --lower ~). The registry of running mounts lives in /run/agentfs
// for root, $XDG_RUNTIME_DIR/agentfs for other users.

// privateStorePrefix starts the name of every private store, so that
// cleanup never deletes a directory agentfs did not make.
const privateStorePrefix = "store-"

// privateStoreBases lists, in order of preference, the directories a
// private store may be made in.
// Each is absolute (a relative one in the environment is taken from the
// current directory): the daemon and the remover of private stores
// (trash.go) do not run there.
func privateStoreBases() []string {
	if d := os.Getenv("AGENTFS_PRIVATE_DIR"); d != "" {
		return []string{absPath(d)}
	}
	var bases []string
	if os.Geteuid() == 0 {
		bases = append(bases, "/var/tmp/agentfs")
	} else {
		if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
			bases = append(bases, filepath.Join(d, "agentfs"))
		} else if home, err := os.UserHomeDir(); err == nil {
			bases = append(bases, filepath.Join(home, ".cache", "agentfs"))
		}
		bases = append(bases, fmt.Sprintf("/var/tmp/agentfs-%d", os.Geteuid()))
	}
	bases = append(bases, filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-%d", os.Geteuid())))
	for i, b := range bases {
		bases[i] = absPath(b)
	}
	return bases
}

// absPath is p made absolute, or p cleaned where it cannot be.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// MakePrivateStore creates a new private store directory (mode 0700) in
// the first base that is not inside any of avoid (the lower directory
// and the mountpoint: agentfs must never write into the lower tree).
func MakePrivateStore(avoid ...string) (string, error) {
	var tried []string
	for _, base := range privateStoreBases() {
		if hostpath.InsideAny(base, avoid) {
			tried = append(tried, base)
			continue
		}
		dir, err := OwnDir(base)
		if err != nil {
			return "", fmt.Errorf("creating a private store: %w", err)
		}
		// What an earlier remover left is taken up (trash.go).
		sweepTrash(dir)
		backstore.SpreadChildren(dir) // each store in a block group of its own
		store, err := os.MkdirTemp(dir, privateStorePrefix)
		if err != nil {
			return "", fmt.Errorf("creating a private store: %w", err)
		}
		return store, nil
	}
	return "", fmt.Errorf("every place for a private store (%s) is inside the lower directory or the mountpoint: pass --store DIR outside them", strings.Join(tried, ", "))
}

// IsPrivateStore reports whether dir looks like a private store this
// user's agentfs made: the only directories cleanup may delete.
func IsPrivateStore(dir string) bool {
	dir = filepath.Clean(dir)
	if !strings.HasPrefix(filepath.Base(dir), privateStorePrefix) {
		return false
	}
	// The daemon has its store's path with symbolic links resolved
	// (checkStore), the bases may go through some (~/.cache a link).
	parent := filepath.Dir(dir)
	resolved := hostpath.ResolveExisting(parent)
	for _, base := range privateStoreBases() {
		if parent == base || resolved == hostpath.ResolveExisting(base) {
			return true
		}
	}
	return false
}

// RuntimeDir returns (creating it) the directory of the mount registry.
func RuntimeDir() (string, error) {
	if d := os.Getenv("AGENTFS_RUNTIME_DIR"); d != "" {
		return OwnDir(d)
	}
	if os.Geteuid() == 0 {
		return OwnDir("/run/agentfs")
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return OwnDir(filepath.Join(x, "agentfs"))
	}
	return OwnDir(filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-run-%d", os.Geteuid())))
}

// OwnDir creates dir (mode 0700) if needed and checks that it is a real
// directory owned by this user, so that nobody else can plant files or
// symlinks where agentfs keeps its state (e.g. in a shared /tmp).
func OwnDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0700); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("%s belongs to uid %d, not to you (uid %d): remove it, or set AGENTFS_PRIVATE_DIR/AGENTFS_RUNTIME_DIR", dir, st.Uid, os.Geteuid())
	}
	return dir, nil
}

// OwnDirs lists the directories where this user's agentfs keeps its
// files outside the sessions: the bases of private stores and the
// registry of mounts (they may not exist). A system session's view
// hides them.
func OwnDirs() []string {
	dirs := privateStoreBases()
	if d := os.Getenv("AGENTFS_RUNTIME_DIR"); d != "" {
		dirs = append(dirs, filepath.Clean(d))
	}
	if os.Geteuid() == 0 {
		dirs = append(dirs, "/run/agentfs")
	} else if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		dirs = append(dirs, filepath.Join(x, "agentfs"))
	}
	return append(dirs, filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-run-%d", os.Geteuid())))
}
