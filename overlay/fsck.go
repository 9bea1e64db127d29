package overlay

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
)

// # Fsck
//
// Fsck checks that a store's entries and objects agree: in every
// branch and every snapshot, each entry's object exists and is of the
// entry's type, and each metacopy or hard-link entry's Origin lower
// file still exists; and every object is named by some entry (or held
// by an open node), the rest being garbage.
//
// With Repair it changes what can be changed without guessing:
//
//   - a branch entry whose object is missing or of the wrong type is
//     replaced by a whiteout when a lower file shows at its path (so
//     the path stays deleted, as the branch had it changed), or
//     deleted otherwise, with every entry below it (a directory's
//     contents cannot show without it). A directory entry instead gets
//     a new empty directory object, with the lower directory's mode,
//     owner, xattrs and times where it has one (else 0755), so the
//     changes below it are kept;
//   - garbage is removed (as backstore.Store.Collect, so objects changed
//     in the last minute are kept: an operation may be using them).
//
// Snapshots are immutable and only reported; a lost Origin is only
// reported (a metacopy's data lived in the lower file). Repair writes
// branch entries directly: run it on a store that no daemon serves, or
// reload every view of the store afterwards (FS.Reload).

// FsckOptions describe what Fsck checks.
type FsckOptions struct {
	Objects *backstore.Store
	Meta    *branch.Store
	// Lower is the store's lower directory; "" skips the checks of
	// Origin files, and repairs then delete (no whiteouts).
	Lower  string
	Repair bool
	// InUse reports objects that open nodes of running views hold
	// (FS.LiveObjects): never garbage.
	InUse func(id string) bool
	// Grace is backstore.GCOptions.Grace for garbage.
	Grace time.Duration
	// Progress, when set, is told after each branch and snapshot how
	// many of them were checked, of how many.
	Progress func(done, total int)
}

// FsckKind names a problem.
type FsckKind string

const (
	MissingObject FsckKind = "missing-object" // the entry names an object the backstore lacks
	WrongType     FsckKind = "wrong-type"     // the object is not of the entry's type
	OriginGone    FsckKind = "origin-gone"    // the lower file a metacopy or hard link came from is gone
)

// FsckProblem is one entry that does not agree with the objects or the
// lower tree.
type FsckProblem struct {
	Branch   string   `json:"branch,omitempty"`   // the branch, or the snapshot's branch
	Snapshot string   `json:"snapshot,omitempty"` // the snapshot id, for a snapshot's entry
	Path     string   `json:"path"`
	Kind     FsckKind `json:"kind"`
	Object   string   `json:"object,omitempty"`
	Detail   string   `json:"detail"`
	// Repair says what Repair did about it; "" when nothing.
	Repair string `json:"repair,omitempty"`
}

func (p FsckProblem) String() string {
	where := "branch " + p.Branch
	if p.Snapshot != "" {
		where = fmt.Sprintf("snapshot %s (of %s)", p.Snapshot, p.Branch)
	}
	s := fmt.Sprintf("%s: /%s: %s: %s", where, p.Path, p.Kind, p.Detail)
	if p.Repair != "" {
		s += "; repaired: " + p.Repair
	}
	return s
}

// FsckReport is what Fsck found and did.
type FsckReport struct {
	Branches  int                 `json:"branches"`
	Snapshots int                 `json:"snapshots"`
	Entries   int                 `json:"entries"` // entries checked, over all branches and snapshots
	Objects   int                 `json:"objects"` // objects in the backstore (after repairs)
	Problems  []FsckProblem       `json:"problems"`
	Garbage   []backstore.Garbage `json:"garbage"`
	Repair    bool                `json:"repair"`
}

// Clean reports whether Fsck found nothing wrong.
func (r FsckReport) Clean() bool { return len(r.Problems) == 0 && len(r.Garbage) == 0 }

func (r FsckReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checked %d branches, %d snapshots, %d entries, %d objects\n", r.Branches, r.Snapshots, r.Entries, r.Objects)
	for _, p := range r.Problems {
		fmt.Fprintln(&b, p)
	}
	if len(r.Garbage) > 0 {
		var bytes int64
		removed, young := 0, 0
		for _, g := range r.Garbage {
			bytes += g.Bytes
			if g.Removed {
				removed++
			}
			if g.Young {
				young++
			}
		}
		fmt.Fprintf(&b, "garbage: %d objects nothing refers to (%d bytes)", len(r.Garbage), bytes)
		switch {
		case removed > 0:
			fmt.Fprintf(&b, "; %d removed", removed)
		case !r.Repair:
			fmt.Fprint(&b, "; --repair removes them")
		}
		if young > 0 {
			fmt.Fprintf(&b, "; %d kept, changed in the last %v (an operation may be using them)", young, backstore.DefaultGCGrace)
		}
		fmt.Fprintln(&b)
	}
	if r.Clean() {
		fmt.Fprintln(&b, "no problems found")
	}
	return b.String()
}

