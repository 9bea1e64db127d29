package daemon

import (
	"slices"
	"strings"
	"testing"
)

func TestParseMountOptions(t *testing.T) {
	mo, err := ParseMountOptions("rw,noexec,nosuid,nodev,store=/a/b,user,noauto,x-systemd.automount,_netdev",
		`auto_snapshot,quiet-period=5s,lower="/p,q"`, "comment=hi,nofail")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"noexec", "nosuid", "nodev"}; !slices.Equal(mo.Kernel, want) {
		t.Errorf("kernel flags = %q, want %q", mo.Kernel, want)
	}
	var own []string
	for _, o := range mo.Own {
		own = append(own, o.String())
	}
	if want := []string{"store=/a/b", "auto-snapshot", "quiet-period=5s", "lower=/p,q"}; !slices.Equal(own, want) {
		t.Errorf("own options = %q, want %q", own, want)
	}
	if want := []string{"rw", "user", "noauto", "x-systemd.automount", "_netdev", "comment=hi", "nofail"}; !slices.Equal(mo.Ignored, want) {
		t.Errorf("ignored = %q, want %q", mo.Ignored, want)
	}
	for list, want := range map[string]string{
		"ro":          "an agentfs mount is writable",
		"=x":          "has no name",
		`store="/a,b`: "not closed",
	} {
		if _, err := ParseMountOptions(list); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMountOptions(%q) = %v, want an error saying %q", list, err, want)
		}
	}
}
