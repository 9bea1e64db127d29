package procgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pids lists the processes in the group: in the top and in every cgroup
// below it.
func (g *Group) Pids() ([]int, error) {
	var pids []int
	err := filepath.WalkDir(g.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a cgroup removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil // removed meanwhile
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}

// Empty reports whether no process is left in the group (its top's
// cgroup.events counts the cgroups below it too).
func (g *Group) Empty() (bool, error) {
	v, err := g.event("populated")
	return v == "0", err
}

// event reads the value of key in the top's cgroup.events.
func (g *Group) event(key string) (string, error) { return event(g.dir, key) }

// event reads the value of key in cgroup dir's cgroup.events.
func event(dir, key string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+" "); ok {
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s/cgroup.events has no %s line", dir, key)
}

// KillWait bounds how long Stop waits for the processes to be gone
// after SIGKILL (the kernel ends them at once; their exit takes what
// closing their files takes).
const KillWait = 10 * time.Second

// Stop ends every process of the group: SIGTERM and SIGCONT to each (a
// stopped process acts on SIGTERM only once continued), up to grace for
// them to exit, then SIGKILL to whatever is left (cgroup.kill, which no
// process can dodge), and it waits until the group is empty. A process
// started during the grace gets its SIGTERM too. A process that is a
// child of the caller stays a zombie until the caller waits for it; it
// is no longer in the group.
func (g *Group) Stop(grace time.Duration) error {
	signalled := map[int]bool{}
	term := func() error {
		pids, err := g.Pids()
		if err != nil {
			return fmt.Errorf("listing the processes of %s: %w", g.dir, err)
		}
		for _, pid := range pids {
			if !signalled[pid] {
				signalled[pid] = true
				// A process that has exited meanwhile is no error.
				_ = unix.Kill(pid, unix.SIGTERM)
				_ = unix.Kill(pid, unix.SIGCONT)
			}
		}
		return nil
	}
	if err := term(); err != nil {
		return err
	}
	deadline := time.Now().Add(grace)
	for {
		if empty, err := g.Empty(); err == nil && empty {
			return nil
		}
		if !time.Now().Before(deadline) {
			break
		}
		time.Sleep(min(10*time.Millisecond, time.Until(deadline)))
		_ = term() // newcomers; the first listing worked, a failure now is the group going
	}
	if err := g.kill(); err != nil {
		return err
	}
	if !g.waitEmpty(KillWait) {
		left, _ := g.Pids() // for the message only
		return fmt.Errorf("the processes of %s did not end within %v of SIGKILL: %s", g.dir, KillWait, pidList(left))
	}
	return nil
}

// kill sends SIGKILL to every process of the group: through cgroup.kill
// where the kernel has it (Linux 5.14); else with the group frozen
// (cgroup.freeze, so that no process forks meanwhile; a frozen process
// still dies of SIGKILL), to each process, until none is left.
func (g *Group) kill() error {
	if g.canKill {
		if err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
			return fmt.Errorf("killing the processes of %s: %w", g.dir, err)
		}
		return nil
	}
	freeze := filepath.Join(g.dir, "cgroup.freeze")
	frozen := os.WriteFile(freeze, []byte("1"), 0) == nil
	if frozen {
		defer func() { _ = os.WriteFile(freeze, []byte("0"), 0) }() // thawed, the dead exit
		// Freezing completes once every process has stopped (a fork
		// in progress included): "frozen 1".
		for deadline := time.Now().Add(time.Second); ; {
			if v, err := g.event("frozen"); err != nil || v == "1" || time.Now().After(deadline) {
				frozen = err == nil && v == "1"
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for deadline := time.Now().Add(KillWait); ; {
		pids, err := g.Pids()
		if err != nil {
			return fmt.Errorf("listing the processes of %s: %w", g.dir, err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL) // it may have exited
		}
		if frozen || time.Now().After(deadline) {
			// Frozen, none could fork: each was killed. Unfrozen, what
			// was forked meanwhile is killed on the next round, up to
			// the deadline; waitEmpty says what is left.
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEmpty waits up to d for the group to be empty and reports whether
// it is.
func (g *Group) waitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if empty, err := g.Empty(); err == nil && empty {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// maxListedPids bounds the pids an error lists: it is one line to the
// daemon, and a group can hold thousands.
const maxListedPids = 20

// pidList lists pids for a message, the first maxListedPids of them and
// how many more.
func pidList(pids []int) string {
	if len(pids) <= maxListedPids {
		return fmt.Sprint(pids)
	}
	return fmt.Sprintf("%v and %d more", pids[:maxListedPids], len(pids)-maxListedPids)
}
