package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/s3test"
)

// The remote tests of what a push and a pull do while they transfer:
// a push does not hold the mount's operations back, and a large object
// interrupted half way continues from what arrived.

// bigObjectSize is above the multipart threshold (64 MiB): 5 parts of
// 16 MiB.
const bigObjectSize = 80 << 20

// readdTeam points the machine's remote team at the server again (a
// restarted server listens on another port).
func (m *machine) readdTeam(srv *s3test.Server) {
	m.t.Helper()
	for _, args := range [][]string{{"remote", "rm", "team"}, {"remote", "add", "team", "s3://" + remoteBucket + "/acme", "--endpoint", srv.Endpoint}} {
		if r := m.agentfs("", args...); r.Code != 0 {
			m.t.Fatalf("%s", r)
		}
	}
}

// killWithServer kills cmd (SIGKILL) and then the server, which a test
// paused to stop cmd at a point it knows.
func killWithServer(t *testing.T, cmd *exec.Cmd, srv *s3test.Server) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	srv.Stop()
}

// pushFullReply is agentfs push --json's output with the counts of
// hashes and parts.
type pushFullReply struct {
	pushReply
	Hashed    int `json:"hashed"`
	Known     int `json:"known"`
	PartsSent int `json:"parts_sent"`
	PartsKept int `json:"parts_kept"`
}

// TestPushBesideTheMount holds a push of a mount's snapshot in the
// middle of its transfer (the server paused once the first object
// arrived): meanwhile a snapshot is taken and files are written in the
// mount, and they complete (the push holds the daemon's operation lock
// only while it pins what it sends); then the server goes on and the
// push completes.
func TestPushBesideTheMount(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("seed", "x\n")))
	const n = 20
	for i := range n {
		harness.WriteFile(t, m.Path(fmt.Sprintf("f%02d", i)), strings.Repeat(fmt.Sprintf("file %d\n", i), 100_000))
	}
	r := a.agentfs(m.Dir, "snapshot", "create", "-m", "to push")
	if r.Code != 0 {
		t.Fatalf("snapshot create: %s", r)
	}
	fields := strings.Fields(r.Stdout)
	id := fields[len(fields)-1]
	push := a.cmd("", nil, "push", "--json", "--parallel", "1", "-C", m.Dir, id)
	var out strings.Builder
	push.Stdout = &out
	if err := push.Start(); err != nil {
		t.Fatal(err)
	}
	arrived := harness.WaitFor(func() bool { return len(srv.Objects(t, remoteBucket, "acme/objects/")) >= 1 })
	srv.Pause(t)
	if !arrived {
		srv.Resume(t)
		_ = push.Wait()
		t.Fatal("no object of the push arrived")
	}
	// A snapshot and writes while the push waits for the server: a
	// minute is far more than they take, and a push holding the
	// operation lock holds the snapshot for as long as the server is
	// paused.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snap := exec.CommandContext(ctx, harness.Bin(), "snapshot", "create", "-m", "during the push")
	snap.Dir, snap.Env = m.Dir, append(os.Environ(), a.env...)
	snapOut, snapErr := snap.CombinedOutput()
	harness.WriteFile(t, m.Path("written-during-push"), "new\n")
	harness.WriteFile(t, m.Path("f00"), "changed during the push\n")
	srv.Resume(t)
	pushErr := push.Wait()
	if snapErr != nil {
		t.Errorf("snapshot create while a push waited for the server: %v (%s)", snapErr, snapOut)
	}
	if pushErr != nil {
		t.Fatalf("push: %v\n%s", pushErr, out.String())
	}
	var rep pushFullReply
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("push --json: %v\n%s", err, out.String())
	}
	if rep.Sent != n || len(rep.Snapshots) != 1 || rep.Snapshots[0] != id {
		t.Errorf("push = %+v, want snapshot %s and %d objects sent", rep, id, n)
	}
	if got := srv.Objects(t, remoteBucket, "acme/objects/"); len(got) != n {
		t.Errorf("the server holds %d objects, want %d (what was changed during the push is not the snapshot's)", len(got), n)
	}
}

