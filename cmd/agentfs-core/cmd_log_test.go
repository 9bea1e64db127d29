package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/activity"
)

func TestFormatExec(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.Local)
	for _, tc := range []struct {
		e    activity.Entry
		want []string
	}{
		{activity.Entry{Op: activity.OpExit, Time: start.Add(1500 * time.Millisecond), Start: start, Pid: 10, Ppid: 9,
			Argv: []string{"git", "commit", "-m", "fix it"}, Cwd: "/p", Exit: new(0), DurationNs: int64(1500 * time.Millisecond)},
			[]string{"2030-01-02 03:04:05.000", " 10 ", " 9 ", "exit 0", "1.50s", "/p", "git commit -m 'fix it'"}},
		{activity.Entry{Op: activity.OpExit, Time: start, Start: start, Pid: 11, Argv: []string{"sleep", "9"}, Signal: 9, DurationNs: 3e6},
			[]string{"SIGKILL", "3ms", "sleep 9"}},
		{activity.Entry{Op: activity.OpExec, Time: start, Pid: 12, Argv: []string{"long"}, ArgvCut: true},
			[]string{"running", "long…"}},
		{activity.Entry{Op: activity.OpTrace, Time: start, Detail: "off: tracing needs root"},
			[]string{"commands are NOT traced (off: tracing needs root)"}},
		{activity.Entry{Op: activity.OpDropped, Time: start, Count: 7}, []string{"7 commands dropped"}},
	} {
		got := formatExec(tc.e)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("formatExec(%+v) = %q: no %q", tc.e, got, w)
			}
		}
	}
	for d, want := range map[time.Duration]string{500 * time.Microsecond: "500µs", 12 * time.Millisecond: "12ms", 2500 * time.Millisecond: "2.50s", 123 * time.Second: "2m03s"} {
		if got := formatTook(d); got != want {
			t.Errorf("formatTook(%v) = %q, want %q", d, got, want)
		}
	}
}
