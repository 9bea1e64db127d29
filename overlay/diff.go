package overlay

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Diff
//
// Diff compares two views of the same lower directory: any of a
// branch, a snapshot, or the lower tree itself (LowerView). Since the
// lower tree is shared, a path can only differ where one of the views
// has an entry (at the path or above it), or where a hard-linked lower
// file has another upper copy in one view than in the other. Diff
// therefore starts from the entries that differ (branch.Diff of the
// views' sources) and compares the merged trees there, never walking
// what both views take unchanged from the lower tree:
//
//   - at each such path it compares the two files;
//   - below a directory whose contents come from the same lower
//     directory in both views (or from none), it compares only the
//     paths whose entries differ;
//   - a directory created, deleted, or merged with another lower
//     directory (opaque, renamed) is walked whole, and every path
//     below it reported.
//
// # What counts as a change
//
// A directory is reported when it is created or deleted, or its own
// mode, owner or xattrs changed, never for what changed inside it (nor
// for its times). A file is "modified" when its data differ: the same
// object, or the same lower file, is equal without reading anything;
// otherwise the sizes, then the bytes, are compared, so a file written
// and written back is not reported. Symlinks compare targets, device
// nodes their device numbers. "mode-changed" means mode, owner or
// xattrs (security.selinux left out) differ and the data do not;
// times alone are no change. A change of file type is "type-changed";
// when a directory takes the place of a file, or the reverse, the
// paths below the directory are reported as created or deleted.
//
// Changes come in path order: parents before children, siblings in
// byte order of their names, a directory's whole subtree before its
// next sibling (as branch.Source.Load orders entries). The control
// file's name (the internal directory) is never reported.
//
// Diff reads the views while they may change: a live branch that
// changes during a Diff gives a mix of before and after, as a
// recursive diff of a directory being written would.

// ChangeKind classifies a Change.
type ChangeKind string

const (
	Created     ChangeKind = "created"
	Deleted     ChangeKind = "deleted"
	Modified    ChangeKind = "modified"     // the data differ
	ModeChanged ChangeKind = "mode-changed" // mode, owner or xattrs differ; the data do not
	TypeChanged ChangeKind = "type-changed"
)

// FileInfo is one side of a Change: the file as a view shows it.
type FileInfo struct {
	Type   string `json:"type"` // file, dir, symlink, fifo, socket, char, block
	Mode   uint32 `json:"mode"` // permission bits with setuid, setgid and sticky (07777)
	Uid    uint32 `json:"uid"`
	Gid    uint32 `json:"gid"`
	Size   int64  `json:"size"` // 0 for directories
	Rdev   uint64 `json:"rdev,omitempty"`
	Target string `json:"target,omitempty"` // symlinks
	Ino    uint64 `json:"ino"`              // st_ino in its view: hard links share it
}

// Change is one path that differs between two views.
type Change struct {
	Path string     `json:"path"` // relative to the root, "" for the root
	Kind ChangeKind `json:"kind"`
	Old  *FileInfo  `json:"old,omitempty"` // nil when created
	New  *FileInfo  `json:"new,omitempty"` // nil when deleted
	// SizeDelta is New.Size - Old.Size (a missing side counts 0).
	SizeDelta int64 `json:"size_delta"`
	// AttrsChanged: a modified file's mode, owner or xattrs changed too.
	AttrsChanged bool `json:"attrs_changed,omitempty"`
	// Hidden: the path is a hidden project path (b's hide rules match
	// it) that b shows a file of its own at; apply writes it only when
	// forced, and never over a hidden project file.
	Hidden bool `json:"hidden,omitempty"`
}

func (c Change) String() string {
	return fmt.Sprintf("%s %s (%+d bytes)", c.Kind, c.Path, c.SizeDelta)
}

