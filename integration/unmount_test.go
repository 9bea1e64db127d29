package integration

// How long agentfs unmount waits: for nothing that grows with the
// store. The daemon's exit does not wait for a private store's deletion,
// and unmount does not ask for the status (which counts every object).

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
)

// TestUnmountDoesNotWaitForTheStoreDeletion: agentfs unmount of a mount
// with a private store returns, its daemon gone, while the store's
// deletion is still held back (by a test gate in the remover process):
// the store was moved aside whole, and is deleted once the gate opens.
// Before, the daemon deleted the store itself before it exited: 20 to
// 60 s for the 200,000 objects of the bench's restore-100k on a loaded
// machine, and unmount gave up after 10 s ("did not exit").
func TestUnmountDoesNotWaitForTheStoreDeletion(t *testing.T) {
	private := t.TempDir()
	gate := filepath.Join(t.TempDir(), "gate")
	harness.WriteFile(t, gate, "")
	t.Setenv("AGENTFS_PRIVATE_DIR", private)
	t.Setenv("AGENTFS_TEST_REMOVE_GATE", gate)
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	// Let a remover held back by a failed test go.
	t.Cleanup(func() { _ = os.Remove(gate) })
	for i := range 20 {
		harness.WriteFile(t, m.Path(fmt.Sprintf("new%02d", i)), "new")
	}
	pid, store := m.Status.Pid, m.Status.Store
	if filepath.Dir(store) != private {
		t.Fatalf("the private store is %s, want it in AGENTFS_PRIVATE_DIR %s", store, private)
	}
	if r := harness.Run(t, "unmount", m.Dir); r.Code != 0 {
		t.Fatalf("agentfs unmount:\n%s", r)
	}
	if procfs.Alive(pid) {
		t.Errorf("agentfs unmount returned while the daemon (pid %d) still runs", pid)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("the private store %s after unmount: %v, want it gone (moved aside)", store, err)
	}
	trash := filepath.Join(private, "trash-"+filepath.Base(store))
	objects, err := countFiles(filepath.Join(trash, "objects"))
	if err != nil || objects < 20 {
		t.Errorf("%s/objects holds %d files (%v) while the remover is held back, want the store's 20 objects and more: "+
			"the daemon must leave the deletion to the remover, not do it before it exits", trash, objects, err)
	}
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { _, err := os.Stat(trash); return os.IsNotExist(err) }) {
		t.Errorf("%s is still there after the remover was let go", trash)
	}
}

// countFiles counts the regular files below dir.
func countFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	return n, err
}

// TestUnmountAsksNoStatus: agentfs unmount asks the daemon only who it
// is and to unmount, never for the status, which counts every object of
// the store (a second at 200,000 objects). The daemon's log (--debug)
// lists the control requests of the unmount's process.
func TestUnmountAsksNoStatus(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithArgs("--debug"),
		harness.WithLower(harness.LowerFile("f", "f")))
	harness.WriteFile(t, m.Path("g"), "g")
	if r := harness.Run(t, "unmount", m.Dir); r.Code != 0 {
		t.Fatalf("agentfs unmount:\n%s", r)
	}
	log, err := os.ReadFile(filepath.Join(store, "agentfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	by := regexp.MustCompile(`unmount requested by pid (\d+)`).FindSubmatch(log)
	if by == nil {
		t.Fatalf("the daemon's log names no process that asked to unmount:\n%s", log)
	}
	request := regexp.MustCompile(`msg="control request" op=("[^"]*"|\S+) pid=` + string(by[1]) + ` `)
	var ops []string
	for _, line := range strings.Split(string(log), "\n") {
		if g := request.FindStringSubmatch(line); g != nil {
			ops = append(ops, strings.Trim(g[1], `"`))
		}
	}
	if want := []string{"daemon", "unmount"}; !slices.Equal(ops, want) {
		t.Errorf("agentfs unmount (pid %s) asked the daemon %q, want %q", by[1], ops, want)
	}
}

// TestUnmountOfADaemonSlowToClose: a daemon that has not exited after
// --timeout (held back here by a test gate before it closes its store):
// agentfs unmount says what the daemon still does (ends the mount, or
// closes the store) and goes on waiting; a second agentfs unmount once
// the mount is gone says the daemon closes the store instead of "not
// mounted"; once the daemon exits, the first one
// succeeds, and the kept store mounts again with what was written.
func TestUnmountOfADaemonSlowToClose(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	t.Setenv("AGENTFS_TEST_CLOSE_GATE", gate)
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(harness.LowerFile("f", "f")))
	harness.WriteFile(t, m.Path("g"), "written before the unmount")
	pid := m.Status.Pid
	harness.WriteFile(t, gate, "")
	t.Cleanup(func() { _ = os.Remove(gate) }) // let a held daemon go
	cmd := exec.Command(harness.Bin(), "unmount", "--timeout", "100ms", m.Dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The note comes once --timeout has passed.
	note := make(chan string, 1)
	rest := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		if sc.Scan() {
			note <- sc.Text()
		}
		close(note)
		var more strings.Builder
		for sc.Scan() {
			more.WriteString(sc.Text() + "\n")
		}
		rest <- more.String()
	}()
	// Where the daemon is at --timeout: still ending the mount (it
	// retries while the unmount's command holds the control file, then
	// detaches it), or already closing the store.
	wants := []string{
		fmt.Sprintf("is unmounted; its daemon (pid %d) is still closing the store", pid),
		fmt.Sprintf("the daemon (pid %d) has not ended the mount within 100ms", pid),
	}
	got := <-note
	says := strings.Contains(got, wants[0]) || strings.Contains(got, wants[1])
	if !says || !strings.Contains(got, filepath.Join(store, "agentfs.log")) {
		t.Errorf("agentfs unmount of a daemon slow to close says %q, want %q or %q, and its log", got, wants[0], wants[1])
	}
	if !harness.WaitFor(func() bool { return !harness.IsMounted(m.Dir) }) {
		t.Fatalf("%s is still mounted after the daemon was asked to unmount", m.Dir)
	}
	if !procfs.Alive(pid) {
		t.Fatalf("the daemon (pid %d) exited, want it held back before it closes the store", pid)
	}
	r := harness.Run(t, "unmount", m.Dir)
	if want := fmt.Sprintf("its daemon (pid %d) has not exited yet: it is closing the store %s", pid, store); r.Code != 1 || !strings.Contains(r.Stderr, want) {
		t.Errorf("a second agentfs unmount while the daemon closes the store: want exit code 1 saying %q, got\n%s", want, r)
	}
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if more := <-rest; err != nil || more != "" {
		t.Errorf("agentfs unmount once the daemon exits: %v, then said %q; want success and nothing more", err, more)
	}
	m.Mount()
	if got := harness.ReadFile(t, m.Path("g")); got != "written before the unmount" {
		t.Errorf("g after mounting the store again = %q, want what was written before the unmount", got)
	}
}
