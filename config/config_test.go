package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/hide"
)

// configDirs points the user's configuration at a temp dir and returns
// the user's file and a lower directory.
func configDirs(t *testing.T) (userFile, lower string) {
	t.Helper()
	root := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(root, "config"))
	lower = filepath.Join(root, "lower")
	if err := os.MkdirAll(filepath.Join(root, "config", "agentfs"), 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(lower, 0755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "config", "agentfs", "config"), lower
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	_, lower := configDirs(t)
	c, err := Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if c.QuietPeriod != want.QuietPeriod || c.Keep != want.Keep || c.LogSize != want.LogSize || !c.Gitignore || c.AutoSnapshotSet || len(c.Files) != 0 {
		t.Errorf("config without files = %+v, want the defaults %+v", c, want)
	}
	if c.AutoSnapshotOr(true) != true || c.AutoSnapshotOr(false) != false {
		t.Errorf("without a setting, autoSnapshotOr does not follow the command's default")
	}
}

func TestLoadConfigPrecedence(t *testing.T) {
	user, lower := configDirs(t)
	write(t, user, `# the user's defaults
[auto-snapshot]
enabled = true
quiet-period = 5s
keep = 50

[log]
size = 4M
reads = yes

[ignore]
pattern = *.tmp
`)
	write(t, filepath.Join(lower, ProjectFile), `; the project's
[auto-snapshot]
quiet-period = 500ms

[ignore]
gitignore = false
pattern = build/
pattern = notes#1
`)
	c, err := Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	if !c.AutoSnapshot || !c.AutoSnapshotSet || c.QuietPeriod != 500*time.Millisecond || c.Keep != 50 ||
		c.LogSize != 4<<20 || !c.LogReads || c.Gitignore {
		t.Errorf("config = %+v, want the project's quiet period and gitignore over the user's settings", c)
	}
	if want := []string{"*.tmp", "build/", "notes#1"}; !slices.Equal(c.Ignore, want) {
		t.Errorf("ignore = %q, want %q (the user's, then the project's)", c.Ignore, want)
	}
	if len(c.Files) != 2 {
		t.Errorf("files = %v, want both", c.Files)
	}
	// Flags beat both.
	off := false
	s, err := Resolve(c, Overrides{AutoSnapshot: &off, QuietPeriod: "3s", Keep: "7", LogSize: "1M"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.AutoSnapshot || s.QuietPeriod != 3*time.Second || s.Keep != 7 || s.LogSize != 1<<20 || !s.LogReads {
		t.Errorf("settings = %+v, want the flags over the files", s)
	}
}

// TestLoadConfigTriggers: the trace and the snapshot triggers, with
// their defaults, and build commands that add up.
func TestLoadConfigTriggers(t *testing.T) {
	user, lower := configDirs(t)
	c, err := Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	if c.Idle != 30*time.Second || !c.Trace || !c.Build || !c.Git || !c.PostRun || c.ExecLogSize != 16<<20 || len(c.BuildCommands) != 0 {
		t.Errorf("default triggers = %+v", c.Triggers)
	}
	write(t, user, "[auto-snapshot]\nbuild-command = just ci\nidle = 2m\ngit = false\n[trace]\nsize = 1M\nenabled = false\n")
	write(t, filepath.Join(lower, ProjectFile), "[auto-snapshot]\nbuild-command = ./build.sh\nidle = off\npost-run = no\nbuild = false\n")
	if c, err = Load(lower); err != nil {
		t.Fatal(err)
	}
	if c.Idle != 0 || c.Trace || c.Build || c.Git || c.PostRun || c.ExecLogSize != 1<<20 ||
		!slices.Equal(c.BuildCommands, []string{"just ci", "./build.sh"}) {
		t.Errorf("triggers = %+v", c.Triggers)
	}
	on := true
	s, err := Resolve(c, Overrides{Trace: &on}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Trace || s.Idle != 0 {
		t.Errorf("--trace over a file that turned it off: %+v", s.Triggers)
	}
	// A project cannot turn the trace off.
	write(t, filepath.Join(lower, ProjectFile), "[trace]\nenabled = false\n")
	if _, err := Load(lower); err == nil || !strings.Contains(err.Error(), "not the project's to set") {
		t.Errorf("a project's [trace] enabled = false: %v", err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    []string // in the error
	}{
		{"[auto-snapshot]\nenabled = maybe\n", []string{":2:", "enabled = maybe", "true or false"}},
		{"[auto-snapshot]\n\nquiet = 2s\n", []string{":3:", `unknown key "quiet" in [auto-snapshot]`, "enabled, quiet-period, keep"}},
		{"[snapshots]\n", []string{":1:", "unknown section [snapshots]", "[auto-snapshot], [hash], [hide], [ignore], [limits], [log]"}},
		{"enabled = true\n", []string{":1:", "before any section"}},
		{"[log]\nsize\n", []string{":2:", "key = value"}},
		{"[log]\nsize = lots\n", []string{":2:", "size = lots", "16M"}},
		{"[log]\nsize = 1K\n", []string{":2:", "too small"}},
		{"[auto-snapshot]\nquiet-period = 2\n", []string{":2:", "quiet-period = 2", "500ms"}},
		{"[auto-snapshot]\nquiet-period = 1ns\n", []string{":2:", "out of range"}},
		{"[auto-snapshot]\nkeep = 0\n", []string{":2:", "keep = 0", "from 1"}},
		{"[ignore]\npattern = [abc\n", []string{":2:", "malformed", "gitignore"}},
		{"[ignore]\npattern =\n", []string{":2:", "empty"}},
		{"[hide]\npattern = [abc\n", []string{":2:", "malformed", "gitignore"}},
		{"[hide]\npattern =\n", []string{":2:", "empty"}},
		{"[hide]\nfile = .env\n", []string{":2:", `unknown key "file" in [hide]`, "pattern"}},
		{"[log\n", []string{":1:", "[name]"}},
		{"[limits]\nmax-bytes = lots\n", []string{":2:", "max-bytes = lots", "not a size", "20G", "50%"}},
		{"[limits]\nmax-bytes = 0%\n", []string{":2:", "max-bytes = 0%", "from 1% to 100%"}},
		{"[limits]\nmax-files = 1.5\n", []string{":2:", "max-files = 1.5", "not a count"}},
		{"[limits]\nfiles = 3\n", []string{":2:", `unknown key "files" in [limits]`, "max-files, max-bytes"}},
		{"[auto-snapshot]\nidle = soon\n", []string{":2:", "idle = soon", "30s", "off"}},
		{"[auto-snapshot]\nidle = 10ms\n", []string{":2:", "out of range"}},
		{"[auto-snapshot]\nbuild-command = make [x\n", []string{":2:", "build-command = make [x", "not a glob"}},
		{"[auto-snapshot]\nbuild-command =\n", []string{":2:", "empty build command"}},
		{"[trace]\nenabled = sometimes\n", []string{":2:", "true or false"}},
		{"[trace]\nsize = 1K\n", []string{":2:", "too small"}},
	} {
		user, lower := configDirs(t)
		write(t, user, tc.content)
		_, err := Load(lower)
		if err == nil {
			t.Errorf("config %q: no error", tc.content)
			continue
		}
		for _, w := range append([]string{user}, tc.want...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("config %q: error %q does not say %q", tc.content, err, w)
			}
		}
	}
}

func TestLoadConfigProjectErrorNamesProjectFile(t *testing.T) {
	_, lower := configDirs(t)
	p := filepath.Join(lower, ProjectFile)
	write(t, p, "[log]\nreads = sometimes\n")
	_, err := Load(lower)
	if err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Errorf("error = %v, want it to name %s:2", err, p)
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	user, lower := configDirs(t)
	if err := os.Mkdir(user, 0755); err != nil { // a directory: open works, reading fails
		t.Fatal(err)
	}
	_, err := Load(lower)
	if err == nil || !strings.Contains(err.Error(), user) {
		t.Errorf("error = %v, want one naming %s", err, user)
	}
}

func TestOverrideErrors(t *testing.T) {
	for _, tc := range []struct {
		o    Overrides
		flag string
	}{{Overrides{Hide: []string{".env", "[x"}}, "--hide [x"}, {Overrides{QuietPeriod: "soon"}, "--quiet-period soon"}, {Overrides{Keep: "-1"}, "--auto-snapshot-keep -1"}, {Overrides{LogSize: "2"}, "--log-size 2"}} {
		_, err := Resolve(Default(), tc.o, false)
		var fe *FlagError
		if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), tc.flag+": ") {
			t.Errorf("overrides %+v: error %v, want a FlagError starting %q", tc.o, err, tc.flag)
		}
	}
}

// TestLoadConfigHide: the hide patterns of both files add up, each
// with its source, and --hide's come after them.
func TestLoadConfigHide(t *testing.T) {
	user, lower := configDirs(t)
	write(t, user, "[hide]\npattern = .env\npattern = *.pem\n")
	write(t, filepath.Join(lower, ProjectFile), "[hide]\npattern = !.env\npattern = secrets/\n")
	c, err := Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, Overrides{Hide: []string{"*.key"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []hide.Pattern{{Pattern: ".env", From: hide.FromUser}, {Pattern: "*.pem", From: hide.FromUser},
		{Pattern: "!.env", From: hide.FromProject}, {Pattern: "secrets/", From: hide.FromProject},
		{Pattern: "*.key", From: hide.FromFlag}}
	if !slices.Equal(s.Hide, want) {
		t.Errorf("hide = %v, want %v", s.Hide, want)
	}
	rules, err := hide.New(s.Hide)
	if err != nil {
		t.Fatal(err)
	}
	if !rules.Hidden(".env", false) {
		t.Errorf(".env not hidden: the project's !.env took back the user's pattern")
	}
}

// TestLoadConfigHash: hashing is on by default, the user's file and
// --hash turn it off and on, and a project cannot turn it off.
func TestLoadConfigHash(t *testing.T) {
	user, lower := configDirs(t)
	c, err := Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Hash {
		t.Errorf("default: Hash off, want on")
	}
	write(t, user, "[hash]\nenabled = false\n")
	if c, err = Load(lower); err != nil || c.Hash {
		t.Errorf("[hash] enabled = false in the user's file: Hash %v, err %v; want off", c.Hash, err)
	}
	on := true
	if s, err := Resolve(c, Overrides{Hash: &on}, false); err != nil || !s.Hash {
		t.Errorf("--hash over a file that turned it off: Hash %v, err %v", s.Hash, err)
	}
	write(t, filepath.Join(lower, ProjectFile), "[hash]\nenabled = false\n")
	if _, err := Load(lower); err == nil || !strings.Contains(err.Error(), "not the project's to set") {
		t.Errorf("a project's [hash] enabled = false: %v", err)
	}
}
