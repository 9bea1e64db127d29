package main

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
)

// registryEntry records a running mount, so that unmount can clean up
// after a daemon that died.
type registryEntry struct {
	Mountpoint string `json:"mountpoint"`
	Pid        int    `json:"pid"`
	Store      string `json:"store"`
	Ephemeral  bool   `json:"ephemeral"`
	Lower      string `json:"lower"`
}

func registryPath(mp string) string {
	return filepath.Join(runtimeDir(), "mounts", url.PathEscape(mp)+".json")
}

func writeRegistry(e registryEntry) error {
	p := registryPath(e.Mountpoint)
	if err := os.MkdirAll(filepath.Dir(p), 0700); err != nil {
		return err
	}
	b, _ := json.Marshal(e)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func readRegistry(mp string) (registryEntry, bool) {
	var e registryEntry
	b, err := os.ReadFile(registryPath(mp))
	if err != nil || json.Unmarshal(b, &e) != nil {
		return e, false
	}
	return e, true
}

func removeRegistry(mp string) { os.Remove(registryPath(mp)) }
