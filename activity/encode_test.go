package activity

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// appendEntry must say exactly what encoding/json says of an Entry.
func TestAppendEntryIsJSON(t *testing.T) {
	odd := "a\"b\\c\nd\re\tf\x00g\x1fh\x7fi é ✓ \xff\xfe j\u2028k\u2029l <&>"
	for _, e := range []Entry{
		{Time: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), Op: "create"},
		{Time: time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), Pid: 12, Tid: 13, Uid: 1000, Command: "sh -c 'x'",
			Branch: "main", Op: "rename", Path: "a", Path2: "b", Attrs: "mode,size"},
		{Time: time.Now(), Op: OpDropped, Count: 42},
		{Time: time.Now(), Op: OpRewind, Branch: "main", Detail: "snapshot 1a2b3c4d, safety snapshot 5e6f7a8b"},
		{Time: time.Now(), Op: "unlink", Path: odd, Command: odd, Branch: odd},
		{Time: time.Now(), Op: OpExec, Pid: 7, Ppid: 6, Uid: 1000, Argv: []string{"make", "-j2", "build"}, Cwd: "/work/proj"},
		{Time: time.Now(), Op: OpExec, Pid: 7, Argv: []string{"sh", "-c", "a \"b\""}, ArgvCut: true, Cwd: "/", CwdCut: true},
		{Time: time.Now(), Op: OpExit, Pid: 7, Ppid: 6, Argv: []string{"true"}, Cwd: "/x", Start: time.Now().Add(-time.Second), Exit: new(0), DurationNs: 1e9},
		{Time: time.Now(), Op: OpExit, Pid: 8, Exit: new(3)},
		{Time: time.Now(), Op: OpExit, Pid: 9, Signal: 9, DurationNs: 5},
	} {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got := appendEntry(nil, &e)
		var a, b Entry
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("appendEntry made invalid JSON %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatalf("encoding/json cannot read back its own %s: %v", want, err)
		}
		if !a.Time.Equal(b.Time) || a.Path != b.Path || a.Command != b.Command || a.Branch != b.Branch || a.Op != b.Op ||
			a.Pid != b.Pid || a.Tid != b.Tid || a.Uid != b.Uid || a.Path2 != b.Path2 || a.Attrs != b.Attrs || a.Count != b.Count || a.Detail != b.Detail ||
			a.Ppid != b.Ppid || !slices.Equal(a.Argv, b.Argv) || a.ArgvCut != b.ArgvCut || a.Cwd != b.Cwd || a.CwdCut != b.CwdCut || !a.Start.Equal(b.Start) ||
			(a.Exit == nil) != (b.Exit == nil) || (a.Exit != nil && *a.Exit != *b.Exit) || a.Signal != b.Signal || a.DurationNs != b.DurationNs {
			t.Errorf("appendEntry = %s\nencoding/json = %s", got, want)
		}
		if e.Path != odd && string(got) != string(want) {
			t.Errorf("appendEntry = %s\nencoding/json = %s (want the same bytes)", got, want)
		}
	}
}
