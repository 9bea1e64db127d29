package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// privateStoreWithFiles makes a private store in a base of the test's
// own (AGENTFS_PRIVATE_DIR) holding a few files.
func privateStoreWithFiles(t *testing.T) (base, store string) {
	t.Helper()
	base = t.TempDir()
	t.Setenv("AGENTFS_PRIVATE_DIR", base)
	store, err := MakePrivateStore()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(store, "objects", "ab"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"agentfs.log", "objects/ab/abcd"} {
		if err := os.WriteFile(filepath.Join(store, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return base, store
}

// TestDiscardPrivateStore: without a remover to start (a test binary),
// the store is moved aside and deleted inline; a store already gone is
// no error.
func TestDiscardPrivateStore(t *testing.T) {
	base, store := privateStoreWithFiles(t)
	if err := DiscardPrivateStore(store); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(base); len(left) != 0 {
		t.Errorf("%s holds %v after the discard, want nothing", base, left)
	}
	if err := DiscardPrivateStore(store); err != nil {
		t.Errorf("discarding a store already gone: %v, want no error", err)
	}
}

// TestRemoverDeletesOnlyTrash: the remover deletes a private store's
// trash name only: not a store, not a directory named like trash outside
// the places for private stores.
func TestRemoverDeletesOnlyTrash(t *testing.T) {
	base, store := privateStoreWithFiles(t)
	other := filepath.Join(t.TempDir(), trashPrefix+filepath.Base(store))
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{store, other} {
		if err := removeLocked(dir); err == nil {
			t.Errorf("the remover took %s, which is no trash of a private store", dir)
		}
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s after the remover refused it: %v", dir, err)
		}
	}
	trash := filepath.Join(base, trashPrefix+filepath.Base(store))
	if err := os.Rename(store, trash); err != nil {
		t.Fatal(err)
	}
	if err := removeLocked(trash); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(trash); !os.IsNotExist(err) {
		t.Errorf("%s after the remover: %v, want it gone", trash, err)
	}
}

// TestRemoverLeavesHeldTrash: trash another remover holds (its lock)
// is left to it, by a remover and by the sweep.
func TestRemoverLeavesHeldTrash(t *testing.T) {
	base, store := privateStoreWithFiles(t)
	trash := filepath.Join(base, trashPrefix+filepath.Base(store))
	if err := os.Rename(store, trash); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(trash, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if !held(trash) {
		t.Errorf("held(%s) = false while another descriptor holds its lock", trash)
	}
	if err := removeLocked(trash); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(trash, "objects", "ab", "abcd")); err != nil {
		t.Errorf("the remover deleted trash another remover holds: %v", err)
	}
	unix.Close(fd)
	if held(trash) {
		t.Errorf("held(%s) = true once its lock is let go", trash)
	}
}

// TestDiscardPrivateStoreThroughLinks: a base reached through a
// symbolic link (the daemon has its store's path resolved), a relative
// base (made absolute), and a trash name an older store's trash still
// holds (the store gets a name of its own) are all discarded.
func TestDiscardPrivateStoreThroughLinks(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(link, "agentfs"))
	store, err := MakePrivateStore()
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(store)
	if err != nil {
		t.Fatal(err)
	}
	if err := DiscardPrivateStore(resolved); err != nil {
		t.Fatalf("discarding %s (resolved from %s): %v", resolved, store, err)
	}
	if left, _ := os.ReadDir(filepath.Join(real, "agentfs")); len(left) != 0 {
		t.Errorf("%s holds %v after the discard, want nothing", real, left)
	}

	t.Chdir(real)
	t.Setenv("AGENTFS_PRIVATE_DIR", "rel")
	store, err = MakePrivateStore()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(store) {
		t.Errorf("MakePrivateStore with a relative base gave %s, want an absolute path", store)
	}
	older := filepath.Join(filepath.Dir(store), trashPrefix+filepath.Base(store))
	if err := os.MkdirAll(filepath.Join(older, "kept"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := DiscardPrivateStore(store); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("the store %s after the discard: %v, want it gone", store, err)
	}
}
