package branch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

func init() { childModes["hold"] = childHold }

// childHold opens the store, says "held", and waits for stdin to close.
func childHold(dir string) error {
	s, err := Open(Options{Dir: dir})
	if err != nil {
		return err
	}
	fmt.Println("held")
	if _, err := io.ReadAll(os.Stdin); err != nil {
		_ = s.Close() // the test gets the read's error
		return fmt.Errorf("waiting for stdin to close: %w", err)
	}
	return s.Close()
}

func TestLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "hold", dir)
	if got := c.line(); got != "held" {
		t.Fatalf("child said %q (%s), want held", got, c.errb)
	}
	_, err := Open(Options{Dir: dir})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open beside the holder: %v, want ErrLocked", err)
	}
	want := fmt.Sprintf("store %s is in use by pid %d: unmount the other mount first, or use another --store", dir, c.cmd.Process.Pid)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error = %q, want it to contain %q", err, want)
	}
	if err := c.in.Close(); err != nil {
		t.Fatalf("closing the holder's stdin: %v", err)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("holder: %v (%s)", err, c.errb)
	}
	openDir(t, Options{Dir: dir})
}

// TestLockDiesWithHolder: a SIGKILLed holder never blocks the next Open.
func TestLockDiesWithHolder(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "hold", dir)
	if got := c.line(); got != "held" {
		t.Fatalf("child said %q (%s), want held", got, c.errb)
	}
	c.kill(t)
	s := openDir(t, Options{Dir: dir})
	b, err := os.ReadFile(dir + "/lock")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), fmt.Sprintf("%d\n", os.Getpid()); got != want {
		t.Errorf("lock file holds %q, want %q", got, want)
	}
	closeStore(t, s)
}

// TestLockedWithinProcess: a second writable Open in the same process
// is refused too (flock is per open file).
func TestLockedWithinProcess(t *testing.T) {
	dir := t.TempDir()
	openDir(t, Options{Dir: dir})
	_, err := Open(Options{Dir: dir})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second Open: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
}
