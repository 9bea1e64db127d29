package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMaxBytes(t *testing.T) {
	for in, want := range map[string]ByteLimit{
		"4096": {Bytes: 4096}, "512K": {Bytes: 512 << 10}, "20G": {Bytes: 20 << 30}, "1T": {Bytes: 1 << 40},
		"3MiB": {Bytes: 3 << 20}, "2gb": {Bytes: 2 << 30}, " 50% ": {Percent: 50}, "100%": {Percent: 100},
		"off": {}, "0": {}, "none": {},
	} {
		got, err := ParseMaxBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseMaxBytes(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "12Q", "1.5G", "0%", "101%", "x%", "99999999999T"} {
		if got, err := ParseMaxBytes(in); err == nil {
			t.Errorf("ParseMaxBytes(%q) = %+v, want an error", in, got)
		}
	}
	if got := (ByteLimit{Percent: 50}).Of(1000); got != 500 {
		t.Errorf("50%% of 1000 = %d", got)
	}
	if got := (ByteLimit{Percent: 1}).Of(10); got != 1 {
		t.Errorf("1%% of 10 = %d, want at least a byte", got)
	}
	for _, b := range []ByteLimit{{}, {Bytes: 12345}, {Percent: 7}} {
		if back, err := ParseMaxBytes(b.String()); err != nil || back != b {
			t.Errorf("ParseMaxBytes(%q) = %+v, %v; want %+v back", b.String(), back, err, b)
		}
	}
}

func TestParseMaxFiles(t *testing.T) {
	for in, want := range map[string]int64{"1": 1, "300000": 300000, "300_000": 300000, "off": 0, "0": 0} {
		if got, err := ParseMaxFiles(in); err != nil || got != want {
			t.Errorf("ParseMaxFiles(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "many", "1e6", "2K"} {
		if got, err := ParseMaxFiles(in); err == nil {
			t.Errorf("ParseMaxFiles(%q) = %d, want an error", in, got)
		}
	}
}

// TestResolveLimits: agentfs run has limits unless a file or a flag
// says; agentfs mount has none unless told; flags beat files.
func TestResolveLimits(t *testing.T) {
	s, err := Resolve(Default(), Overrides{}, false)
	if err != nil || s.MaxFiles != 0 || !s.MaxBytes.Off() {
		t.Errorf("mount's defaults: %d files, %v bytes, %v; want no limits", s.MaxFiles, s.MaxBytes, err)
	}
	s, err = Resolve(Default(), Overrides{}, true)
	if err != nil || s.MaxFiles != RunMaxFiles || s.MaxBytes != RunMaxBytes {
		t.Errorf("run's defaults: %d files, %v bytes, %v; want %d and %v", s.MaxFiles, s.MaxBytes, err, RunMaxFiles, RunMaxBytes)
	}
	user, lower := configDirs(t)
	write(t, user, "[limits]\nmax-files = 1000\nmax-bytes = off\n")
	c, err := Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ = Resolve(c, Overrides{}, true); s.MaxFiles != 1000 || !s.MaxBytes.Off() {
		t.Errorf("run with the files' limits: %d files, %v bytes; want 1000 and off", s.MaxFiles, s.MaxBytes)
	}
	if s, _ = Resolve(c, Overrides{MaxFiles: "off", MaxBytes: "1G"}, false); s.MaxFiles != 0 || s.MaxBytes.Bytes != 1<<30 {
		t.Errorf("flags over the files: %d files, %v bytes; want off and 1G", s.MaxFiles, s.MaxBytes)
	}
	// The project's file may not set them: they protect the machine
	// from what runs in the project.
	for _, key := range []string{"max-bytes = off", "max-files = 10"} {
		write(t, filepath.Join(lower, ProjectFile), "[limits]\n"+key+"\n")
		if _, err := Load(lower); err == nil || !strings.Contains(err.Error(), "not the project's to set") {
			t.Errorf("a project's %q: %v, want a refusal", key, err)
		}
	}
	for _, c := range []struct {
		o    Overrides
		want string
	}{
		{Overrides{MaxFiles: "lots"}, "--max-files lots: not a count"},
		{Overrides{MaxBytes: "12Q"}, "--max-bytes 12Q: not a size"},
	} {
		o, want := c.o, c.want
		_, err := Resolve(Default(), o, false)
		var fe *FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%+v) = %v, want a flag error saying %q", o, err, want)
		}
	}
}
