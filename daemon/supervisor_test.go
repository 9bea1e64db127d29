package daemon

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procgroup"
)

// linkPair is a supervisorLink and the supervisor's end of its line.
func linkPair(t *testing.T) (*supervisorLink, *os.File, *bufio.Scanner) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := newSupervisorLink(os.NewFile(uintptr(fds[0]), "daemon"))
	sup := os.NewFile(uintptr(fds[1]), "supervisor")
	t.Cleanup(func() {
		l.close()
		_ = sup.Close() // the test's end
	})
	return l, sup, bufio.NewScanner(sup)
}

// TestSupervisorLinkSequence: a stop is answered by its own number only:
// the late answer to an earlier rewind is dropped; "final" says no
// relaunch follows.
func TestSupervisorLinkSequence(t *testing.T) {
	l, sup, sc := linkPair(t)
	fmt.Fprintln(sup, "relaunches 0")
	l.mu.Lock()
	defer l.mu.Unlock()
	type result struct {
		relaunch bool
		err      error
	}
	done := make(chan result, 1)
	go func() {
		r, err := l.stopLocked()
		done <- result{r, err}
	}()
	if !sc.Scan() || sc.Text() != "stop 1" {
		t.Fatalf("the daemon said %q, want stop 1", sc.Text())
	}
	fmt.Fprintln(sup, "stopped 0 relaunch") // a rewind given up on
	fmt.Fprintln(sup, "stopped 1 final")
	if r := <-done; r.err != nil || r.relaunch {
		t.Errorf("stop = relaunch %v, %v; want final (the stale answer dropped)", r.relaunch, r.err)
	}
	if left := l.left.Load(); left != 0 {
		t.Errorf("relaunches left = %d, want 0", left)
	}
	go func() {
		r, err := l.stopLocked()
		done <- result{r, err}
	}()
	if !sc.Scan() || sc.Text() != "stop 2" {
		t.Fatalf("the daemon said %q, want stop 2", sc.Text())
	}
	fmt.Fprintln(sup, "error 2 the agent would not die")
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "the agent would not die") {
		t.Errorf("stop answered with an error = %v", r.err)
	}
}

// TestSupervisorLinkInGroup: a process is the command's when its cgroup
// is the group's top or below it.
func TestSupervisorLinkInGroup(t *testing.T) {
	l, sup, _ := linkPair(t)
	self := procgroup.Of(os.Getpid())
	if self == "" {
		testenv.Skip(t, testenv.Cgroups, "no version-2 cgroup here")
	}
	cases := []struct {
		group string
		want  bool
	}{{self, true}, {strings.TrimSuffix(self, "/") + "/run-1", false}, {strings.TrimSuffix(self, "/") + "x", false}}
	if parent := filepath.Dir(self); self != "/" {
		cases = append(cases, struct {
			group string
			want  bool
		}{parent, true})
	}
	for _, tc := range cases {
		fmt.Fprintln(sup, "group "+tc.group)
		for i := 0; i < 500 && (l.group.Load() == nil || *l.group.Load() != tc.group); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if got := l.inGroup(uint32(os.Getpid())); got != tc.want {
			t.Errorf("in group %q (this process in %q) = %v, want %v", tc.group, self, got, tc.want)
		}
	}
}

// TestSupervisorLinkInLeaf: a process started into a procgroup (in a
// leaf below the group's top) is the command's.
func TestSupervisorLinkInLeaf(t *testing.T) {
	g, err := procgroup.New(fmt.Sprintf("agentfs-daemon-test-%d", time.Now().UnixNano()))
	if err != nil {
		testenv.RequireRoot(t, "a cgroup")
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		if cmd.Process != nil {
			_ = cmd.Wait() // Close killed it
		}
	})
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	l, sup, _ := linkPair(t)
	fmt.Fprintln(sup, "group "+g.Path())
	for i := 0; i < 500 && l.group.Load() == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !l.inGroup(uint32(cmd.Process.Pid)) {
		t.Errorf("process %d in cgroup %s is not in the group %s", cmd.Process.Pid, procgroup.Of(cmd.Process.Pid), g.Path())
	}
	if l.inGroup(uint32(os.Getpid())) {
		t.Errorf("the test itself is in the group %s", g.Path())
	}
}