// TestPushResumesLargeObject kills a push in the middle of one large
// object (multipart): the server runs in short bursts until two of its
// parts arrived (counted from the server's files), then the push is
// killed (SIGKILL) and the server too; the next push sends only the
// parts that had not arrived, counted from the server's access log.
func TestPushResumesLargeObject(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	project := newProject(t, map[string]string{"seed": "x\n"})
	id := a.run(project, fmt.Sprintf("head -c %d /dev/urandom > big", bigObjectSize))
	const parts = bigObjectSize / (16 << 20)
	// The parts the server holds whole (its access log is written
	// behind its answers: a killed gateway loses lines).
	held := func() int {
		n := 0
		for _, size := range srv.PartsHeld(t, remoteBucket) {
			if size == 16<<20 {
				n++
			}
		}
		return n
	}
	push := a.cmd("", nil, "push", "-s", id)
	if err := push.Start(); err != nil {
		t.Fatal(err)
	}
	twoParts := srv.Throttle(t, 20*time.Millisecond, func() bool { return held() >= 2 })
	killWithServer(t, push, srv)
	arrived := held()
	if !twoParts || arrived >= parts {
		t.Fatalf("the push was not stopped half way through the large object: %d of its %d parts arrived", arrived, parts)
	}
	if got := srv.Objects(t, remoteBucket, "acme/objects/"); len(got) != 0 {
		t.Fatalf("the killed push left objects %q", got)
	}
	srv.Restart(t)
	a.readdTeam(srv)
	before := srv.Requests(t, "UploadPart", "acme/objects/")
	r := a.agentfs("", "push", "--json", "-s", id)
	if r.Code != 0 {
		t.Fatalf("push: %s", r)
	}
	var rep pushFullReply
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("push --json: %v\n%s", err, r)
	}
	sent := srv.Requests(t, "UploadPart", "acme/objects/") - before
	if sent != parts-arrived || rep.PartsSent != sent || rep.PartsKept != arrived {
		t.Errorf("the resumed push sent %d parts (reply %+v), want %d sent and %d kept", sent, rep, parts-arrived, arrived)
	}
	if got := srv.Objects(t, remoteBucket, "acme/objects/"); len(got) != 1 {
		t.Errorf("after the resumed push the server holds objects %q, want the large one", got)
	}
}

// TestPullResumesLargeObject kills a pull in the middle of one large
// object: the server runs in short bursts until 16 MiB of it were
// fetched, then the pull is killed (SIGKILL) and the server too; the
// next pull fetches only the rest (what the server wrote, counted from
// its side) and the pulled file is the pushed one.
func TestPullResumesLargeObject(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"seed": "x\n"})
	id := a.run(project, fmt.Sprintf("head -c %d /dev/urandom > big", bigObjectSize))
	a.push("-s", id)
	checkoutB := copyProject(t, project)
	partial := func() int64 {
		ms, _ := filepath.Glob(filepath.Join(b.state, "agentfs", "sessions", id, "pull-objects", "*", ".fetch-*"))
		var n int64
		for _, p := range ms {
			if st, err := os.Stat(p); err == nil {
				n += st.Size()
			}
		}
		return n
	}
	pull := b.cmd(checkoutB, nil, "pull", "team/"+id)
	if err := pull.Start(); err != nil {
		t.Fatal(err)
	}
	enough := srv.Throttle(t, 10*time.Millisecond, func() bool { return partial() >= 16<<20 })
	killWithServer(t, pull, srv)
	kept := partial()
	if !enough || kept >= bigObjectSize {
		t.Fatalf("the pull was not stopped half way through the large object: %d of its %d bytes fetched", kept, bigObjectSize)
	}
	// The session's other objects are small: on a loaded machine one
	// may not have arrived before the kill, and is fetched again.
	complete := b.pulledObjects(id)
	srv.Restart(t)
	b.readdTeam(srv)
	want := len(srv.Objects(t, remoteBucket, "acme/objects/")) - len(complete)
	before := srv.BytesWritten(t)
	rep := b.pull(checkoutB, "team/"+id)
	// What the server wrote: the rest of the object, the small ones,
	// the documents, headers and its access log's lines (far less than
	// 4 MiB).
	if wrote := srv.BytesWritten(t) - before; rep.Fetched != want || wrote < bigObjectSize-kept || wrote > bigObjectSize-kept+4<<20 {
		t.Errorf("the resumed pull fetched %d objects and the server wrote %d bytes, want %d objects (the large one and those the killed pull had not finished: %d were) and the %d bytes not fetched before (and headers)",
			rep.Fetched, wrote, want, len(complete), bigObjectSize-kept)
	}
	// The pulled file is the pushed one: main of both machines'
	// sessions, exported, compared.
	var bigs []string
	for _, m := range []*machine{a, b} {
		to := filepath.Join(t.TempDir(), "export")
		if r := m.agentfs(checkoutB, "export", "-s", id, "main", "--to", to); r.Code != 0 {
			t.Fatalf("export of the session: %s", r)
		}
		bigs = append(bigs, filepath.Join(to, "big"))
	}
	if out, err := exec.Command("cmp", bigs[0], bigs[1]).CombinedOutput(); err != nil {
		t.Errorf("the pulled file differs from the pushed one: %v %s", err, out)
	}
}

