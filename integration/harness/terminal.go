package harness

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// Terminal is a program running on a pseudo-terminal, as a person
// runs it: what it writes is gathered; Send types into it.
type Terminal struct {
	t    testing.TB
	cmd  *exec.Cmd
	ptmx *os.File

	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{} // closed once the terminal's output ends
}

// StartTerminal starts cmd on a new pseudo-terminal of 40x200. The
// cleanup ends the program and closes the terminal.
func StartTerminal(t testing.TB, cmd *exec.Cmd) *Terminal {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatalf("starting %v on a pseudo-terminal: %v", cmd.Args, err)
	}
	tm := &Terminal{t: t, cmd: cmd, ptmx: ptmx, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return // EIO once the program and its children closed it
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // the test is over: nothing to keep
			_ = cmd.Wait()         // its status says nothing more
		}
		_ = ptmx.Close() // read only by the goroutine above
	})
	return tm
}

// Send types s.
func (tm *Terminal) Send(s string) {
	tm.t.Helper()
	if _, err := tm.ptmx.WriteString(s); err != nil {
		tm.t.Fatalf("typing %q: %v", s, err)
	}
}

// Output is everything the program wrote so far.
func (tm *Terminal) Output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// WaitFor waits until the output holds want (a guard against hangs
// with a generous deadline, not a timing assertion) and fails the test
// with the output if it never does.
func (tm *Terminal) WaitFor(want string) {
	tm.t.Helper()
	if !WaitFor(func() bool { return strings.Contains(tm.Output(), want) }) {
		tm.t.Fatalf("the terminal never showed %q; it showed:\n%q", want, tm.Output())
	}
}

// Wait waits for the program to exit and its output to end, and
// returns its exit code.
func (tm *Terminal) Wait() int {
	tm.t.Helper()
	err := tm.cmd.Wait()
	select {
	case <-tm.done:
	case <-time.After(30 * time.Second): // a child holds the terminal
	}
	if err != nil && tm.cmd.ProcessState == nil {
		tm.t.Fatalf("waiting for %v: %v", tm.cmd.Args, err)
	}
	return tm.cmd.ProcessState.ExitCode()
}