// Diff calls fn with every change from view a to view b, in path order
// (see "Diff" above). a and b must show the same lower directory.
// An error from fn stops Diff and is returned as is.
func Diff(a, b *FS, fn func(Change) error) error {
	if err := sameLower(a, b); err != nil {
		return err
	}
	roots, err := diffRoots(a, b)
	if err != nil {
		return err
	}
	if rules := b.cfg.Hide; !rules.Empty() {
		emit := fn
		fn = func(c Change) error {
			c.Hidden = c.New != nil && rules.Hidden(c.Path, c.New.Type == "dir")
			return emit(c)
		}
	}
	d := &differ{a: a, b: b, fn: fn, ca: a.newCursor(), cb: b.newCursor()}
	defer d.ca.close()
	defer d.cb.close()
	covered, walked := "", false
	for _, p := range roots {
		if walked && isBelow(p, covered) {
			continue // already compared whole
		}
		w, err := d.root(p)
		if err != nil {
			return err
		}
		if w {
			covered, walked = p, true
		}
	}
	return nil
}

// sameLower checks that two views show the same lower directory.
func sameLower(a, b *FS) error {
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a.lowerFd, &sa); err != nil {
		return fmt.Errorf("lower directory %s: %w", a.cfg.Lower, err)
	}
	if err := unix.Fstat(b.lowerFd, &sb); err != nil {
		return fmt.Errorf("lower directory %s: %w", b.cfg.Lower, err)
	}
	if sa.Dev != sb.Dev || sa.Ino != sb.Ino {
		return fmt.Errorf("diff: the views show different lower directories (%s and %s)", a.cfg.Lower, b.cfg.Lower)
	}
	return nil
}

