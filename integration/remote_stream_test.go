package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/s3test"
	"github.com/agentfs/agentfs/procfs"
)

// The lazy mount's large files: streamed at their first read, and
// resumed after a crash. The remote of machine B is reached through a
// gate (s3test.Gate) that holds the server's answers after a number of
// bytes, so a test sees a fetch half done whatever the machine's speed.

// gatedMachines starts a server and a gate in front of it, and returns
// them with machine A (reaching the server) and B (through the gate),
// and the snapshot, project and bytes of bigRemoteFile of size.
func gatedMachines(t *testing.T, size int) (srv *s3test.Server, gate *s3test.Gate, b *machine, snap, project string, want []byte) {
	t.Helper()
	srv = s3test.Start(t, remoteBucket)
	gate = s3test.StartGate(t, srv)
	a := newMachine(t, srv)
	b = newMachineAt(t, gate.Endpoint)
	snap, project, want = bigRemoteFile(t, srv, a, size)
	return srv, gate, b, snap, project, want
}

// mountAt runs b's agentfs mount with args then mnt, and unmounts mnt
// (opening the gate first, if any) at the end of the test.
func (m *machine) mountAt(gate *s3test.Gate, mnt string, args ...string) {
	m.t.Helper()
	if r := m.agentfs("", append(append([]string{"mount"}, args...), mnt)...); r.Code != 0 {
		m.t.Fatalf("mount %s: %s", strings.Join(args, " "), r)
	}
	m.t.Cleanup(func() {
		if gate != nil {
			gate.Open()
		}
		if harness.IsMounted(mnt) {
			if r := m.agentfs("", "unmount", mnt); r.Code != 0 {
				m.t.Errorf("unmount: %s", r)
			}
		}
	})
}

// bigRemoteFile makes a session on a that writes a file of size random
// bytes at big.bin (and small.txt), pushes it, and returns the
// snapshot's id, the project, and the file's bytes as the server holds
// them.
func bigRemoteFile(t *testing.T, srv *s3test.Server, a *machine, size int) (string, string, []byte) {
	t.Helper()
	project := newProject(t, map[string]string{"a.txt": "hello\n"})
	id := a.run(project, "head -c "+strconv.Itoa(size)+" /dev/urandom > big.bin; echo small > small.txt")
	pushed := a.push("-s", id)
	for _, key := range srv.Objects(t, remoteBucket, "acme/objects/") {
		b, err := os.ReadFile(srv.ObjectFile(remoteBucket, key))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == size {
			return pushed.Snapshots[len(pushed.Snapshots)-1], project, b
		}
	}
	t.Fatalf("the server holds no object of %d bytes", size)
	return "", "", nil
}