// Fsck checks (and with o.Repair, repairs) a store; see "Fsck" above.
func Fsck(o FsckOptions) (FsckReport, error) {
	r := FsckReport{Repair: o.Repair}
	c := &checker{o: o, objs: map[string]objectState{}, r: &r, lowerFd: -1}
	if o.Lower != "" {
		fd, err := unix.Open(o.Lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return r, fmt.Errorf("fsck: lower directory %s: %w", o.Lower, err)
		}
		defer unix.Close(fd)
		c.lowerFd = fd
	}
	names, err := o.Meta.Layers()
	if err != nil {
		return r, fmt.Errorf("fsck: %w", err)
	}
	snaps, err := o.Meta.Snapshots()
	if err != nil {
		return r, fmt.Errorf("fsck: %w", err)
	}
	done, total := 0, len(names)+len(snaps)
	progress := func() {
		done++
		if o.Progress != nil {
			o.Progress(done, total)
		}
	}
	for _, name := range names {
		l, err := o.Meta.Layer(name)
		if err != nil {
			return r, fmt.Errorf("fsck: branch %s: %w", name, err)
		}
		if err := c.branch(l); err != nil {
			return r, err
		}
		progress()
	}
	for _, s := range snaps {
		r.Snapshots++
		where := FsckProblem{Branch: s.Branch, Snapshot: s.ID}
		if _, err := c.check(o.Meta.SnapshotView(s), where); err != nil {
			return r, fmt.Errorf("fsck: snapshot %s: %w", s.ID, err)
		}
		progress()
	}
	gr, err := o.Objects.Collect(backstore.GCOptions{
		Referenced: o.Meta.ReferencedObjects,
		InUse:      o.InUse,
		Grace:      o.Grace,
		DryRun:     !o.Repair,
		Found: func(g backstore.Garbage) error {
			r.Garbage = append(r.Garbage, g)
			return nil
		},
	})
	r.Objects = gr.Objects - gr.Removed
	if err != nil {
		return r, fmt.Errorf("fsck: garbage: %w", err)
	}
	return r, nil
}

// objectState is what Fsck learnt of one object.
type objectState struct {
	exists bool
	mode   uint32 // S_IFMT bits
}

// checker is one run of Fsck.
type checker struct {
	o       FsckOptions
	lowerFd int // -1 when no lower directory was given
	objs    map[string]objectState
	r       *FsckReport
}

// entryAt is an entry loaded with its path.
type entryAt struct {
	path string
	e    *branch.Entry
}

// branch checks (and repairs) one branch's entries.
func (c *checker) branch(l *branch.Layer) error {
	c.r.Branches++
	first := len(c.r.Problems)
	entries, err := c.check(l, FsckProblem{Branch: l.Name()})
	if err != nil {
		return fmt.Errorf("fsck: branch %s: %w", l.Name(), err)
	}
	if !c.o.Repair || len(c.r.Problems) == first {
		return nil
	}
	byPath := make(map[string]*branch.Entry, len(entries))
	for _, ea := range entries {
		byPath[ea.path] = ea.e
	}
	var b branch.Batch
	var made []string
	removed := map[string]string{} // path → the removed path it went with
	for i := first; i < len(c.r.Problems); i++ {
		p := &c.r.Problems[i]
		if p.Kind == OriginGone {
			continue
		}
		if top, ok := removed[p.Path]; ok {
			p.Repair = fmt.Sprintf("entry deleted with /%s", top)
			continue
		}
		e := byPath[p.Path]
		if e.Type == branch.TypeDir {
			id, how, err := c.newDirObject(c.lowerPathOf(p.Path, e, byPath))
			if err != nil {
				return fmt.Errorf("fsck: branch %s: /%s: %w", l.Name(), p.Path, err)
			}
			made = append(made, id)
			ne := *e
			ne.Object, ne.Epoch = id, l.Epoch()
			b.Put(p.Path, &ne)
			p.Repair = fmt.Sprintf("given a new empty directory object %s (%s); the entries below it are kept", id, how)
			continue
		}
		lp, ok := c.lowerPathOf(p.Path, nil, byPath)
		var st unix.Stat_t
		if ok && c.lowerFd >= 0 && unix.Fstatat(c.lowerFd, lowerRel(lp), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			b.Put(p.Path, &branch.Entry{Type: branch.TypeWhiteout})
			p.Repair = fmt.Sprintf("entry replaced by a whiteout (the lower file /%s would show otherwise)", lp)
		} else {
			b.Delete(p.Path)
			p.Repair = "entry deleted (no lower file shows at the path)"
		}
		// Nothing below a file shows: entries there are unreachable.
		below := 0
		for _, ea := range entries {
			if ea.path != p.Path && isBelow(ea.path, p.Path) {
				b.Delete(ea.path)
				removed[ea.path] = p.Path
				below++
			}
		}
		if below > 0 {
			p.Repair += fmt.Sprintf(", with the %d entries below it", below)
		}
	}
	err = l.Commit(&b)
	if err != nil {
		for _, id := range made {
			// An object not removed is garbage, which the garbage
			// check reports and gc removes; the caller gets err.
			_ = c.o.Objects.Remove(id)
		}
	} else {
		// Repairs are written before fsck reports them. If that fails,
		// these may be written or lost with a commit before them: their
		// objects stay, for gc.
		err = l.Settle()
	}
	if err != nil {
		for i := first; i < len(c.r.Problems); i++ {
			c.r.Problems[i].Repair = ""
		}
		return fmt.Errorf("fsck: branch %s: committing the repairs: %w", l.Name(), err)
	}
	return nil
}

