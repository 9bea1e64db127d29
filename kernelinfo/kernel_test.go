package kernelinfo

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release      string
		major, minor int
		want         bool
	}{
		{"6.9.0", 6, 9, true}, {"6.8.12-foo", 6, 9, false}, {"6.18.44-fc", 6, 14, true},
		{"7.0", 6, 14, true}, {"5.15.0", 6, 9, false}, {"garbage", 6, 9, false},
	} {
		if got := kernelAtLeast(tc.release, tc.major, tc.minor); got != tc.want {
			t.Errorf("kernelAtLeast(%q, %d, %d) = %v, want %v", tc.release, tc.major, tc.minor, got, tc.want)
		}
	}
}

// stopReader serves data, then fails the test if read past it: a scan
// that has what it wants must stop reading.
type stopReader struct {
	t    *testing.T
	data *strings.Reader
}

func (r *stopReader) Read(p []byte) (int, error) {
	if r.data.Len() == 0 {
		r.t.Errorf("the configuration was read past the options wanted")
		return 0, io.EOF
	}
	return r.data.Read(p[:1]) // a byte at a time: a read-ahead would hide the overrun
}

func TestScanKernelOptions(t *testing.T) {
	config := "#\n# CONFIG_FOO is not set\nCONFIG_BPF_SYSCALL=y\nCONFIG_FUSE_FS=m\nCONFIG_FUSE_PASSTHROUGH=y\n"
	got := scanKernelOptions(&stopReader{t, strings.NewReader(config)}, []string{"CONFIG_FUSE_PASSTHROUGH", "CONFIG_BPF_SYSCALL"})
	want := map[string]string{"CONFIG_FUSE_PASSTHROUGH": "y", "CONFIG_BPF_SYSCALL": "y"}
	if !maps.Equal(got, want) {
		t.Errorf("options = %v, want %v", got, want)
	}
	got = scanKernelOptions(strings.NewReader(config+"CONFIG_X=1\n"), []string{"CONFIG_FUSE_IO_URING", "CONFIG_FOO"})
	want = map[string]string{"CONFIG_FUSE_IO_URING": "", "CONFIG_FOO": ""}
	if !maps.Equal(got, want) {
		t.Errorf("options not set = %v, want %v", got, want)
	}
	for _, opt := range []string{"CONFIG_FUSE_IO_URING", "CONFIG_FOO"} {
		if on, known := configSays(got, opt); on || !known {
			t.Errorf("configSays(%s) = %v, %v; want off, known", opt, on, known)
		}
	}
	if _, known := configSays(nil, "CONFIG_BPF_SYSCALL"); known {
		t.Errorf("configSays of an unreadable configuration is known")
	}
}

// The kernel options' cache answers the boot it was written in, and
// only with what it holds.
func TestKernelOptionsCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentfs", kernelCacheName)
	if _, ok := cachedKernelOptions(path, "boot-1 6.18", []string{"CONFIG_A"}); ok {
		t.Errorf("a missing cache answered")
	}
	cacheKernelOptions(path, "boot-1 6.18", map[string]string{"CONFIG_A": "y", "CONFIG_B": ""})
	got, ok := cachedKernelOptions(path, "boot-1 6.18", []string{"CONFIG_B", "CONFIG_A"})
	if want := map[string]string{"CONFIG_A": "y", "CONFIG_B": ""}; !ok || !maps.Equal(got, want) {
		t.Errorf("cached options = %v, %v; want %v", got, ok, want)
	}
	if _, ok := cachedKernelOptions(path, "boot-2 6.18", []string{"CONFIG_A"}); ok {
		t.Errorf("the cache of another boot answered")
	}
	if _, ok := cachedKernelOptions(path, "boot-1 6.18", []string{"CONFIG_A", "CONFIG_C"}); ok {
		t.Errorf("the cache answered for an option it does not hold")
	}
	if bootKey() == "" {
		t.Errorf("no boot key: /proc/sys/kernel/random/boot_id unreadable?")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	if p := kernelCacheFile(); !strings.HasPrefix(p, os.Getenv("XDG_CACHE_HOME")) {
		t.Errorf("kernelCacheFile = %q, want it in XDG_CACHE_HOME", p)
	}
}
