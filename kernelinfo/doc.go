// Package kernelinfo says what the running kernel offers agentfs (FUSE
// passthrough, FUSE over io_uring, BPF, user namespaces, /dev/fuse), for
// agentfs version and bug reports, and which sysctls restrict
// unprivileged user namespaces, for the daemon's errors.
//
// It reads /proc and /sys and nothing else, and imports nothing but the
// standard library and x/sys: agentfs's thin front (cmd/agentfs) links
// it, and every package linked there costs its init at every start.
// The kernel's build options are read once a boot (kernelcache.go); the
// cache is a shortcut only, never trusted past its boot.
package kernelinfo
