package hide

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/autosnap"
)

// The sources of patterns, from the lowest layer to the highest (each
// layer is matched on its own: see the package doc).
const (
	FromUser    = "user"    // the user's configuration file
	FromProject = "project" // the project's .agentfs.conf
	FromFlag    = "flag"    // --hide on the command line
)

// Pattern is one hide pattern and where it came from.
type Pattern struct {
	Pattern string `json:"pattern"`
	From    string `json:"from"`
}

// Rules decide which project paths are hidden (see the package doc).
// The zero value and nil hide nothing.
type Rules struct {
	patterns []Pattern
	layers   []*autosnap.Ignore
}

// Check says what is wrong with a pattern (empty, a comment, or a glob
// that cannot match), with the fix.
func Check(pattern string) error {
	if err := autosnap.CheckPattern(pattern); err != nil {
		return fmt.Errorf("%v: write a gitignore-style pattern (see gitignore(5))", err)
	}
	return nil
}

// New makes the rules of ps, in their order; a pattern of an unknown
// source or that Check refuses is an error.
func New(ps []Pattern) (*Rules, error) {
	r := &Rules{}
	var layer []string
	from := ""
	flush := func() error {
		if len(layer) == 0 {
			return nil
		}
		ig, err := autosnap.NewIgnore(autosnap.IgnoreOptions{Patterns: layer})
		if err != nil {
			return err
		}
		r.layers = append(r.layers, ig)
		layer = nil
		return nil
	}
	for _, p := range ps {
		switch p.From {
		case FromUser, FromProject, FromFlag:
		default:
			return nil, fmt.Errorf("hide pattern %q: unknown source %q (want %s, %s or %s)", p.Pattern, p.From, FromUser, FromProject, FromFlag)
		}
		if err := Check(p.Pattern); err != nil {
			return nil, fmt.Errorf("hide pattern from the %s: %w", p.From, err)
		}
		if p.From != from {
			if err := flush(); err != nil {
				return nil, err
			}
			from = p.From
		}
		layer = append(layer, p.Pattern)
		r.patterns = append(r.patterns, p)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return r, nil
}

// Empty reports whether r hides nothing.
func (r *Rules) Empty() bool { return r == nil || len(r.layers) == 0 }

// Patterns returns the patterns of r, in their order.
func (r *Rules) Patterns() []Pattern {
	if r == nil {
		return nil
	}
	return slices.Clone(r.patterns)
}

// Hidden reports whether project path p (relative to the lower root,
// '/'-separated) is hidden; isDir says whether p is a directory. A
// path below a hidden directory is hidden.
func (r *Rules) Hidden(p string, isDir bool) bool {
	if r.Empty() {
		return false
	}
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return false // the root is never hidden
	}
	for _, ig := range r.layers {
		if ig.Ignored("", p, isDir) {
			return true
		}
	}
	return false
}

// Marshal encodes r for the store (Unmarshal reads it back).
func (r *Rules) Marshal() []byte {
	b, err := json.Marshal(struct {
		Patterns []Pattern `json:"patterns"`
	}{r.Patterns()})
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return b
}

// Unmarshal decodes rules that Marshal encoded.
func Unmarshal(b []byte) (*Rules, error) {
	var rec struct {
		Patterns []Pattern `json:"patterns"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("the recorded hide patterns: %w", err)
	}
	return New(rec.Patterns)
}

// Inodes is the set of the lower inodes that hidden paths name (see
// "Hidden inodes" in the package doc). A nil *Inodes holds nothing.
type Inodes struct {
	mu   sync.Mutex
	set  map[devIno]struct{}
	inos map[uint64]struct{} // the numbers of set, whatever the device
}

type devIno struct{ dev, ino uint64 }

// Scan makes the set of the regular files that hidden paths of the
// tree at dir name, by reading every directory of the tree. It opens
// no regular file: the names come from the directories, the inodes
// from fstatat. A directory it cannot read is skipped (the view cannot
// list it either: for root, nothing is refused).
func Scan(r *Rules, dir string) (*Inodes, error) {
	in := &Inodes{set: map[devIno]struct{}{}, inos: map[uint64]struct{}{}}
	if r.Empty() {
		return in, nil
	}
	fd, err := openDirNoatime(unix.AT_FDCWD, dir, 0) // dir may be /proc/self/fd/N
	if err != nil {
		return nil, fmt.Errorf("scanning %s for hidden files: %w", dir, err)
	}
	if err := in.scanDir(r, fd, "", false); err != nil {
		return nil, fmt.Errorf("scanning %s for hidden files: %w", dir, err)
	}
	return in, nil
}

// scanDir scans directory p (open as fd, which it closes); hidden
// says p is hidden.
func (in *Inodes) scanDir(r *Rules, fd int, p string, hidden bool) error {
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, de := range ents {
		cp := path.Join(p, de.Name())
		h := hidden || r.Hidden(cp, de.IsDir())
		switch {
		case de.IsDir():
			sub, err := openDirNoatime(fd, de.Name(), unix.O_NOFOLLOW)
			if err != nil {
				continue // unreadable, or gone meanwhile
			}
			if err := in.scanDir(r, sub, cp, h); err != nil {
				return err
			}
		case h && de.Type().IsRegular():
			var st unix.Stat_t
			if err := unix.Fstatat(fd, de.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				in.Saw(st.Dev, st.Ino)
			}
		}
	}
	return nil
}

// openDirNoatime opens directory name of dirfd for listing (with more
// flags) without updating its atime (a directory of the project, which
// agentfs never changes); O_NOATIME needs ownership or CAP_FOWNER, so
// without them it opens it plainly.
func openDirNoatime(dirfd int, name string, more int) (int, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | more
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	return fd, err
}

// Saw records a hidden regular file's inode.
func (in *Inodes) Saw(dev, ino uint64) {
	if in == nil {
		return
	}
	in.mu.Lock()
	if in.set == nil {
		in.set, in.inos = map[devIno]struct{}{}, map[uint64]struct{}{}
	}
	in.set[devIno{dev, ino}] = struct{}{}
	in.inos[ino] = struct{}{}
	in.mu.Unlock()
}

// Hides reports whether the inode is one a hidden path names.
func (in *Inodes) Hides(dev, ino uint64) bool {
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.set[devIno{dev, ino}]
	return ok
}

// HidesIno reports whether an inode of that number, on any device, is
// one a hidden path names: a listing's d_ino tells it (a false positive
// only costs the caller a stat).
func (in *Inodes) HidesIno(ino uint64) bool {
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.inos[ino]
	return ok
}

// Len is the number of inodes recorded.
func (in *Inodes) Len() int {
	if in == nil {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.set)
}
