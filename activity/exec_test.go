package activity

import (
	"testing"
	"time"
)

// TestReadExecs: one line per command, in the order started: the exit
// entry once it ended, the exec entry while it runs; Since and Tail
// select by start (or end).
func TestReadExecs(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Stream: Exec})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	l.Add(Entry{Time: at(0), Op: OpTrace, Detail: "on: the mount"})
	l.Add(Entry{Time: at(1), Pid: 10, Op: OpExec, Argv: []string{"agent"}})
	l.Add(Entry{Time: at(2), Pid: 11, Ppid: 10, Op: OpExec, Argv: []string{"make"}})
	l.Add(Entry{Time: at(3), Pid: 12, Ppid: 11, Op: OpExec, Argv: []string{"cc", "a.c"}})
	l.Add(Entry{Time: at(4), Pid: 12, Op: OpExit, Start: at(3), Argv: []string{"cc", "a.c"}, Exit: new(0)})
	l.Add(Entry{Time: at(9), Pid: 11, Op: OpExit, Start: at(2), Argv: []string{"make"}, Exit: new(2)})
	l.Add(Entry{Time: at(10), Pid: 12, Ppid: 10, Op: OpExec, Argv: []string{"ls"}}) // pid 12 again
	// An exec chain: env starts make in the same process.
	l.Add(Entry{Time: at(11), Pid: 13, Ppid: 10, Op: OpExec, Argv: []string{"env", "A=1", "make"}})
	l.Add(Entry{Time: at(12), Pid: 13, Ppid: 10, Op: OpExec, Argv: []string{"make"}})
	l.Add(Entry{Time: at(13), Pid: 13, Op: OpExit, Start: at(12), Argv: []string{"make"}, Exit: new(0)})
	// An exit whose exec was lost: it stands alone.
	l.Add(Entry{Time: at(14), Pid: 10, Op: OpExit, Start: at(13), Exit: new(0)})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines, err := ReadExecs(dir, Selection{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines {
		got = append(got, l.Op+":"+CommandLine(l.Argv, 100))
	}
	want := []string{"trace:", "exec:agent", "exit:make", "exit:cc a.c", "exec:ls", "exec:env A=1 make", "exit:make", "exit:"}
	if len(got) != len(want) {
		t.Fatalf("ReadExecs = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ReadExecs = %q, want %q", got, want)
		}
	}
	if env := lines[5]; env.Detail != Replaced || env.DurationNs != int64(time.Second) {
		t.Errorf("env's line, replaced by make: %+v", env)
	}
	if agent := lines[1]; agent.Detail != Replaced || agent.DurationNs != int64(12*time.Second) {
		t.Errorf("the agent's exec line (its exit's start does not match: replaced by a program whose exec was lost): %+v", agent)
	}
	// make started before 5s but ended after: still shown.
	lines, _ = ReadExecs(dir, Selection{Since: at(5)})
	if len(lines) != 5 || lines[0].Argv[0] != "make" || lines[1].Argv[0] != "ls" {
		t.Errorf("since 5s: %+v", lines)
	}
	if lines, _ = ReadExecs(dir, Selection{Tail: 1}); len(lines) != 1 || lines[0].Op != OpExit || len(lines[0].Argv) != 0 {
		t.Errorf("tail 1: %+v", lines)
	}

	x, err := ReadExecIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pid  int
		at   time.Time
		want string
	}{
		{12, at(3).Add(time.Millisecond), "cc"},
		{12, at(5), ""}, // cc ended, ls not started
		{12, at(11), "ls"},
		{11, at(5), "make"},
		{99, at(5), ""},
		{10, at(0), ""}, // before it started
	} {
		argv, ok := x.Command(tc.pid, tc.at)
		if got := ""; ok {
			got = argv[0]
			if got != tc.want {
				t.Errorf("Command(%d, %v) = %q, want %q", tc.pid, tc.at, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Command(%d, %v) = none, want %q", tc.pid, tc.at, tc.want)
		}
	}
	// No exec log: an empty index.
	if x, err := ReadExecIndex(t.TempDir()); err != nil || len(x.byPid) != 0 {
		t.Errorf("without an exec log: %v, %v", x, err)
	}
}