// TestMountFromRemoteStreams: the first read of a large file never
// fetched returns its first bytes while the rest of the object is still
// held back by the gate; a second open meanwhile reads them too (one
// fetch); the second reader closes early, the fetch goes on for the
// first once the gate opens, and the file then reads whole and right,
// fetched once.
func TestMountFromRemoteStreams(t *testing.T) {
	harness.RequireFUSE(t)
	const size = 48 << 20
	srv, gate, b, snap, project, want := gatedMachines(t, size)
	mnt := harness.NewMountpoint(t)
	b.mountAt(gate, mnt, "--lower", copyProject(t, project), "--from", "team/"+snap)
	gate.Hold(4 << 20)
	head := make([]byte, 64<<10)
	read := make(chan error, 1)
	var first *os.File
	go func() { // the open and the read: neither may wait for the whole object
		var err error
		if first, err = os.Open(filepath.Join(mnt, "big.bin")); err == nil {
			_, err = io.ReadFull(first, head)
		}
		read <- err
	}()
	if !harness.WaitFor(func() bool { return len(read) > 0 }) {
		gate.Open()
		t.Fatalf("the first read of a file never fetched waited for the whole object (the gate held it); it then ended with %v", <-read)
	}
	if err := <-read; err != nil || !bytes.Equal(head, want[:len(head)]) {
		t.Fatalf("the first 64 KiB, read while the object is held: %v, or other bytes", err)
	}
	defer func() { _ = first.Close() }()
	if passed := gate.Passed(); passed >= size {
		t.Fatalf("the gate let %d bytes through, the whole object: the test proves nothing", passed)
	}
	second, err := os.Open(filepath.Join(mnt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(second, head); err != nil || !bytes.Equal(head, want[:len(head)]) {
		t.Errorf("a second open's first 64 KiB: %v, or other bytes", err)
	}
	_ = second.Close() // a reader that closes early: the fetch goes on for the first
	gate.Open()
	if got := harness.ReadFile(t, filepath.Join(mnt, "big.bin")); got != string(want) {
		t.Errorf("big.bin read whole after the gate opened: %d bytes, not the object's %d", len(got), len(want))
	}
	_ = first.Close()
	if n := srv.Requests(t, "GetObject", "acme/objects/"); n != 1 {
		t.Errorf("the object was fetched %d times, want once for all the opens", n)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "small.txt")); got != "small\n" {
		t.Errorf("small.txt = %q", got)
	}
}

// TestMountFromRemoteStopsUnread: a large file never fetched, opened,
// its first 64 KiB read, and closed: its fetch stops (the gate holding
// the answer short of the first 16 MiB checkpoint, the journal gets the
// checkpoint of a fetch that stopped where it was), fsck finds the store
// clean with the object still pending, and once the gate is open nothing
// more is fetched until the file is read again: then the fetch goes on
// from where it stopped, with one ranged GET, and the file reads whole
// and right.
func TestMountFromRemoteStopsUnread(t *testing.T) {
	harness.RequireFUSE(t)
	const size = 64 << 20
	srv, gate, b, snap, project, want := gatedMachines(t, size)
	store := filepath.Join(t.TempDir(), "store")
	mnt := harness.NewMountpoint(t)
	b.mountAt(gate, mnt, "--lower", copyProject(t, project), "--from", "team/"+snap, "--store", store)
	gate.Hold(4 << 20)
	f, err := os.Open(filepath.Join(mnt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, want[:len(head)]) {
		t.Fatalf("the first 64 KiB: %v, or other bytes", err)
	}
	_ = f.Close()
	if !harness.WaitFor(func() bool { return checkpointed(store) }) {
		t.Fatal("no checkpoint journaled after the last close: the fetch did not stop (the gate holds it short of its first checkpoint at 16 MiB)")
	}
	off := checkpointAt(t, store)
	if off < int64(len(head)) || off > 4<<20 {
		t.Errorf("the stopped fetch journaled a checkpoint at %d, want between the %d bytes read and the %d the gate let through", off, len(head), 4<<20)
	}
	if r := b.agentfs(mnt, "fsck"); r.Code != 0 || !strings.Contains(r.Stdout, "no problems found") {
		t.Errorf("fsck with a fetch stopped half way: %s", r)
	}
	before := gate.Passed()
	gate.Open()
	if got := harness.ReadFile(t, filepath.Join(mnt, "big.bin")); got != string(want) {
		t.Errorf("big.bin read whole after its fetch stopped: %d bytes, not the object's %d", len(got), len(want))
	}
	// What the server sent after the stop: the rest of the object from
	// the checkpoint on, and no more than the answer the gate held for
	// the stopped fetch (a buffer of 32 KiB) and headers.
	if again := gate.Passed() - before; again < size-off || again > size-off+(1<<20) {
		t.Errorf("%d bytes came through the gate for the rest of the file, want the %d after the checkpoint (and little more)", again, size-off)
	}
	if n := srv.Requests(t, "GetObject", "acme/objects/"); n != 2 {
		t.Errorf("the object was asked for %d times, want twice (the stopped fetch, and the one that went on from it)", n)
	}
}

// checkpointAt returns the offset of the last checkpoint journaled in
// store's journal of pending objects.
func checkpointAt(t *testing.T, store string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(store, "pending"))
	if err != nil {
		t.Fatal(err)
	}
	off := int64(-1)
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 5 {
			if off, err = strconv.ParseInt(f[2], 10, 64); err != nil {
				t.Fatalf("the journal's line %q: %v", line, err)
			}
		}
	}
	return off
}

