package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/s3test"
)

// fileObjects counts the regular files of some size among the objects
// of the hostfs store at store: the inodes made for files (the idle
// files the backstore makes ahead are empty).
func fileObjects(t *testing.T, store string) int {
	t.Helper()
	shards, err := filepath.Glob(filepath.Join(store, "objects", "[0-9a-f][0-9a-f]"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sh := range shards {
		ents, err := os.ReadDir(sh)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if len(e.Name()) != 16 || !e.Type().IsRegular() {
				continue
			}
			if info, err := e.Info(); err == nil && info.Size() > 0 {
				n++
			}
		}
	}
	return n
}

// TestMountFromMakesObjectsAtFirstUse: mount --from makes no inode for
// the snapshot's files at the start (their objects are deferred), a
// hard-linked file's neither; ls -l, stat and getfattr make none; an
// open makes (and fetches) only the file it opens, a chmod only its
// file; a kept store mounted again goes on with the rest deferred, and
// fsck finds it whole.
func TestMountFromMakesObjectsAtFirstUse(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"seed": "x\n"})
	const files = 40
	id := a.run(project, fmt.Sprintf("mkdir d; for i in $(seq %d); do echo file $i > d/f$i; done; ln d/f1 d/hard1", files))
	pushed := a.push("-s", id)
	snap := pushed.Snapshots[len(pushed.Snapshots)-1]
	checkout := copyProject(t, project)
	store := filepath.Join(t.TempDir(), "store")
	mnt := harness.NewMountpoint(t)
	b.mountAt(nil, mnt, "--lower", checkout, "--from", "team/"+snap, "--store", store)
	if n := fileObjects(t, store); n != 0 {
		t.Fatalf("the start made %d file objects for %d files and a hard link: want them deferred", n, files)
	}
	var st1, sth unix.Stat_t
	mustf(t, unix.Stat(filepath.Join(mnt, "d/f1"), &st1), "stat d/f1")
	mustf(t, unix.Stat(filepath.Join(mnt, "d/hard1"), &sth), "stat d/hard1")
	if st1.Ino != sth.Ino || st1.Nlink != 2 {
		t.Errorf("d/f1 (ino %d, %d links) and d/hard1 (ino %d): want one file of 2 links", st1.Ino, st1.Nlink, sth.Ino)
	}
	if out, err := exec.Command("ls", "-lR", mnt).CombinedOutput(); err != nil || strings.Count(string(out), " f") < files {
		t.Fatalf("ls -lR: %v\n%s", err, out)
	}
	if out, err := exec.Command("getfattr", "-d", "-m", "-", filepath.Join(mnt, "d/f1")).CombinedOutput(); err != nil {
		t.Logf("getfattr: %v %s", err, out) // optional: the listing above read xattrs too
	}
	if n := fileObjects(t, store); n != 0 {
		t.Errorf("ls -lR and getfattr made %d file objects, want none", n)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "d/f7")); got != "file 7\n" {
		t.Errorf("d/f7 = %q", got)
	}
	mustf(t, os.Chmod(filepath.Join(mnt, "d/f8"), 0o600), "chmod d/f8")
	if n := fileObjects(t, store); n != 2 {
		t.Errorf("an open and a chmod made %d file objects, want 2", n)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "d/hard1")); got != "file 1\n" {
		t.Errorf("d/hard1 = %q, want file 1", got)
	}
	if n := fileObjects(t, store); n != 3 {
		t.Errorf("reading the hard-linked file made %d file objects in all, want 3", n)
	}
	if r := b.agentfs("", "unmount", mnt); r.Code != 0 {
		t.Fatalf("unmount: %s", r)
	}
	// An agentfs that knows no deferred objects must refuse the store:
	// it holds feature/deferred-objects (badger keeps keys as they are).
	if !storeHolds(t, store, "feature/deferred-objects") {
		t.Errorf("the store started with deferred objects has no feature/deferred-objects")
	}

	b.mountAt(nil, mnt, "--lower", checkout, "--store", store)
	if st, err := os.Stat(filepath.Join(mnt, "d/f8")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("d/f8 after a remount: %v (%v), want mode 0600", st, err)
	}
	for _, i := range []int{7, 8, files} {
		p := filepath.Join(mnt, fmt.Sprintf("d/f%d", i))
		if got, want := harness.ReadFile(t, p), fmt.Sprintf("file %d\n", i); got != want {
			t.Errorf("%s after a remount = %q, want %q", p, got, want)
		}
	}
	if r := b.agentfs(mnt, "fsck"); r.Code != 0 || !strings.Contains(r.Stdout, "no problems found") {
		t.Errorf("fsck: %s", r)
	}
}

// storeHolds reports whether a file of store's metadata database holds
// key's bytes.
func storeHolds(t *testing.T, store, key string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(filepath.Join(store, "meta"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || found {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found = bytes.Contains(data, []byte(key))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