// TestPushPullHardLinks: files a session hard-linked together (two it
// made, and a project file it gave a second name) arrive hard-linked
// on the machine that pulls the session (its export keeps them so),
// with their contents.
func TestPushPullHardLinks(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"p.txt": "project file\n"})
	id := a.run(project, "echo linked > a.txt; ln a.txt b.txt; mkdir d; ln a.txt d/c.txt; ln p.txt q.txt")
	a.push("-s", id)
	checkoutB := copyProject(t, project)
	b.pull(checkoutB, "team/"+id)
	to := filepath.Join(t.TempDir(), "export")
	if r := b.agentfs(checkoutB, "export", "-s", id, "main", "--to", to); r.Code != 0 {
		t.Fatalf("export of the pulled session: %s", r)
	}
	for _, group := range [][]string{{"a.txt", "b.txt", "d/c.txt"}, {"p.txt", "q.txt"}} {
		var first syscall.Stat_t
		for i, p := range group {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(to, p), &st); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = st
			}
			if st.Ino != first.Ino || st.Nlink != uint64(len(group)) {
				t.Errorf("pulled %s: inode %d, %d links; want the inode of %s (%d), %d links", p, st.Ino, st.Nlink, group[0], first.Ino, len(group))
			}
		}
	}
	for p, want := range map[string]string{"d/c.txt": "linked\n", "q.txt": "project file\n"} {
		if got, err := os.ReadFile(filepath.Join(to, p)); err != nil || string(got) != want {
			t.Errorf("pulled %s = %q (%v), want %q", p, got, err, want)
		}
	}
}

// TestMountFromHardLinks: a mount started from a pushed snapshot shows
// its hard-linked files as one file of several names (one object to
// fetch), as the snapshot had them.
func TestMountFromHardLinks(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"seed": "x\n"})
	id := a.run(project, "echo linked > a.txt; ln a.txt b.txt")
	pushed := a.push("-s", id)
	checkoutB := copyProject(t, project)
	mnt := harness.NewMountpoint(t)
	if r := b.agentfs("", "mount", "--lower", checkoutB, "--from", "team/"+pushed.Snapshots[len(pushed.Snapshots)-1], mnt); r.Code != 0 {
		t.Fatalf("mount --from: %s", r)
	}
	t.Cleanup(func() {
		if r := b.agentfs("", "unmount", mnt); r.Code != 0 {
			t.Errorf("unmount: %s", r)
		}
	})
	var sa, sb syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(mnt, "a.txt"), &sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(filepath.Join(mnt, "b.txt"), &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Ino != sb.Ino || sa.Nlink != 2 {
		t.Errorf("a.txt (inode %d, %d links) and b.txt (inode %d) are not one file of 2 links", sa.Ino, sa.Nlink, sb.Ino)
	}
	for _, p := range []string{"a.txt", "b.txt"} {
		if got := harness.ReadFile(t, filepath.Join(mnt, p)); got != "linked\n" {
			t.Errorf("%s = %q, want linked", p, got)
		}
	}
	if n := srv.Requests(t, "GetObject", "acme/objects/"); n != 1 {
		t.Errorf("reading both names fetched %d objects, want 1", n)
	}
}
