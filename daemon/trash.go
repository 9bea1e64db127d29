package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/procfs"
)

// Discarding a private store.
//
// A private store is deleted when its mount ends, and it may hold
// hundreds of thousands of objects: deleting the 200,000 of the
// bench's restore-100k took the daemon 20 to 60 s on a loaded machine,
// and the daemon did it before it exited, so that agentfs unmount,
// which waits for the exit, gave up after 10 s ("did not exit"). None
// of it is work the user waits for: what the store held is discarded
// either way. So the store is renamed to a trash name beside it (one
// rename: the store's path is gone at once), and a remover process
// (RemoverCommand) deletes the trash in the background, at the lowest
// priority, holding a lock on it (flock on the directory) for as long
// as it works. A trash directory whose remover is gone (killed, or the
// machine restarted) is taken up by the next private store made in the
// same place (sweepTrash).

// trashPrefix starts the name of a private store being deleted: never
// privateStorePrefix, so that nothing takes it for a store.
const trashPrefix = "trash-"

// RemoverCommand is the hidden command of agentfs-core that deletes
// trash directories (RunRemover).
const RemoverCommand = "__remove-trash"

// Remover is the command line of the remover process, without the
// directories: agentfs-core and RemoverCommand, set by agentfs-core at
// its start. Where it is not set (a test binary), trash is deleted
// inline.
var Remover []string

// DiscardPrivateStore deletes the private store dir: it renames it to a
// trash name and starts a remover for it, so that the caller need not
// wait (see above). Where no remover can be started, it deletes the
// trash itself. A missing store is no error.
func DiscardPrivateStore(dir string) error {
	if !IsPrivateStore(dir) {
		return fmt.Errorf("not deleting %s: it is not in the private store directory", dir)
	}
	trash := filepath.Join(filepath.Dir(dir), trashPrefix+filepath.Base(dir))
	// Never onto an older store's trash of the same name (a name
	// MkdirTemp gave again): that one gets a suffix.
	err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, trash, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		trash += "." + strconv.FormatInt(time.Now().UnixNano(), 36)
		err = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, trash, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("moving the private store %s aside to delete it: %w", dir, err)
	}
	return removeTrash(trash)
}

// removeTrash starts a remover for the trash directories dirs, or, where
// none can be started, deletes them itself.
func removeTrash(dirs ...string) error {
	if startRemover(dirs) {
		return nil
	}
	var errs []error
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("deleting the private store %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// startRemover starts a remover process for dirs, not waited for; false
// when there is none to start.
func startRemover(dirs []string) bool {
	if len(Remover) == 0 {
		return false
	}
	args := append(append(append([]string{}, Remover[1:]...), "--"), dirs...)
	cmd := exec.Command(Remover[0], args...)
	cmd.Dir = "/"
	// A session of its own: neither a terminal's signals nor the end of
	// the process that started it end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false
	}
	go func() { _ = cmd.Wait() }() // reaped if this process outlives it
	return true
}

// RunRemover is the remover process: it deletes each trash directory in
// args (after "--") that no other remover holds, at the lowest priority,
// and returns the exit code. It only deletes directories named as trash
// in a place for private stores.
func RunRemover(args []string) int {
	procfs.LowerOwnPriority()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	code := 0
	for _, dir := range args {
		if err := removeLocked(dir); err != nil {
			fmt.Fprintf(os.Stderr, "agentfs: %v\n", err)
			code = 1
		}
	}
	return code
}

// removeLocked deletes the trash directory dir unless another remover
// holds it.
func removeLocked(dir string) error {
	if !isTrash(dir) {
		return fmt.Errorf("not deleting %s: it is not a private store being deleted", dir)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting %s: %w", dir, err)
	}
	defer unix.Close(fd) // the lock goes with it
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil // another remover deletes it
		}
		return fmt.Errorf("locking %s: %w", dir, err)
	}
	waitGate("AGENTFS_TEST_REMOVE_GATE")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting %s: %w", dir, err)
	}
	return nil
}

// isTrash reports whether dir is a trash directory this user's agentfs
// made: a private store's trash name in a place for private stores.
func isTrash(dir string) bool {
	dir = filepath.Clean(dir)
	name := filepath.Base(dir)
	if !strings.HasPrefix(name, trashPrefix) {
		return false
	}
	return IsPrivateStore(filepath.Join(filepath.Dir(dir), strings.TrimPrefix(name, trashPrefix)))
}

// sweepTrash starts a remover for the trash directories in base that no
// remover holds: what a remover that was killed left.
func sweepTrash(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	var left []string
	for _, e := range entries {
		dir := filepath.Join(base, e.Name())
		if !e.IsDir() || !isTrash(dir) || held(dir) {
			continue
		}
		left = append(left, dir)
	}
	if len(left) > 0 {
		// Never here: the sweep runs while a mount starts. What is not
		// deleted now is at the next sweep.
		startRemover(left)
	}
}

// held reports whether a remover holds the trash directory dir.
func held(dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return true // gone, or not ours to take
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil
}
