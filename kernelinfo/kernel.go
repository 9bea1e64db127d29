package kernelinfo

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// DevFuse is the FUSE device.
const DevFuse = "/dev/fuse"

// URingKnob is the fuse module's switch for FUSE over io_uring.
const URingKnob = "/sys/module/fuse/parameters/enable_uring"

// KernelFeature is one thing the kernel offers (or not).
type KernelFeature struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Features describes the running kernel: its release, FUSE
// passthrough, FUSE over io_uring, BPF, user namespaces and FUSE
// itself. Nothing here fails: what cannot be read says so.
//
// The kernel's build options are read only for what the running
// kernel does not show otherwise (kernelOptions), and once a boot
// (kernelcache.go): inflating /proc/config.gz whole costs about a
// millisecond, more than the rest of agentfs version together.
func Features() []KernelFeature {
	var uts unix.Utsname
	release, machine := "unknown", ""
	if err := unix.Uname(&uts); err == nil {
		release, machine = unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Machine[:])
	}
	uringKnobValue := readTrimmed(URingKnob)
	// kernel.unprivileged_bpf_disabled exists only in a kernel built with
	// CONFIG_BPF_SYSCALL.
	bpfSysctl := readTrimmed("/proc/sys/kernel/unprivileged_bpf_disabled")
	var wanted []string
	if kernelAtLeast(release, 6, 9) {
		wanted = append(wanted, "CONFIG_FUSE_PASSTHROUGH")
	}
	if uringKnobValue == "" {
		wanted = append(wanted, "CONFIG_FUSE_IO_URING")
	}
	if bpfSysctl == "" {
		wanted = append(wanted, "CONFIG_BPF_SYSCALL")
	}
	cfg := cachedOrReadKernelOptions(wanted)
	return []KernelFeature{
		{"kernel", strings.TrimSpace("Linux " + release + " " + machine)},
		{"passthrough", passthroughFeature(release, cfg)},
		{"io_uring", ioURingFeature(uringKnobValue, cfg)},
		{"bpf", bpfFeature(bpfSysctl, cfg)},
		{"user namespaces", usernsFeature()},
		{"fuse", fuseFeature()},
	}
}

// kernelAtLeast reports whether release (6.9.0-foo) is major.minor or
// later.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// cachedOrReadKernelOptions is kernelOptions through the cache of this
// boot (kernelcache.go).
func cachedOrReadKernelOptions(wanted []string) map[string]string {
	if len(wanted) == 0 {
		return nil
	}
	path, key := kernelCacheFile(), bootKey()
	if cfg, ok := cachedKernelOptions(path, key, wanted); ok {
		return cfg
	}
	cfg := kernelOptions(wanted)
	cacheKernelOptions(path, key, cfg)
	return cfg
}

// kernelOptions reads the kernel's build options named in wanted
// (/proc/config.gz, else /boot/config-RELEASE), and stops reading once
// it has them all; an option that is not set is "". Nil when wanted is
// empty or neither file is there.
func kernelOptions(wanted []string) map[string]string {
	if len(wanted) == 0 {
		return nil
	}
	var r io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer func() { _ = f.Close() }() // read only
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil
		}
		r = zr
	} else {
		var uts unix.Utsname
		if unix.Uname(&uts) != nil {
			return nil
		}
		f, err := os.Open("/boot/config-" + unix.ByteSliceToString(uts.Release[:]))
		if err != nil {
			return nil
		}
		defer func() { _ = f.Close() }() // read only
		r = f
	}
	return scanKernelOptions(r, wanted)
}

// scanKernelOptions reads a kernel configuration from r (CONFIG_X=y
// lines, "# CONFIG_X is not set" for the others) until it has every
// option of wanted; the options it did not find are "" (not set).
func scanKernelOptions(r io.Reader, wanted []string) map[string]string {
	cfg := make(map[string]string, len(wanted))
	for _, w := range wanted {
		cfg[w] = ""
	}
	left := len(wanted)
	sc := bufio.NewScanner(r)
	for left > 0 && sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("CONFIG_")) {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		if !ok {
			continue
		}
		if old, want := cfg[string(k)]; want && old == "" {
			cfg[string(k)] = string(v)
			left--
		}
	}
	return cfg
}

// configSays is what the kernel's build says of option, for a feature
// line: known is false when the configuration cannot be read.
func configSays(cfg map[string]string, option string) (on bool, known bool) {
	v, known := cfg[option]
	return v == "y" || v == "m", known
}

