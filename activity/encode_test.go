package activity

import (
	"encoding/json"
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
			a.Pid != b.Pid || a.Tid != b.Tid || a.Uid != b.Uid || a.Path2 != b.Path2 || a.Attrs != b.Attrs || a.Count != b.Count || a.Detail != b.Detail {
			t.Errorf("appendEntry = %s\nencoding/json = %s", got, want)
		}
		if e.Path != odd && string(got) != string(want) {
			t.Errorf("appendEntry = %s\nencoding/json = %s (want the same bytes)", got, want)
		}
	}
}