// checkpointed reports whether the journal of pending objects in store
// has a checkpoint (a fill's progress, synced: "ID KEY OFFSET ATIME
// MTIME").
func checkpointed(store string) bool {
	b, _ := os.ReadFile(filepath.Join(store, "pending"))
	for line := range strings.SplitSeq(string(b), "\n") {
		if len(strings.Fields(line)) == 5 {
			return true
		}
	}
	return false
}

// TestMountFromRemoteCrash: kill -9 of the daemon while a large file is
// being fetched into a kept store (--from with --store), the gate
// holding the rest of the object; the store mounted again (without
// --from: the store knows where it came from) shows the file whole and
// right, fetched on from the fetch's last checkpoint (not from its
// start), and fsck finds the store clean. --from naming another snapshot
// is refused for that store, as is --from with a store of a plain mount.
func TestMountFromRemoteCrash(t *testing.T) {
	harness.RequireFUSE(t)
	const size = 40 << 20
	_, gate, b, snap, project, want := gatedMachines(t, size)
	checkout := copyProject(t, project)
	store := filepath.Join(t.TempDir(), "store")
	mnt := harness.NewMountpoint(t)
	b.mountAt(gate, mnt, "--lower", checkout, "--from", "team/"+snap, "--store", store)
	r := b.agentfs(mnt, "status", "--json")
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || st.Pid == 0 {
		t.Fatalf("status --json: %v\n%s", err, r)
	}
	gate.Hold(24 << 20) // past the first checkpoint (16 MiB), short of the whole
	f, err := os.Open(filepath.Join(mnt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, f) }() // ends with the daemon
	if !harness.WaitFor(func() bool { return checkpointed(store) }) {
		t.Fatal("the fetch journaled no checkpoint")
	}
	mustf(t, syscall.Kill(st.Pid, syscall.SIGKILL), "kill -9 of the daemon (pid %d)", st.Pid)
	if !harness.WaitFor(func() bool { return !procfs.Alive(st.Pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", st.Pid)
	}
	_ = f.Close()
	if r := b.agentfs("", "unmount", mnt); r.Code != 0 {
		t.Fatalf("agentfs unmount of the dead mount: %s", r)
	}
	passedBefore := gate.Passed()
	gate.Open()

	if r := b.agentfs("", "mount", "--lower", checkout, "--from", "team/other", "--store", store, mnt); r.Code == 0 || !strings.Contains(r.Stderr, "was started from team/"+snap) {
		t.Errorf("mount --from another snapshot with that store: %s; want a refusal naming team/%s", r, snap)
	}
	if r := b.agentfs("", "mount", "--lower", checkout, "--store", store, mnt); r.Code != 0 {
		t.Fatalf("mounting the store again: %s", r)
	}
	if st, err := os.Stat(filepath.Join(mnt, "big.bin")); err != nil || st.Size() != size {
		t.Errorf("big.bin after the crash: %v (%v), want %d bytes", st, err, size)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "big.bin")); got != string(want) {
		t.Errorf("big.bin after the crash: %d bytes, not the object's %d", len(got), len(want))
	}
	if again := gate.Passed() - passedBefore; again > size-(16<<20)+(1<<20) {
		t.Errorf("after the crash %d bytes came through the gate: the fetch started over, want it on from its checkpoint (16 MiB)", again)
	}
	if r := b.agentfs(mnt, "fsck"); r.Code != 0 || !strings.Contains(r.Stdout, "no problems found") {
		t.Errorf("fsck after the crash: %s", r)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "small.txt")); got != "small\n" {
		t.Errorf("small.txt = %q", got)
	}

	plain := filepath.Join(t.TempDir(), "plain")
	m := harness.NewMount(t, harness.WithStore(plain), harness.WithLower(harness.LowerFile("x", "x")))
	m.Unmount()
	mnt2 := harness.NewMountpoint(t)
	if r := b.agentfs("", "mount", "--lower", checkout, "--from", "team/"+snap, "--store", plain, mnt2); r.Code == 0 || !strings.Contains(r.Stderr, "not started from a remote snapshot") {
		t.Errorf("mount --from with the store of a plain mount: %s; want a refusal", r)
	}
}