func passthroughFeature(release string, cfg map[string]string) string {
	if !kernelAtLeast(release, 6, 9) {
		return "no: it needs Linux 6.9 or later"
	}
	if on, known := configSays(cfg, "CONFIG_FUSE_PASSTHROUGH"); known && !on {
		return "no: the kernel is built without CONFIG_FUSE_PASSTHROUGH"
	}
	return "yes, for mounts made as root (Linux 6.9 or later)"
}

// ioURingFeature says what FUSE over io_uring is here, from the fuse
// module's enable_uring parameter (knob; "": the module has none).
func ioURingFeature(knob string, cfg map[string]string) string {
	disabled := readTrimmed("/proc/sys/kernel/io_uring_disabled")
	switch {
	case knob == "":
		if on, known := configSays(cfg, "CONFIG_FUSE_IO_URING"); known && !on {
			return "no: the kernel is built without CONFIG_FUSE_IO_URING (Linux 6.14 or later)"
		}
		return "no: the fuse module has no enable_uring parameter (it needs Linux 6.14 or later, CONFIG_FUSE_IO_URING)"
	case disabled == "2":
		return "no: io_uring is turned off (kernel.io_uring_disabled = 2)"
	}
	s := fmt.Sprintf("yes, for mounts made as root (enable_uring = %s; agentfs turns it on)", knob)
	if disabled == "1" {
		s += "; kernel.io_uring_disabled = 1: only for root"
	}
	return s
}

// bpfFeature says what BPF is here, from kernel.unprivileged_bpf_disabled
// (sysctl; "": the kernel has no such setting) and the build options.
func bpfFeature(sysctl string, cfg map[string]string) string {
	if on, known := configSays(cfg, "CONFIG_BPF_SYSCALL"); sysctl == "" && known && !on {
		return "no: the kernel is built without CONFIG_BPF_SYSCALL"
	}
	var parts []string
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err == nil {
		parts = append(parts, "BTF")
	} else {
		parts = append(parts, "no BTF")
	}
	if sysctl != "" {
		parts = append(parts, "kernel.unprivileged_bpf_disabled = "+sysctl)
	}
	return "yes (" + strings.Join(parts, ", ") + ")"
}

func usernsFeature() string {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return "no: the kernel has no user namespaces (CONFIG_USER_NS)"
	}
	if r := UsernsRestrictions(); len(r) > 0 {
		return "only for root: " + strings.Join(r, ", ") + " (agentfs run as a normal user needs them)"
	}
	return "yes, also for normal users (agentfs run works without root)"
}

func fuseFeature() string {
	var parts []string
	st, err := os.Stat(DevFuse)
	switch {
	case err != nil:
		parts = append(parts, DevFuse+" is missing (modprobe fuse)")
	case st.Mode().Perm()&0o006 == 0o006:
		parts = append(parts, DevFuse+" usable by all")
	default:
		parts = append(parts, fmt.Sprintf("%s mode %o (root only)", DevFuse, st.Mode().Perm()))
	}
	if p, err := exec.LookPath("fusermount3"); err == nil {
		parts = append(parts, "fusermount3 at "+p)
	} else {
		parts = append(parts, "no fusermount3 (apt-get install fuse3)")
	}
	return strings.Join(parts, "; ")
}

// readTrimmed reads a small /proc or /sys file; "" when it cannot.
func readTrimmed(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Sysctl is a sysctl that forbids (or restricts) unprivileged user
// namespaces when it has the value Forbids.
type Sysctl struct{ Path, Forbids, Name string }

// UsernsSysctls are the sysctls that forbid unprivileged user
// namespaces (a variable: tests point it at files of their own).
var UsernsSysctls = []Sysctl{
	{"/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone"},
	{"/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces"},
	{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "kernel.apparmor_restrict_unprivileged_userns"},
}

// UsernsRestrictions names the sysctls of UsernsSysctls set to forbid
// (or restrict) unprivileged user namespaces, as "name=value".
func UsernsRestrictions() []string {
	var found []string
	for _, s := range UsernsSysctls {
		if b, err := os.ReadFile(s.Path); err == nil && strings.TrimSpace(string(b)) == s.Forbids {
			found = append(found, s.Name+"="+s.Forbids)
		}
	}
	return found
}
