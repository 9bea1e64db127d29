package integration

// The kernel's overlayfs is the reference for the overlay semantics
// (docs/semantics.md: where it is right, match it; where it falls short,
// marked ★, do better). These helpers mount it next to agentfs over the
// same lower spec, so that a test can run one scenario on both and
// compare.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// kernelOverlay is a mounted overlayfs.
type kernelOverlay struct {
	lower, upper, work, dir string
}

// newKernelOverlay builds the lower tree from entries and mounts the
// kernel's overlayfs on it (root only). Its cleanup unmounts it and
// checks the lower is unchanged.
func newKernelOverlay(t *testing.T, entries ...harness.Entry) *kernelOverlay {
	t.Helper()
	harness.RequireFUSE(t) // root; overlayfs needs the same
	o := &kernelOverlay{lower: harness.NewLowerDir(t, entries...), dir: harness.NewMountpoint(t)}
	state := t.TempDir()
	o.upper, o.work = filepath.Join(state, "upper"), filepath.Join(state, "work")
	for _, d := range []string{o.upper, o.work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := harness.SnapshotTree(o.lower)
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", o.lower, o.upper, o.work)
	if err := unix.Mount("overlay", o.dir, "overlay", 0, opts); err != nil {
		t.Fatalf("mounting the kernel's overlayfs (-o %s): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(o.dir, 0); err != nil {
			t.Errorf("unmounting overlayfs %s: %v", o.dir, err)
			if err := unix.Unmount(o.dir, unix.MNT_DETACH); err != nil {
				t.Errorf("detaching overlayfs %s: %v", o.dir, err)
			}
		}
		harness.AssertUnchanged(t, before, harness.SnapshotTree(o.lower))
	})
	return o
}

// scenario is something done to a mounted tree; it returns a
// description of what it observed (errnos, contents, listings), which
// is compared between the kernel's overlayfs and agentfs.
type scenario func(t *testing.T, root string) string

// compareWithOverlayfs runs s on the kernel's overlayfs and on agentfs,
// each over a fresh lower built from entries, and fails when agentfs
// observes something else.
func compareWithOverlayfs(t *testing.T, entries []harness.Entry, s scenario) {
	t.Helper()
	ovl := newKernelOverlay(t, entries...)
	want := s(t, ovl.dir)
	t.Logf("the kernel's overlayfs:\n%s", want)
	m := harness.NewMount(t, harness.WithLower(entries...))
	got := s(t, m.Dir)
	if got != want {
		t.Errorf("agentfs and the kernel's overlayfs differ:\nagentfs:   %s\noverlayfs: %s", got, want)
	}
}
