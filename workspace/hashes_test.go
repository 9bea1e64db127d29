package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/overlay"
)

// referenceRoot computes the Merkle root of the tree at dir from its
// definition in docs/store-format.md ("Content hashes"), written again
// here without package contenthash.
func referenceRoot(t *testing.T, dir string) string {
	t.Helper()
	var node func(p string) (typ string, mode uint32, sum [32]byte)
	node = func(p string) (string, uint32, [32]byte) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		mode := st.Mode & 07777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			ents, err := os.ReadDir(p)
			if err != nil {
				t.Fatal(err)
			}
			names := make([]string, 0, len(ents))
			for _, e := range ents {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			var buf bytes.Buffer
			for _, name := range names {
				typ, m, sum := node(filepath.Join(p, name))
				fmt.Fprintf(&buf, "%s %04o %x %s\x00", typ, m, sum, name)
			}
			return "d", mode, sha256.Sum256(buf.Bytes())
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			return "f", mode, sha256.Sum256(b)
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			return "l", mode, sha256.Sum256([]byte(target))
		case unix.S_IFIFO:
			return "p", mode, sha256.Sum256(nil)
		}
		t.Fatalf("%s: unexpected type %o", p, st.Mode&unix.S_IFMT)
		return "", 0, [32]byte{}
	}
	_, mode, sum := node(dir)
	root := sha256.Sum256(fmt.Appendf([]byte("agentfs-merkle-1\n"), "d %04o %x \x00", mode, sum))
	return hex.EncodeToString(root[:])
}

// hashedWorkspace is a workspace over a project with a directory, an
// executable and a symlink, and a snapshot of a branch that changed one
// file and made another.
func hashedWorkspace(t *testing.T) (*Workspace, ctl.SnapshotInfo) {
	t.Helper()
	lower := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(lower, "src", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(lower, "src", "main.go"), []byte("package main\n"), 0o644))
	must(os.WriteFile(filepath.Join(lower, "src", "deep", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(lower, "a.txt"), []byte("lower a\n"), 0o600))
	must(os.Symlink("src/main.go", filepath.Join(lower, "link")))
	w, err := Open(Options{Store: t.TempDir(), Lower: lower, Version: "test"})
	must(err)
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	writeFile(t, w.View(), "a.txt", "changed a\n")
	writeFile(t, w.View(), "new.txt", "a new file, large enough to matter: "+string(bytes.Repeat([]byte("x"), 5000)))
	info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "hashed"})
	must(err)
	return w, info
}

