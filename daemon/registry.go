package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// RegistryEntry records a running mount, so that unmount can clean up
// after a daemon that died: detach the dead mount, delete its private
// store. The daemon writes it once the mount is ready and removes it when
// it exits cleanly.
type RegistryEntry struct {
	Mountpoint string `json:"mountpoint"`
	Pid        int    `json:"pid"`
	Store      string `json:"store"`
	Ephemeral  bool   `json:"ephemeral"`
	Lower      string `json:"lower"`
	Backstore  string `json:"backstore"`
}

// registryPath is the entry's file: the mountpoint, escaped, in the
// runtime directory.
func registryPath(mp string) (string, error) {
	dir, err := RuntimeDir()
	if err != nil {
		return "", fmt.Errorf("the agentfs runtime directory: %w", err)
	}
	return filepath.Join(dir, "mounts", url.PathEscape(mp)+".json"), nil
}

func writeRegistry(e RegistryEntry) error {
	p, err := registryPath(e.Mountpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0700); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// ReadRegistry returns the entry of mp, if there is one.
func ReadRegistry(mp string) (RegistryEntry, bool) {
	var e RegistryEntry
	p, err := registryPath(mp)
	if err != nil {
		return e, false
	}
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &e) != nil || e.Mountpoint != mp {
		return e, false
	}
	return e, true
}

// RemoveRegistry removes the entry of mp; only the daemon that wrote it
// (pid) may, so that a late exit does not remove a newer mount's entry.
func RemoveRegistry(mp string, pid int) {
	if e, ok := ReadRegistry(mp); ok && pid != 0 && e.Pid != pid {
		return
	}
	if p, err := registryPath(mp); err == nil {
		// Gone already is as good: unmount may have cleaned up first.
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "agentfs: removing the registry entry %s: %v\n", p, err)
		}
	}
}