// check checks every entry of src, adding problems (with where's
// branch and snapshot), and returns the entries.
func (c *checker) check(src branch.Source, where FsckProblem) ([]entryAt, error) {
	var entries []entryAt
	err := src.Load(func(p string, e *branch.Entry) error {
		c.r.Entries++
		entries = append(entries, entryAt{p, e})
		if e.Object == "" {
			return nil
		}
		prob := where
		prob.Path, prob.Object = p, e.Object
		st, err := c.object(e.Object)
		if err != nil {
			return err
		}
		switch want := typeMode(e.Type); {
		case !st.exists:
			prob.Kind, prob.Detail = MissingObject, fmt.Sprintf("the %s's object %s is not in the backstore", e.Type, e.Object)
			c.r.Problems = append(c.r.Problems, prob)
			return nil
		case st.mode != want:
			prob.Kind, prob.Detail = WrongType, fmt.Sprintf("the %s's object %s is a %s", e.Type, e.Object, modeType(st.mode))
			c.r.Problems = append(c.r.Problems, prob)
			return nil
		}
		if e.Origin != "" && e.Type != branch.TypeDir && c.lowerFd >= 0 {
			var lst unix.Stat_t
			if err := unix.Fstatat(c.lowerFd, lowerRel(e.Origin), &lst, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				prob.Kind = OriginGone
				prob.Detail = fmt.Sprintf("the lower file /%s it was copied from is gone: its other lower names no longer join it", e.Origin)
				if e.Metacopy {
					prob.Detail = fmt.Sprintf("the lower file /%s that holds its data (a metacopy) is gone: reading it fails", e.Origin)
				}
				c.r.Problems = append(c.r.Problems, prob)
			}
		}
		return nil
	})
	return entries, err
}

// object stats an object once per run.
func (c *checker) object(id string) (objectState, error) {
	if s, ok := c.objs[id]; ok {
		return s, nil
	}
	st, err := c.o.Objects.Lstat(id)
	var s objectState
	switch {
	case err == nil:
		s = objectState{exists: true, mode: st.Mode & unix.S_IFMT}
	case errors.Is(err, unix.ENOENT) || errors.Is(err, backstore.ErrBadID):
	default:
		return s, fmt.Errorf("object %s: %w", id, err)
	}
	c.objs[id] = s
	return s, nil
}

// lowerPathOf returns the lower path whose file would show at p in a
// branch with entries byPath, when p's own entry is e (nil: none), and
// false when no lower file can show there (an opaque or non-directory
// ancestor, a whiteout).
func (c *checker) lowerPathOf(p string, e *branch.Entry, byPath map[string]*branch.Entry) (string, bool) {
	lower := ""
	if root := byPath[""]; root != nil && root.Opaque {
		return "", false
	}
	names := pathNames(p)
	for i, name := range names {
		q := strings.Join(names[:i+1], "/")
		lower = joinPath(lower, name)
		ae := byPath[q]
		if i == len(names)-1 {
			ae = e
		}
		switch {
		case ae == nil:
		case ae.Type != branch.TypeDir:
			if i < len(names)-1 {
				return "", false
			}
		case ae.Opaque:
			return "", false
		default:
			if lp, has := redirectOf(ae); has {
				lower = lp
			}
		}
	}
	return lower, true
}

// newDirObject makes an empty directory object with the attributes of
// lower directory lp (when has and it exists), else mode 0755. It says
// which it did.
func (c *checker) newDirObject(lp string, has bool) (id, how string, err error) {
	if has && c.lowerFd >= 0 {
		fd, err := unix.Openat(c.lowerFd, lowerRel(lp), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			f := os.NewFile(uintptr(fd), lp)
			defer f.Close()
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return "", "", err
			}
			if id, err = c.o.Objects.Mkdir(st.Mode&07777, int(st.Uid), int(st.Gid)); err != nil {
				return "", "", err
			}
			if err := c.o.Objects.CopyAttrs(id, &st, f); err != nil {
				// An object not removed is garbage, which gc removes;
				// the caller gets err.
				_ = c.o.Objects.Remove(id)
				return "", "", err
			}
			return id, fmt.Sprintf("attributes of the lower directory /%s", lp), nil
		}
	}
	id, err = c.o.Objects.Mkdir(0755, 0, 0)
	return id, "mode 0755, as no lower directory shows there", err
}
