package workspace

import (
	"testing"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// TestStatusQuota: status gives the usage of the branch shown against
// its limits; a share of the free space becomes bytes at Open; every
// branch's view has the limits.
func TestStatusQuota(t *testing.T) {
	w, err := Open(Options{Store: t.TempDir(), Lower: t.TempDir(), Version: "test",
		Limits: overlay.Limits{Files: 10}, BytesShare: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	writeFile(t, w.View(), "a", "12345")
	writeFile(t, w.View(), "b", "678")
	st := w.Status()
	free, err := w.objs.FsFree()
	if err != nil {
		t.Fatal(err)
	}
	if st.BranchFiles != 2 || st.BranchBytes != 8 || st.MaxFiles != 10 {
		t.Errorf("status: %d files, %d bytes, max %d files; want 2, 8, 10", st.BranchFiles, st.BranchBytes, st.MaxFiles)
	}
	// Half the free space at Open, give or take what was written since.
	if st.MaxBytes <= 0 || st.MaxBytes > free || st.MaxBytes < free/2-(64<<20) {
		t.Errorf("max bytes %d with %d free, want about half", st.MaxBytes, free)
	}
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	l, err := w.meta.Layer("other")
	if err != nil {
		t.Fatal(err)
	}
	w.opMu.Lock()
	v, err := w.viewOf(l)
	w.opMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if l := v.Limits(); l != (overlay.Limits{Files: 10, Bytes: st.MaxBytes}) {
		t.Errorf("the other branch's limits: %+v, want the store's", l)
	}
}
