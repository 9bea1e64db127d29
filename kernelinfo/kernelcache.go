package kernelinfo

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The kernel's build options cannot change while it runs, and reading
// them costs agentfs version about a millisecond (inflating
// /proc/config.gz): what one run read is kept for the next ones of the
// same boot, in the user's cache directory (kernelCacheFile), keyed by
// the boot's id and the kernel's release. The cache is only a shortcut:
// a missing, unreadable or stale file is read again from the kernel,
// and a cache that cannot be written is no error.

// kernelCacheName is the cache's file name in the cache directory.
const kernelCacheName = "kernel-options"

// kernelCacheFile returns the cache's path, "" when there is none to
// use: no cache directory, or one in a home that belongs to another
// user (sudo keeping HOME), where a file of ours would be in the way.
func kernelCacheFile() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	var st unix.Stat_t
	for d := dir; ; d = filepath.Dir(d) {
		if unix.Stat(d, &st) == nil {
			if int(st.Uid) != os.Geteuid() {
				return ""
			}
			break
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
	return filepath.Join(dir, "agentfs", kernelCacheName)
}

// bootKey names this boot of this kernel: the boot id and the release.
func bootKey() string {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return strings.TrimSpace(string(id)) + " " + unix.ByteSliceToString(uts.Release[:])
}

// cachedKernelOptions returns the options of wanted from the cache at
// path when it was written in boot key and holds them all.
func cachedKernelOptions(path, key string, wanted []string) (map[string]string, bool) {
	if path == "" || key == "" {
		return nil, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || sc.Text() != "boot "+key {
		return nil, false
	}
	all := map[string]string{}
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			all[k] = v
		}
	}
	cfg := make(map[string]string, len(wanted))
	for _, w := range wanted {
		v, ok := all[w]
		if !ok {
			return nil, false
		}
		cfg[w] = v
	}
	return cfg, true
}

// cacheKernelOptions writes cfg to the cache at path for boot key,
// replacing it whole (a new file renamed over the old one); failures
// are ignored: the next run reads the kernel again.
func cacheKernelOptions(path, key string, cfg map[string]string) {
	if path == "" || key == "" || cfg == nil {
		return
	}
	var b strings.Builder
	b.WriteString("boot " + key + "\n")
	for k, v := range cfg {
		b.WriteString(k + "=" + v + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), kernelCacheName+".*")
	if err != nil {
		return
	}
	_, err = tmp.WriteString(b.String())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // our own temporary file
	}
}