// TestSnapshotRootAgainstExport: a snapshot's root, computed on demand
// (no mount), is the root an independent computation gets from its
// export, and the manifest's file hashes are the files' SHA-256.
func TestSnapshotRootAgainstExport(t *testing.T) {
	w, info := hashedWorkspace(t)
	list, err := w.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	if got := list.Snapshots[0].RootStatus; got != "off" {
		t.Errorf("snapshot list before any computation: root status %q, want off", got)
	}
	shown, err := w.ShowSnapshot(self, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if shown.RootStatus != "computed" || len(shown.Root) != 64 {
		t.Fatalf("snapshot show: root %q status %q, want a computed root", shown.Root, shown.RootStatus)
	}
	out := filepath.Join(t.TempDir(), "export")
	reply, err := w.Export(self, ctl.ExportArgs{Ref: info.ID, To: out, Manifest: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := referenceRoot(t, out); shown.Root != want || reply.Root != want {
		t.Errorf("root: snapshot show %s, export %s; recomputed from the export %s", shown.Root, reply.Root, want)
	}
	b, err := os.ReadFile(reply.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Root    string `json:"root"`
		Entries []struct {
			Path, Type, Mode, SHA256 string
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range m.Entries {
		if e.Type != "f" {
			continue
		}
		files++
		data, err := os.ReadFile(filepath.Join(out, e.Path))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != e.SHA256 {
			t.Errorf("manifest: %s has sha256 %s, the exported file %x", e.Path, e.SHA256, sum)
		}
	}
	if files != 4 || m.Root != shown.Root {
		t.Errorf("manifest: %d files, root %s; want 4 files, root %s", files, m.Root, shown.Root)
	}
	// The tree checks against the snapshot, and a change in it is named.
	rep, err := w.Verify(self, ctl.VerifyArgs{Refs: []string{info.ID}, Tree: out})
	if err != nil || !rep.OK {
		t.Fatalf("verify --tree of the export: %+v, %v", rep, err)
	}
	if err := os.WriteFile(filepath.Join(out, "src", "main.go"), []byte("package other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = w.Verify(self, ctl.VerifyArgs{Refs: []string{info.ID}, Tree: out})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Path != "src/main.go" || rep.Problems[0].Kind != "tree-differs" {
		t.Errorf("verify --tree of a changed export: %+v, want one tree-differs problem at src/main.go", rep)
	}
}

// objectFile returns the path in the backstore of the object that path
// names in snapshot id.
func objectFile(t *testing.T, w *Workspace, id, path string) string {
	t.Helper()
	snap, err := w.meta.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	e, err := w.meta.SnapshotView(snap).Get(path)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(w.Store(), "objects", e.Object[:2], e.Object)
}

// TestVerifyFindsChangedObjects: a byte flipped in an object (its times
// kept, as bit rot keeps them) and an object file edited are reported
// with their paths and snapshots; the store before is found sound.
func TestVerifyFindsChangedObjects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, file string)
	}{
		{"flipped byte", func(t *testing.T, file string) {
			var st unix.Stat_t
			if err := unix.Stat(file, &st); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			b[100] ^= 0x01
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := unix.UtimesNano(file, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
				t.Fatal(err)
			}
		}},
		{"edited file", func(t *testing.T, file string) {
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("edited\n"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, info := hashedWorkspace(t)
			second, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "second"})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := w.Verify(self, ctl.VerifyArgs{})
			if err != nil || !rep.OK || len(rep.Snapshots) != 2 {
				t.Fatalf("verify of a sound store: %+v, %v", rep, err)
			}
			tc.change(t, objectFile(t, w, info.ID, "new.txt"))
			rep, err = w.Verify(self, ctl.VerifyArgs{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK {
				t.Fatalf("verify after the change: OK, want problems")
			}
			var found bool
			for _, p := range rep.Problems {
				if p.Kind != "object-changed" {
					continue
				}
				found = true
				want := []ctl.VerifyPlace{{Snapshot: info.ID, Path: "new.txt"}, {Snapshot: second.ID, Path: "new.txt"}}
				if fmt.Sprint(p.Where) != fmt.Sprint(want) {
					t.Errorf("object-changed at %v, want %v", p.Where, want)
				}
			}
			if !found {
				t.Errorf("verify after the change: no object-changed problem in %+v", rep.Problems)
			}
			for _, s := range rep.Snapshots {
				if s.OK {
					t.Errorf("snapshot %s still verifies: %+v", s.ID, s)
				}
			}
		})
	}
}

// TestIdenticalCopiesShareBlocks measures what hashing saves on a
// backstore that clones: 8 copies of one 4 MiB file written in the
// view take the space of one once their snapshot is hashed, and read
// the same.
func TestIdenticalCopiesShareBlocks(t *testing.T) {
	mnt := testenv.MountXFS(t)
	w, err := Open(Options{Store: filepath.Join(mnt, "store"), Lower: t.TempDir(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	if !w.Objects().Info().Reflink {
		t.Fatalf("the backstore on XFS (reflink=1) cannot clone")
	}
	const size, copies = 4 << 20, 8
	content := string(bytes.Repeat([]byte("0123456789abcdef"), size/16))
	for i := range copies {
		writeFile(t, w.View(), fmt.Sprintf("copy%d", i), content)
	}
	free := func() int64 {
		unix.Sync()
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bfree) * st.Bsize
	}
	before := free()
	info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "copies"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ShowSnapshot(self, info.ID); err != nil {
		t.Fatal(err)
	}
	freed := free() - before
	t.Logf("%d copies of %d MiB: %d KiB freed by sharing blocks (%d KiB shared by FIDEDUPERANGE)", copies, size>>20, freed>>10, w.Hashes().Deduped()>>10)
	if w.Hashes().Deduped() != (copies-1)*size || freed < (copies-2)*size {
		t.Errorf("deduped %d bytes, freed %d; want %d deduped and about as much freed", w.Hashes().Deduped(), freed, (copies-1)*size)
	}
	for i := range copies {
		if got, err := w.View().ReadFile(fmt.Sprintf("copy%d", i), 2*size); err != nil || string(got) != content {
			t.Errorf("copy%d reads other contents after sharing blocks", i)
		}
	}
	if rep, err := w.Verify(self, ctl.VerifyArgs{}); err != nil || !rep.OK {
		t.Errorf("verify after sharing blocks: %+v, %v", rep, err)
	}
}

// TestWorkerComputesRootsAndFails: the worker (started as a mount
// starts it) computes the root of a snapshot taken after it started;
// one it cannot compute (an object gone from the store) shows as
// failed, not pending, and snapshot show says why.
func TestWorkerComputesRootsAndFails(t *testing.T) {
	w, info := hashedWorkspace(t)
	w.hashes.Start()
	waitStatus := func(id, want string) ctl.SnapshotInfo {
		t.Helper()
		for range 1000 {
			list, err := w.Snapshots()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range list.Snapshots {
				if s.ID == id && s.RootStatus == want {
					return s
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		list, _ := w.Snapshots()
		t.Fatalf("snapshot %s never showed root status %s: %+v", id, want, list)
		return ctl.SnapshotInfo{}
	}
	if s := waitStatus(info.ID, "computed"); len(s.Root) != 64 {
		t.Errorf("root %q", s.Root)
	}
	writeFile(t, w.View(), "gone.txt", "an object that will be lost")
	e, err := w.View().Layer().Get("gone.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.Store(), "objects", e.Object[:2], e.Object)); err != nil {
		t.Fatal(err)
	}
	lost, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(lost.ID, "failed")
	if _, err := w.ShowSnapshot(self, lost.ID); err == nil || !strings.Contains(err.Error(), "gone.txt") {
		t.Errorf("snapshot show of a snapshot whose object is gone: %v, want an error naming gone.txt", err)
	}
	rep, err := w.Verify(self, ctl.VerifyArgs{Refs: []string{lost.ID}})
	if err == nil && !rep.OK {
		err = fmt.Errorf("%+v", rep.Problems)
	}
	if err == nil || !strings.Contains(err.Error(), "gone.txt") {
		t.Errorf("verify of a snapshot whose object is gone: %v, want an error naming gone.txt", err)
	}
}

// TestProjectHashKeptOnlyWhenSettled: a project file's hash is kept
// (and used again while its size and times stay) only when the file
// last changed long enough before it was hashed that a later change
// gets another ctime: one changed within the same tick of a coarse
// file system clock, with the same size, would otherwise keep a stale
// hash, and a later snapshot's root would be wrong.
func TestProjectHashKeptOnlyWhenSettled(t *testing.T) {
	w, info := hashedWorkspace(t)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(w.opts.Lower, "src", "main.go"), &st); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ShowSnapshot(self, info.ID); err != nil {
		t.Fatal(err)
	}
	if lh, ok, err := w.meta.LowerHashOf(st.Dev, st.Ino); err != nil || ok {
		t.Fatalf("the hash of a project file written just before it was hashed was kept (%+v, %v): a change in the same clock tick would go unseen", lh, err)
	}
	// Once the file is older than the window, its hash is kept.
	time.Sleep(2100 * time.Millisecond)
	later, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "later"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ShowSnapshot(self, later.ID); err != nil {
		t.Fatal(err)
	}
	lh, ok, err := w.meta.LowerHashOf(st.Dev, st.Ino)
	if err != nil || !ok || lh.Sum != sha256.Sum256([]byte("package main\n")) {
		t.Fatalf("the hash of a settled project file: %+v %v %v, want it kept", lh, ok, err)
	}
}

// TestCommandsNeverWaitForAStuckWorker: a command that needs a root
// (verify) computes it at its own pace, not by waiting for the
// worker's computation of it, which hashes at the lowest priority there
// is and here waits for a hashing process that never answers; and
// closing the workspace ends that process instead of waiting for it.
func TestCommandsNeverWaitForAStuckWorker(t *testing.T) {
	lower := t.TempDir()
	if err := os.WriteFile(filepath.Join(lower, "a.txt"), []byte("lower a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Started by root, the hashing process runs as nobody: its mark
	// goes where nobody may write (t.TempDir's parent is the test's
	// own, mode 0700).
	markDir, err := os.MkdirTemp("", "agentfs-hashing-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(markDir) })
	if err := os.Chmod(markDir, 0o777); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(markDir, "hashing")
	// The hashing process takes the first file, says so, and never
	// answers.
	helper := []string{"/bin/sh", "-c", `head -c 1 <&3 >/dev/null; : > "$0"; exec sleep 3600`, mark}
	w, err := Open(Options{Store: t.TempDir(), Lower: lower, Version: "test", HashHelper: helper})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = w.Close()
		}
	})
	info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	w.hashes.Start()
	for i := 0; ; i++ {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if i == 6000 {
			t.Fatal("the worker never handed a file to its hashing process")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		rep, err := w.Verify(self, ctl.VerifyArgs{Refs: []string{info.ID}})
		if err == nil && !rep.OK {
			err = fmt.Errorf("verify found problems: %+v", rep.Problems)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // a deadlock, not a speed check
		t.Fatal("verify waited for the worker's computation, which waits for a hashing process that never answers")
	}
	go func() { done <- w.Close() }()
	select {
	case err := <-done:
		closed = true
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("closing the workspace waited for a hashing process that never answers")
	}
}

// TestProjectHashesSharedAcrossStores: the hashes of project files are
// kept in the user's cache, so that another store of the same project
// (each agentfs run makes one) reads none of the files again; a file
// changed since is read again, and a cache others may write is not
// used.
func TestProjectHashesSharedAcrossStores(t *testing.T) {
	lower := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(lower, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte('a' + i)}, 10000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(t.TempDir(), "state", "agentfs", "project-hashes")
	time.Sleep(2100 * time.Millisecond) // past the racy window: the hashes are kept
	rootOf := func() (string, int64) {
		t.Helper()
		w, err := Open(Options{Store: t.TempDir(), Lower: lower, Version: "test", HashCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := w.Close(); err != nil {
				t.Error(err)
			}
		}()
		info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
		if err != nil {
			t.Fatal(err)
		}
		if info, err = w.ShowSnapshot(self, info.ID); err != nil {
			t.Fatal(err)
		}
		return info.Root, w.Hashes().ProjectFilesRead()
	}
	want := referenceRoot(t, lower)
	if root, read := rootOf(); root != want || read != 5 {
		t.Fatalf("first store: root %s, %d project files read; want %s, 5", root, read, want)
	}
	if root, read := rootOf(); root != want || read != 0 {
		t.Fatalf("second store: root %s, %d project files read; want %s, 0 (the user's cache has them)", root, read, want)
	}
	// The same size, other contents: read again.
	if err := os.WriteFile(filepath.Join(lower, "f2"), bytes.Repeat([]byte{'z'}, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	want = referenceRoot(t, lower)
	if root, read := rootOf(); root != want || read != 1 {
		t.Fatalf("after a change: root %s, %d project files read; want %s, 1", root, read, want)
	}
	if err := os.Chmod(cache, 0o666); err != nil {
		t.Fatal(err)
	}
	if root, read := rootOf(); root != want || read != 5 {
		t.Fatalf("with a cache anyone may write: root %s, %d project files read; want %s, 5 (not used)", root, read, want)
	}
}

// TestObjectChangedBeforeALaterRoot: an object edited in the store
// after its hash was recorded, and before the root of a later snapshot
// naming it is computed, is not hashed again as if it were new: the
// later snapshot's verify reports it too (objects never change, so a
// recorded hash that no longer matches is damage, not a stale cache).
func TestObjectChangedBeforeALaterRoot(t *testing.T) {
	w, info := hashedWorkspace(t)
	if _, err := w.ShowSnapshot(self, info.ID); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(objectFile(t, w, info.ID, "new.txt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("edited\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	later, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "later"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.ShowSnapshot(self, later.ID) // its root: computed now, or refused
	rep, err := w.Verify(self, ctl.VerifyArgs{Refs: []string{later.ID}})
	if err == nil && rep.OK {
		t.Fatalf("verify of a snapshot whose object was edited in the store before its root was computed: OK, want object-changed (%+v)", rep)
	}
	if err == nil && !strings.Contains(fmt.Sprint(rep.Problems), "object-changed") {
		t.Errorf("verify: %+v, want an object-changed problem", rep.Problems)
	}
}

// TestSnapshotRootEdgeCases: the root of a snapshot holding what a
// definition can get wrong (names with a newline or bytes that are not
// UTF-8, setid and sticky bits, the top directory's own mode, empty
// directories, fifos, hard links; some in the project, some made or
// changed in the branch) is the root an independent computation gets
// from its export.
func TestSnapshotRootEdgeCases(t *testing.T) {
	lower := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(lower, "new\nline"), []byte("n\n"), 0o644))
	must(os.WriteFile(filepath.Join(lower, "latin1-\xe9"), []byte("e\n"), 0o644))
	must(os.WriteFile(filepath.Join(lower, "setuid"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(lower, "setuid"), 0o4755))
	must(os.Mkdir(filepath.Join(lower, "shared"), 0o755))
	must(os.Chmod(filepath.Join(lower, "shared"), 0o3775))
	must(os.Mkdir(filepath.Join(lower, "empty"), 0o700))
	must(unix.Mkfifo(filepath.Join(lower, "fifo"), 0o640))
	must(os.WriteFile(filepath.Join(lower, "one"), []byte("linked\n"), 0o644))
	must(os.Link(filepath.Join(lower, "one"), filepath.Join(lower, "shared", "two")))
	must(os.WriteFile(filepath.Join(lower, "plain"), []byte("plain\n"), 0o644))
	must(os.Chmod(lower, 0o750))
	w, err := Open(Options{Store: t.TempDir(), Lower: lower, Version: "test"})
	must(err)
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	v := w.View()
	_, _, err = v.Mkdir(v.Root(), "made-empty", 0o1777, overlay.Caller{})
	must(err)
	_, _, err = v.Symlink(v.Root(), "made-link\n", "new\nline", overlay.Caller{})
	must(err)
	_, _, err = v.Mknod(v.Root(), "made-fifo", unix.S_IFIFO|0o600, 0, overlay.Caller{})
	must(err)
	writeFile(t, v, "made-\xff", "made\n")
	made, _, err := v.Lookup(v.Root(), "made-\xff")
	must(err)
	_, err = v.Link(made, v.Root(), "made-link2")
	must(err)
	plain, _, err := v.Lookup(v.Root(), "plain")
	must(err)
	mode := uint32(0o2711)
	_, err = v.Setattr(plain, overlay.SetAttr{Mode: &mode}, nil)
	must(err)
	root := v.Root()
	topMode := uint32(0o705)
	_, err = v.Setattr(root, overlay.SetAttr{Mode: &topMode}, nil)
	must(err)
	info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "edges"})
	must(err)
	shown, err := w.ShowSnapshot(self, info.ID)
	must(err)
	out := filepath.Join(t.TempDir(), "export")
	reply, err := w.Export(self, ctl.ExportArgs{Ref: info.ID, To: out, Manifest: true})
	must(err)
	var st unix.Stat_t
	must(unix.Lstat(out, &st))
	if st.Mode&07777 != 0o705 {
		t.Errorf("the export's top directory has mode %04o, want 0705", st.Mode&07777)
	}
	if want := referenceRoot(t, out); shown.Root != want || reply.Root != want {
		t.Errorf("root: snapshot show %s, export's manifest %s; recomputed from the export %s", shown.Root, reply.Root, want)
	}
	rep, err := w.Verify(self, ctl.VerifyArgs{Refs: []string{info.ID}, Tree: out})
	if err != nil || !rep.OK {
		t.Fatalf("verify --tree of the export: %+v, %v", rep, err)
	}
	link := filepath.Join(t.TempDir(), "to-export")
	must(os.Symlink(out, link))
	if rep, err = w.Verify(self, ctl.VerifyArgs{Refs: []string{info.ID}, Tree: link}); err != nil || !rep.OK {
		t.Fatalf("verify --tree of the export named through a symlink: %+v, %v", rep, err)
	}
}

// TestWorkerSurvivesItsHashingProcess: a hashing process that dies
// (here at once) costs only its priority: the worker hashes in the
// daemon and computes the same root.
func TestWorkerSurvivesItsHashingProcess(t *testing.T) {
	lower := t.TempDir()
	if err := os.WriteFile(filepath.Join(lower, "a.txt"), bytes.Repeat([]byte("a"), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Open(Options{Store: t.TempDir(), Lower: lower, Version: "test", HashHelper: []string{"/bin/sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	writeFile(t, w.View(), "b.txt", "made in the branch\n")
	info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	w.hashes.Start()
	w.hashes.Kick()
	for i := 0; ; i++ {
		list, err := w.Snapshots()
		if err != nil {
			t.Fatal(err)
		}
		if s := list.Snapshots[0]; s.RootStatus == "computed" {
			out := filepath.Join(t.TempDir(), "export")
			if _, err := w.Export(self, ctl.ExportArgs{Ref: info.ID, To: out}); err != nil {
				t.Fatal(err)
			}
			if want := referenceRoot(t, out); s.Root != want {
				t.Errorf("root %s, recomputed from the export %s", s.Root, want)
			}
			return
		} else if s.RootStatus == "failed" || i == 6000 {
			t.Fatalf("the worker whose hashing process died: root status %s", s.RootStatus)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLiveExportManifestIsTheTree: the manifest of an export of a
// branch being written (read live) is the manifest of the tree written,
// not of the branch a moment later.
func TestLiveExportManifestIsTheTree(t *testing.T) {
	w, _ := hashedWorkspace(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			writeFile(t, w.View(), "busy.txt", strings.Repeat(fmt.Sprint(i%10), 100+i%7))
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 200 {
		out := filepath.Join(t.TempDir(), "export")
		reply, err := w.Export(self, ctl.ExportArgs{Ref: "main", To: out, Manifest: true})
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceRoot(t, out); reply.Root != want {
			t.Fatalf("export %d of a branch being written: manifest root %s, the tree's %s", i, reply.Root, want)
		}
	}
}

// TestWorkerYields: the worker asks HashYield before each file it
// reads (a mount's daemon holds it back there while programs change
// files), and a command's computation never does.
func TestWorkerYields(t *testing.T) {
	lower := t.TempDir()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(lower, fmt.Sprintf("f%d", i)), []byte(fmt.Sprint("file ", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int64
	release := make(chan struct{})
	w, err := Open(Options{Store: t.TempDir(), Lower: lower, Version: "test", HashYield: func(quit <-chan struct{}) {
		calls.Add(1)
		select {
		case <-release:
		case <-quit:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	writeFile(t, w.View(), "new.txt", "the branch's own file")
	// A command computes the root itself, without yielding.
	first, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ShowSnapshot(self, first.ID); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("snapshot show yielded %d times: a command must not wait for the mount to be quiet", n)
	}
	writeFile(t, w.View(), "later.txt", "written after the first snapshot")
	second, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "second"})
	if err != nil {
		t.Fatal(err)
	}
	w.hashes.Start()
	for i := 0; calls.Load() == 0; i++ {
		if i == 1000 {
			t.Fatal("the worker never yielded before reading a file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	status := func() string {
		list, err := w.Snapshots()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Snapshots {
			if s.ID == second.ID {
				return s.RootStatus
			}
		}
		t.Fatalf("snapshot %s not listed", second.ID)
		return ""
	}
	if s := status(); s == "computed" {
		t.Fatalf("root computed while the worker was held back before its first file")
	}
	close(release)
	for i := 0; status() != "computed"; i++ {
		if i == 1000 {
			t.Fatalf("root status %q after the worker was let go", status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
