package integration

import "testing"

// TestMountSmoke mounts a small tree of every kind and reads it back.
func TestMountSmoke(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("a", "a", withOwner(1000, 1000), withMode(0o640), withXattr("user.x", "1"), withXattr("trusted.y", "2")),
		lowerDir("d", withTimes(ts(1e9, 5), ts(1e9, 7))),
		lowerSymlink("d/l", "../a"),
		lowerHardlink("d/h", "a"),
		lowerSparse("s", 1<<30, map[int64]string{0: "x", 1 << 29: "y"}),
		lowerFifo("p"),
	))
	if got := readFile(t, m.path("d/l")); got != "a" {
		t.Errorf("d/l = %q, want %q", got, "a")
	}
	t.Logf("status: %+v", m.status)
}
