package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestReadahead: the mount's own device reads ahead 8 MiB (the kernel
// caps FUSE at 128 KiB otherwise), so that a cold sequential read of a
// project file asks for up to 8 MiB ahead, in 512 KiB READs
// (fs.readahead).
func TestReadahead(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	var st unix.Stat_t
	if err := unix.Stat(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	knob := func(dev uint64) string {
		return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
	}
	b, err := os.ReadFile(knob(st.Dev))
	if err != nil {
		t.Fatalf("the mount's device: %v", err)
	}
	if got := strings.TrimSpace(string(b)); got != "8192" {
		t.Errorf("%s = %s, want 8192", knob(st.Dev), got)
	}
}