// diffRoots returns, in path order, the paths where a and b may
// differ: those whose entries differ, and the names of hard-linked
// lower files whose upper copy differs (see linkedRoots).
func diffRoots(a, b *FS) ([]string, error) {
	var roots []string
	origins := map[uint64]string{} // lower st_ino → a lower name of it
	err := branch.Diff(a.Source(), b.Source(), func(p string, ea, eb *branch.Entry) error {
		for _, e := range []*branch.Entry{ea, eb} {
			// As indexPut fills FS.hardlinks.
			if e != nil && e.Type != branch.TypeDir && e.Object != "" && e.Origin != "" {
				origins[e.Ino] = e.Origin
			}
		}
		if !isBelow(p, internalDir) {
			roots = append(roots, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("diff: comparing entries: %w", err)
	}
	if len(origins) == 0 {
		return roots, nil
	}
	linked, err := linkedRoots(a, b, origins)
	if err != nil {
		return nil, err
	}
	roots = append(roots, linked...)
	slices.SortFunc(roots, comparePaths)
	return slices.Compact(roots), nil
}

// comparePaths orders paths as branch keys sort: byte by byte, with
// '/' below every other byte, so a directory's subtree follows it.
func comparePaths(a, b string) int {
	for i := range min(len(a), len(b)) {
		if ca, cb := a[i], b[i]; ca != cb {
			switch {
			case ca == '/':
				return -1
			case cb == '/':
				return 1
			}
			return cmp.Compare(ca, cb)
		}
	}
	return cmp.Compare(len(a), len(b))
}

// differ is one run of Diff.
type differ struct {
	a, b   *FS
	fn     func(Change) error
	ca, cb *pathCursor // where the roots are looked up
	ba, bb []byte      // read buffers
}

// root compares the views at p, a path where their entries differ. It
// reports whether it compared everything below p.
func (d *differ) root(p string) (walked bool, err error) {
	na, sa, err := d.ca.lookup(p)
	if err != nil {
		return false, fmt.Errorf("diff: %s: %w", p, err)
	}
	defer d.a.release(na)
	nb, sb, err := d.cb.lookup(p)
	if err != nil {
		return false, fmt.Errorf("diff: %s: %w", p, err)
	}
	defer d.b.release(nb)
	return d.compare(p, na, &sa, nb, &sb, false)
}

// compare reports the change at p (na or nb nil where a view has
// nothing), then compares below it when the two directories' contents
// may differ, or always when whole. It reports whether it compared
// everything below p.
func (d *differ) compare(p string, na *Node, sa *unix.Stat_t, nb *Node, sb *unix.Stat_t, whole bool) (bool, error) {
	if err := d.report(p, na, sa, nb, sb); err != nil {
		return false, err
	}
	aDir, bDir := na != nil && na.IsDir(), nb != nil && nb.IsDir()
	if !aDir && !bDir || !whole && aDir && bDir && sameContents(na, nb) {
		return false, nil
	}
	var an, bn []string
	var err error
	if aDir {
		if an, err = d.a.childNames(na); err != nil {
			return false, fmt.Errorf("diff: %s: %w", p, err)
		}
	}
	if bDir {
		if bn, err = d.b.childNames(nb); err != nil {
			return false, fmt.Errorf("diff: %s: %w", p, err)
		}
	}
	for _, name := range mergeNames(an, bn) {
		if err := d.child(joinPath(p, name), na, nb, name, aDir, bDir); err != nil {
			return false, err
		}
	}
	return true, nil
}

// child compares name in directories na and nb (each only when a
// directory) and everything below it.
func (d *differ) child(p string, na, nb *Node, name string, aDir, bDir bool) error {
	var ca, cb *Node
	var sa, sb unix.Stat_t
	var err error
	if aDir {
		if ca, sa, err = d.a.lookupChild(na, name); err != nil {
			return fmt.Errorf("diff: %s: %w", p, err)
		}
		defer d.a.release(ca)
	}
	if bDir {
		if cb, sb, err = d.b.lookupChild(nb, name); err != nil {
			return fmt.Errorf("diff: %s: %w", p, err)
		}
		defer d.b.release(cb)
	}
	_, err = d.compare(p, ca, &sa, cb, &sb, true)
	return err
}

// sameContents reports whether two directory nodes (of different
// views) merge the same lower directory, or none: then only their
// upper entries can make their contents differ.
func sameContents(na, nb *Node) bool {
	na.view.mu.RLock()
	la, ha := na.lower, na.hasLower
	na.view.mu.RUnlock()
	nb.view.mu.RLock()
	lb, hb := nb.lower, nb.hasLower
	nb.view.mu.RUnlock()
	return ha == hb && (!ha || la == lb)
}

// mergeNames merges two sorted lists of names without repeats.
func mergeNames(a, b []string) []string {
	out := make([]string, 0, max(len(a), len(b)))
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return out
}

// report calls d.fn with the change at p, if there is one.
func (d *differ) report(p string, na *Node, sa *unix.Stat_t, nb *Node, sb *unix.Stat_t) error {
	if na == nil && nb == nil {
		return nil
	}
	c := Change{Path: p}
	var err error
	if na != nil {
		if c.Old, err = fileInfo(na, sa); err != nil {
			return fmt.Errorf("diff: %s: %w", p, err)
		}
	}
	if nb != nil {
		if c.New, err = fileInfo(nb, sb); err != nil {
			return fmt.Errorf("diff: %s: %w", p, err)
		}
	}
	switch {
	case na == nil:
		c.Kind = Created
	case nb == nil:
		c.Kind = Deleted
	case na.mode != nb.mode:
		c.Kind = TypeChanged
	default:
		sameData, err := d.sameData(na, sa, nb, sb, c.Old, c.New)
		if err != nil {
			return fmt.Errorf("diff: %s: %w", p, err)
		}
		sameAttrs, err := sameAttrs(na, sa, nb, sb)
		if err != nil {
			return fmt.Errorf("diff: %s: %w", p, err)
		}
		switch {
		case !sameData:
			c.Kind, c.AttrsChanged = Modified, !sameAttrs
		case !sameAttrs:
			c.Kind = ModeChanged
		default:
			return nil
		}
	}
	if c.New != nil {
		c.SizeDelta += c.New.Size
	}
	if c.Old != nil {
		c.SizeDelta -= c.Old.Size
	}
	return d.fn(c)
}

// fileInfo describes node n, whose attributes are st.
func fileInfo(n *Node, st *unix.Stat_t) (*FileInfo, error) {
	fi := &FileInfo{
		Type: modeType(n.mode).String(),
		Mode: st.Mode & 07777,
		Uid:  st.Uid,
		Gid:  st.Gid,
		Size: st.Size,
		Ino:  st.Ino,
	}
	switch n.mode {
	case unix.S_IFDIR:
		fi.Size = 0
	case unix.S_IFCHR, unix.S_IFBLK:
		fi.Rdev = st.Rdev
	case unix.S_IFLNK:
		t, err := n.view.Readlink(n)
		if err != nil {
			return nil, err
		}
		fi.Target = t
	}
	return fi, nil
}

// sameData compares the data of two nodes of one type.
func (d *differ) sameData(na *Node, sa *unix.Stat_t, nb *Node, sb *unix.Stat_t, ia, ib *FileInfo) (bool, error) {
	switch na.mode {
	case unix.S_IFLNK:
		return ia.Target == ib.Target, nil
	case unix.S_IFCHR, unix.S_IFBLK:
		return ia.Rdev == ib.Rdev, nil
	case unix.S_IFREG:
	default:
		return true, nil
	}
	ao, al := d.a.dataOf(na)
	bo, bl := d.b.dataOf(nb)
	switch {
	case ao != "" || bo != "":
		if ao == bo && d.a.objs == d.b.objs {
			return true, nil
		}
	case al == bl || d.sameLowerInode(al, bl):
		return true, nil
	}
	if sa.Size != sb.Size {
		return false, nil
	}
	return d.sameBytes(na, nb)
}

// sameLowerInode reports whether lower paths la (in a) and lb (in b)
// are one inode.
func (d *differ) sameLowerInode(la, lb string) bool {
	var sa, sb unix.Stat_t
	return unix.Fstatat(d.a.lowerFd, lowerRel(la), &sa, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		unix.Fstatat(d.b.lowerFd, lowerRel(lb), &sb, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// sameBytes compares the data of two regular files of equal size.
func (d *differ) sameBytes(na, nb *Node) (bool, error) {
	fa, err := d.a.openData(na)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := d.b.openData(nb)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	if d.ba == nil {
		d.ba, d.bb = make([]byte, 256<<10), make([]byte, 256<<10)
	}
	for off := int64(0); ; {
		ka, erra := io.ReadFull(io.NewSectionReader(fa, off, int64(len(d.ba))), d.ba)
		kb, errb := io.ReadFull(io.NewSectionReader(fb, off, int64(len(d.bb))), d.bb)
		if ka != kb || !bytes.Equal(d.ba[:ka], d.bb[:kb]) {
			return false, nil
		}
		if erra != nil || errb != nil {
			if erra == io.EOF || erra == io.ErrUnexpectedEOF {
				erra = nil
			}
			if errb == io.EOF || errb == io.ErrUnexpectedEOF {
				errb = nil
			}
			return erra == nil && errb == nil, cmp.Or(erra, errb)
		}
		off += int64(ka)
	}
}

// sameAttrs compares the mode, owner and xattrs of two nodes.
func sameAttrs(na *Node, sa *unix.Stat_t, nb *Node, sb *unix.Stat_t) (bool, error) {
	ao, al := na.view.attrsOf(na)
	bo, bl := nb.view.attrsOf(nb)
	if ao != "" && ao == bo && na.view.objs == nb.view.objs || ao == "" && bo == "" && al == bl {
		return true, nil
	}
	if sa.Mode != sb.Mode || sa.Uid != sb.Uid || sa.Gid != sb.Gid {
		return false, nil
	}
	xa, err := na.view.xattrs(na)
	if err != nil {
		return false, err
	}
	xb, err := nb.view.xattrs(nb)
	if err != nil {
		return false, err
	}
	return maps.Equal(xa, xb), nil
}
