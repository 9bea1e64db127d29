package integration

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountShowsTheLowerExactly: before any change, every name in the
// mount has the lower's type, mode, owner, size, times, link count,
// rdev, content, symlink target and xattrs (issue 2: the mount "looks
// exactly like" the project). Only inode numbers may differ.
func TestMountShowsTheLowerExactly(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("a", "a", withOwner(1000, 1001), withMode(0o640), withXattr("user.x", "1"), withXattr("trusted.y", "2"),
			withTimes(ts(1000000000, 5), ts(1100000000, 7))),
		lowerFile("setid", "s", withMode(0o6755)),
		lowerDir("d", withMode(0o2775), withTimes(ts(1000000000, 1), ts(1200000000, 999999999))),
		lowerDir("d/sub"),
		lowerSymlink("d/l", "../a", withOwner(3, 4)),
		lowerHardlink("d/h", "a"),
		lowerSparse("sparse", 1<<30, map[int64]string{0: "x", 1 << 29: "y"}),
		lowerFifo("p", withMode(0o600)),
		lowerCharDevice("null", 1, 3),
		lowerDir("sticky", withMode(0o1777)),
		lowerFile("empty", ""),
	))
	lower, mounted := snapshotTree(m.lower), snapshotTree(m.dir)
	for _, tr := range []*tree{&lower, &mounted} {
		for p, n := range tr.nodes {
			n.ino = 0
			tr.nodes[p] = n
		}
	}
	mounted.root = lower.root
	for _, d := range diffMountTrees(lower, mounted) {
		t.Errorf("the mount differs from the lower: %s", d)
	}
	if st := lstat(t, m.path("sparse")); st.Blocks > 1024 {
		t.Errorf("sparse: st_blocks %d through the mount, want the lower's few blocks", st.Blocks)
	}
	var st unix.Stat_t
	if err := unix.Lstat(m.path("d/h"), &st); err == nil && st.Ino != lstat(t, m.path("a")).Ino {
		t.Errorf("lower hard links a and d/h show different st_ino %d and %d", lstat(t, m.path("a")).Ino, st.Ino)
	}
}
