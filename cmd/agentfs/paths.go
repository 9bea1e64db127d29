package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Where agentfs keeps its own files.
//
// Private stores (mounts without --store) live on disk, not in /run or
// $XDG_RUNTIME_DIR, so that large copy-ups do not fill memory:
// /var/tmp/agentfs for root, $XDG_CACHE_HOME/agentfs (~/.cache/agentfs)
// for other users. The registry of running mounts lives in /run/agentfs
// for root, $XDG_RUNTIME_DIR/agentfs for other users.

// privateStorePrefix starts the name of every private store, so that
// cleanup never deletes a directory agentfs did not make.
const privateStorePrefix = "store-"

// privateStoreDir returns (creating it) the directory of private stores.
func privateStoreDir() (string, error) {
	if d := os.Getenv("AGENTFS_PRIVATE_DIR"); d != "" {
		return ownDir(d)
	}
	if os.Geteuid() == 0 {
		return ownDir("/var/tmp/agentfs")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return ownDir(filepath.Join(d, "agentfs"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		return ownDir(filepath.Join(home, ".cache", "agentfs"))
	}
	return ownDir(filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-%d", os.Geteuid())))
}

// makePrivateStore creates a new private store directory (mode 0700).
func makePrivateStore() (string, error) {
	dir, err := privateStoreDir()
	if err != nil {
		return "", fmt.Errorf("creating a private store: %w", err)
	}
	store, err := os.MkdirTemp(dir, privateStorePrefix)
	if err != nil {
		return "", fmt.Errorf("creating a private store: %w", err)
	}
	return store, nil
}

// isPrivateStore reports whether dir looks like a private store this
// user's agentfs made: the only directories cleanup may delete.
func isPrivateStore(dir string) bool {
	parent, err := privateStoreDir()
	if err != nil {
		return false
	}
	return filepath.Dir(filepath.Clean(dir)) == parent && strings.HasPrefix(filepath.Base(dir), privateStorePrefix)
}

// runtimeDir returns (creating it) the directory of the mount registry.
func runtimeDir() (string, error) {
	if d := os.Getenv("AGENTFS_RUNTIME_DIR"); d != "" {
		return ownDir(d)
	}
	if os.Geteuid() == 0 {
		return ownDir("/run/agentfs")
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return ownDir(filepath.Join(x, "agentfs"))
	}
	return ownDir(filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-run-%d", os.Geteuid())))
}

// ownDir creates dir (mode 0700) if needed and checks that it is a real
// directory owned by this user, so that nobody else can plant files or
// symlinks where agentfs keeps its state (e.g. in a shared /tmp).
func ownDir(dir string) (string, error) {
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
