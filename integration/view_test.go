package integration

import (
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestMountShowsTheLowerExactly: before any change, every name in the
// mount has the lower's type, mode, owner, size, times, link count,
// rdev, content, symlink target and xattrs (issue 2: the mount "looks
// exactly like" the project). Only inode numbers may differ.
func TestMountShowsTheLowerExactly(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("a", "a", harness.WithOwner(1000, 1001), harness.WithMode(0o640), harness.WithXattr("user.x", "1"), harness.WithXattr("trusted.y", "2"),
			harness.WithTimes(harness.Timespec(1000000000, 5), harness.Timespec(1100000000, 7))),
		harness.LowerFile("setid", "s", harness.WithMode(0o6755)),
		harness.LowerDir("d", harness.WithMode(0o2775), harness.WithTimes(harness.Timespec(1000000000, 1), harness.Timespec(1200000000, 999999999))),
		harness.LowerDir("d/sub"),
		harness.LowerSymlink("d/l", "../a", harness.WithOwner(3, 4)),
		harness.LowerHardlink("d/h", "a"),
		harness.LowerSparse("sparse", 1<<30, map[int64]string{0: "x", 1 << 29: "y"}),
		harness.LowerFifo("p", harness.WithMode(0o600)),
		harness.LowerCharDevice("null", 1, 3),
		harness.LowerDir("sticky", harness.WithMode(0o1777)),
		harness.LowerFile("empty", ""),
	))
	lower, mounted := harness.SnapshotTree(m.Lower), harness.SnapshotTree(m.Dir)
	for _, tr := range []*harness.Tree{&lower, &mounted} {
		for p, n := range tr.Nodes {
			n.Ino = 0
			tr.Nodes[p] = n
		}
	}
	mounted.Root = lower.Root
	for _, d := range harness.DiffMountTrees(lower, mounted) {
		t.Errorf("the mount differs from the lower: %s", d)
	}
	if st := harness.Lstat(t, m.Path("sparse")); st.Blocks > 1024 {
		t.Errorf("sparse: st_blocks %d through the mount, want the lower's few blocks", st.Blocks)
	}
	var st unix.Stat_t
	if err := unix.Lstat(m.Path("d/h"), &st); err == nil && st.Ino != harness.Lstat(t, m.Path("a")).Ino {
		t.Errorf("lower hard links a and d/h show different st_ino %d and %d", harness.Lstat(t, m.Path("a")).Ino, st.Ino)
	}
}
