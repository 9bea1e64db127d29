package branch

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child processes: the test binary re-executes itself with
// BRANCH_TEST_CHILD=<mode> and BRANCH_TEST_DIR=<store dir>; TestMain
// runs the mode instead of the tests. A child reports progress as lines
// on stdout.
var childModes = map[string]func(dir string) error{}

func TestMain(m *testing.M) {
	if mode := os.Getenv("BRANCH_TEST_CHILD"); mode != "" {
		run := childModes[mode]
		if run == nil {
			fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
			os.Exit(2)
		}
		if err := run(os.Getenv("BRANCH_TEST_DIR")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
	errb  *strings.Builder
}

// startChild starts the test binary in the given child mode on dir.
func startChild(t *testing.T, mode, dir string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append([]string{"BRANCH_TEST_CHILD=" + mode, "BRANCH_TEST_DIR=" + dir}, env...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &strings.Builder{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, lines: bufio.NewScanner(out), errb: errb}
	t.Cleanup(func() {
		// Best effort: the child has usually exited and been waited
		// for already, and then both fail.
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	return c
}

// kill kills the child (SIGKILL) and waits for it, failing the test
// unless it died of that signal.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing the child: %v (%s)", err, c.errb)
	}
	err := c.cmd.Wait()
	if ps := c.cmd.ProcessState; ps == nil || ps.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v (%s), want it killed", err, c.errb)
	}
}

// line returns the child's next line of output ("" at its end).
func (c *child) line() string {
	if c.lines.Scan() {
		return c.lines.Text()
	}
	return ""
}

func openMem(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatalf("Open(in memory): %v", err)
	}
	t.Cleanup(func() { closeStore(t, s) })
	return s
}

func openDir(t *testing.T, o Options) *Store {
	t.Helper()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open(%s): %v", o.Dir, err)
	}
	t.Cleanup(func() { closeStore(t, s) })
	return s
}

// closeStore closes s, failing the test on an error. Closing twice is
// harmless (openMem and openDir close in t.Cleanup); a store whose
// Close fails is unlocked all the same, so the test may go on.
func closeStore(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.Close(); err != nil {
		tb.Errorf("Close: %v", err)
	}
}

func mainLayer(t *testing.T, s *Store) *Layer {
	t.Helper()
	l, err := s.Layer("main")
	if err != nil {
		t.Fatalf("Layer(main): %v", err)
	}
	return l
}

// loadAll returns the entries of a layer or view, in Load order.
func loadAll(t *testing.T, l Source) ([]string, map[string]Entry) {
	t.Helper()
	var paths []string
	m := map[string]Entry{}
	if err := l.Load(func(p string, e *Entry) error {
		paths = append(paths, p)
		m[p] = *e
		return nil
	}); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return paths, m
}

// both runs f against an in-memory store and a store in a temp dir.
func both(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("mem", func(t *testing.T) { f(t, openMem(t)) })
	t.Run("dir", func(t *testing.T) { f(t, openDir(t, Options{Dir: t.TempDir()})) })
}

// openMain opens a store and returns its main layer (for child
// processes and benchmarks, which have no *testing.T).
func openMain(o Options) (*Layer, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	l, err := s.Layer("main")
	if err != nil {
		_ = s.Close() // the caller gets err
		return nil, err
	}
	return l, nil
}

// killAfter starts a child in mode on dir, waits until it reports
// "done N" with N >= stopAfter, kills it a random moment (up to 3 ms)
// later and returns the last N it reported.
func killAfter(t *testing.T, rng *rand.Rand, mode, dir string, stopAfter int) int {
	t.Helper()
	c := startChild(t, mode, dir)
	reported := -1
	for reported < stopAfter {
		line := c.line()
		if line == "" {
			t.Fatalf("child stopped: %s", c.errb)
		}
		reported, _ = strconv.Atoi(strings.TrimPrefix(line, "done "))
	}
	time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	c.kill(t)
	return reported
}
