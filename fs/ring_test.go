package fs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/fs/fuseuring"
	"github.com/agentfs/agentfs/internal/testenv"
)

// enableURing turns on the fuse module's enable_uring, as agentfs mount
// does as root, and puts back what was there after the test.
func enableURing(t *testing.T) {
	t.Helper()
	const knob = "/sys/module/fuse/parameters/enable_uring"
	old, err := os.ReadFile(knob)
	if err != nil {
		testenv.Skip(t, testenv.FUSEOverIOURing, "no FUSE over io_uring in this kernel: %v", err)
	}
	if err := os.WriteFile(knob, []byte("Y"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(knob, old, 0); err != nil {
			t.Errorf("restoring %s to %q: %v", knob, bytes.TrimSpace(old), err)
		}
	})
}

// withinTime fails the test if f does not return within d: a request the
// kernel holds for queues that never start would hang it.
func withinTime(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// ringMount mounts a lower tree holding f ("lower\n") in-process with
// IOURing, within 20 s, failing the test if the connection is aborted.
func ringMount(t *testing.T) *testMount {
	t.Helper()
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "f"), "lower\n")
	var m *testMount
	withinTime(t, 20*time.Second, "the mount", func() {
		m = mountForTest(t, lower, true, func(o *Options) {
			o.IOURing = true
			o.AbortConnection = func() { t.Error("the connection was aborted") }
		})
	})
	return m
}

// wantServes checks, within 20 s, that m serves a write and a read.
func wantServes(t *testing.T, m *testMount) {
	t.Helper()
	withinTime(t, 20*time.Second, "file operations", func() {
		writeFile(t, filepath.Join(m.mnt, "f"), "upper\n")
		if got := readFile(t, filepath.Join(m.mnt, "f")); got != "upper\n" {
			t.Errorf("read %q, want %q", got, "upper\n")
		}
	})
}

// TestRing: with IOURing, an in-process mount takes its requests over
// io_uring and serves files through it.
func TestRing(t *testing.T) {
	requireFUSE(t)
	enableURing(t)
	m := ringMount(t)
	if got := m.srv.Transport(); !strings.HasPrefix(got, "io_uring (") {
		t.Fatalf("Transport() = %q, want io_uring", got)
	}
	wantServes(t, m)
}

// TestRingFallback: when a queue cannot be prepared, no entry is
// registered, the kernel is told to give up io_uring, and the mount
// serves over /dev/fuse, saying why, instead of hanging.
func TestRingFallback(t *testing.T) {
	requireFUSE(t)
	enableURing(t)
	n, err := fuseuring.Possible()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		testenv.Skip(t, testenv.TwoCPUs, "one possible CPU: no other queue could tell the kernel")
	}
	old := startQueues
	startQueues = func(dev, maxWrite int, h fuseuring.Handler) (*fuseuring.Server, error) {
		return fuseuring.StartWithFault(dev, maxWrite, h, func(q int) error {
			if q == n-1 {
				return errors.New("injected failure")
			}
			return nil
		})
	}
	t.Cleanup(func() { startQueues = old })
	m := ringMount(t)
	if got := m.srv.Transport(); !strings.Contains(got, "/dev/fuse (io_uring: ") || !strings.Contains(got, "injected failure") {
		t.Fatalf("Transport() = %q, want /dev/fuse with the queue's failure", got)
	}
	wantServes(t, m)
}

// TestRingDisabled: where io_uring is turned off (kernel.io_uring_disabled),
// the mount does not ask for it and serves over /dev/fuse, saying why.
func TestRingDisabled(t *testing.T) {
	requireFUSE(t)
	enableURing(t)
	const sysctl = "/proc/sys/kernel/io_uring_disabled"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		testenv.Skip(t, testenv.IOURingSysctl, "no %s: %v", sysctl, err)
	}
	if err := os.WriteFile(sysctl, []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := os.WriteFile(sysctl, old, 0); err != nil {
			t.Errorf("restoring %s to %q: %v", sysctl, bytes.TrimSpace(old), err)
		}
	}
	t.Cleanup(restore)
	m := ringMount(t)
	restore() // what follows does not depend on it
	if got := m.srv.Transport(); !strings.HasPrefix(got, "/dev/fuse (io_uring: io_uring_setup") {
		t.Fatalf("Transport() = %q, want /dev/fuse with io_uring_setup's refusal", got)
	}
	wantServes(t, m)
}

// TestRingBulkRead: READs of a project file come over the rings in
// 512 KiB replies, each handed to the kernel at once, from a queue
// thread that may leave its CPU meanwhile (fuseuring's place); the data
// read through the mount is the file's, twice over (the second time
// after its pages were dropped), and small requests are served after.
func TestRingBulkRead(t *testing.T) {
	requireFUSE(t)
	enableURing(t)
	m := ringMount(t)
	if m.srv.ring == nil {
		t.Fatalf("no io_uring queues: %s", m.srv.Transport())
	}
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(filepath.Join(m.lower, "big"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		withinTime(t, 20*time.Second, "reading the file", func() {
			f, err := os.Open(filepath.Join(m.mnt, "big"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// The kernel's cache of the file, from the round before.
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Errorf("round %d: dropping the kernel's cache of the file: %v", round, err)
				return
			}
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d: read %d bytes that differ from the file's %d", round, len(got), len(want))
			}
		})
	}
	if n := m.srv.ring.Spreads(); n == 0 {
		t.Errorf("no queue thread left its CPU after serving 32 MiB of READs")
	}
	wantServes(t, m)
}
