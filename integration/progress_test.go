package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

// Progress bars: each long command (apply, export, gc, fsck, diff) on a
// pseudo-terminal draws a bar on stderr, and clears it; with stderr not
// a terminal it draws none; with --json it writes progress events.
//
// The mount whose commands are watched runs with
// AGENTFS_TEST_PROGRESS_GATE=1: each operation waits, once started,
// until its progress was asked, so that the command's first look (after
// its one-second delay) finds it running however fast it is.

// progressCommands are the commands, with what the bar says.
func progressCommands(t *testing.T, dir string) map[string][]string {
	return map[string][]string{
		"exporting":          {"export", "-C", dir, "main", "--to", filepath.Join(t.TempDir(), "out")},
		"collecting garbage": {"gc", "-C", dir},
		"checking the store": {"fsck", "-C", dir},
		"comparing":          {"diff", "-C", dir},
		"applying":           {"apply", "-C", dir, "--dry-run"},
	}
}

// progressMount is a mount with changes to apply, diff and collect.
func progressMount(t *testing.T) *harness.Mount {
	var entries []harness.Entry
	for i := range 40 {
		entries = append(entries, harness.LowerFile(filepath.Join("src", "f"+string(rune('a'+i%26))+string(rune('0'+i/26))), strings.Repeat("x", 4096)))
	}
	m := harness.NewMount(t, harness.WithLower(entries...))
	for i := range 20 {
		must(t, os.WriteFile(m.Path("new"+string(rune('a'+i))), []byte(strings.Repeat("y", 8192)), 0o644))
	}
	must(t, os.Remove(m.Path("src/fa0")))
	return m
}

func TestProgressBars(t *testing.T) {
	harness.RequireFUSE(t)
	plain := progressMount(t) // no gate: nobody watches its operations
	t.Setenv("AGENTFS_TEST_PROGRESS_GATE", "1")
	gated := progressMount(t)

	for verb, args := range progressCommands(t, gated.Dir) {
		tm := harness.StartTerminal(t, exec.Command(harness.Bin(), args...))
		code := tm.Wait()
		out := tm.Output()
		if code != 0 {
			t.Errorf("agentfs %s on a terminal: exit %d:\n%q", strings.Join(args, " "), code, out)
			continue
		}
		if !strings.Contains(out, verb) || !strings.Contains(out, "\r") {
			t.Errorf("agentfs %s on a terminal drew no progress bar (%q):\n%q", args[0], verb, out)
		}
		if !strings.Contains(out, "\x1b[2K") && !strings.Contains(out, "\x1b[K") {
			t.Errorf("agentfs %s on a terminal did not clear its bar:\n%q", args[0], out)
		}
	}

	for verb, args := range progressCommands(t, plain.Dir) {
		r := harness.Run(t, args...)
		if r.Code != 0 {
			t.Errorf("want success:\n%s", r)
		}
		if strings.Contains(r.Stderr, verb) || strings.Contains(r.Stderr, "\r") {
			t.Errorf("agentfs %s drew a progress bar on a stderr that is not a terminal:\n%q", args[0], r.Stderr)
		}
	}

	// --json: events on stderr, for tools (no terminal needed); stdout
	// keeps the one JSON reply.
	for op, args := range map[string][]string{
		"gc":    {"gc", "-C", gated.Dir, "--json"},
		"fsck":  {"fsck", "-C", gated.Dir, "--json"},
		"diff":  {"diff", "-C", gated.Dir, "--json"},
		"apply": {"apply", "-C", gated.Dir, "--dry-run", "--json"},
	} {
		r := harness.Run(t, args...)
		if r.Code != 0 {
			t.Errorf("want success:\n%s", r)
		}
		if want := `{"progress":{"running":true,"op":"` + op + `"`; !strings.Contains(r.Stderr, want) {
			t.Errorf("agentfs %s --json: stderr lacks a progress event %s:\n%s", op, want, r.Stderr)
		}
		if !strings.HasPrefix(strings.TrimSpace(r.Stdout), "{") || strings.Contains(r.Stdout, `"progress"`) {
			t.Errorf("agentfs %s --json: stdout should be the reply alone:\n%s", op, r.Stdout)
		}
	}
}
