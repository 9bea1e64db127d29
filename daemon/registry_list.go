package daemon

import (
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// RunningMounts lists the mounts the registry records (the mounts of
// this user, or of root), by mountpoint, for shell completion. Entries
// that cannot be read are left out; no registry is an empty list.
func RunningMounts() []RegistryEntry {
	dir, err := RuntimeDir()
	if err != nil {
		return nil
	}
	names, err := os.ReadDir(filepath.Join(dir, "mounts"))
	if err != nil {
		return nil
	}
	var out []RegistryEntry
	for _, n := range names {
		base, ok := strings.CutSuffix(n.Name(), ".json")
		if !ok {
			continue
		}
		mp, err := url.PathUnescape(base)
		if err != nil {
			continue
		}
		if e, ok := ReadRegistry(mp); ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Mountpoint < out[j].Mountpoint })
	return out
}
