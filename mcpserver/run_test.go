package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killPidsIn kills, at the end of the test, the processes whose pids
// a command wrote into file (one a line): what it left in the
// background.
func killPidsIn(t *testing.T, file string) {
	t.Cleanup(func() {
		b, _ := os.ReadFile(file) // none written: nothing to kill
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL) // may have ended
			}
		}
	})
}

// alive reports whether pid still runs (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestRunCommandTimeLimit: the time limit kills the command and its
// process group; a command that ends at once is not reported as timed
// out and not kept waiting by what it left in the background, which
// is left running; nothing extends a call past the limit plus
// outputWait.
func TestRunCommandTimeLimit(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	killPidsIn(t, pids)
	bound := func(limit time.Duration) time.Duration { return limit + outputWait + time.Second }
	for _, c := range []struct {
		name, script string
		limit        time.Duration
		wantCode     int
		wantTimedOut bool
		wantLeftOpen bool
		wantOutput   string
		// maxTime: the call must end by then.
		maxTime time.Duration
	}{
		{"quick", "echo started; exit 3", 5 * time.Second, 3, false, false, "started\n", time.Second},
		{"background job", "echo started; sleep 30 & echo $! >> " + pids, 5 * time.Second, 0, false, true, "started\n", outputWait + time.Second},
		{"setsid job", "echo started; setsid sleep 30 & echo $! >> " + pids, 5 * time.Second, 0, false, true, "started\n", outputWait + time.Second},
		{"past the limit", "echo started; sleep 8", time.Second, 137, true, false, "started\n", bound(time.Second)},
		{"past the limit, setsid job", "echo started; setsid sleep 30 & echo $! >> " + pids + "; sleep 8", time.Second, 137, true, true, "started\n", bound(time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			begin := time.Now()
			res, err := runCommand(context.Background(), []string{"sh", "-c", c.script}, "/", c.limit, 1024)
			took := time.Since(begin)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != c.wantCode || res.TimedOut != c.wantTimedOut || res.OutputLeftOpen != c.wantLeftOpen || res.Output != c.wantOutput {
				t.Errorf("result = %+v, want exit %d, timed out %v, output left open %v, output %q", res, c.wantCode, c.wantTimedOut, c.wantLeftOpen, c.wantOutput)
			}
			if took > c.maxTime {
				t.Errorf("the call took %v, want at most %v", took, c.maxTime)
			}
		})
	}
	// The background jobs of the commands that ended by themselves
	// still run.
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range strings.Fields(string(b))[:2] {
		if pid, _ := strconv.Atoi(f); !alive(pid) {
			t.Errorf("background job %d (pid %d) of a command that ended was killed", i, pid)
		}
	}
}

// TestRunCommandCancelled: a call cancelled by the client kills the
// command and says so.
func TestRunCommandCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := runCommand(ctx, []string{"sh", "-c", "sleep 8"}, "/", time.Minute, 1024)
	if err != context.DeadlineExceeded {
		t.Errorf("error = %v, want %v", err, context.DeadlineExceeded)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("the cancelled call took %v", took)
	}
}

// TestRunOutputTail: only the last output_bytes are kept.
func TestRunOutputTail(t *testing.T) {
	res, err := runCommand(context.Background(), []string{"sh", "-c", "printf 0123456789"}, "/", 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "6789" || res.Total != 10 || !res.Truncated {
		t.Errorf("result = %+v, want output 6789 of 10 bytes, truncated", res)
	}
}
