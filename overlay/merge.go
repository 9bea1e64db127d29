package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// # Merge
//
// PlanMerge compares three views of one lower directory: base (the
// state both sides started from), ours (the branch the merge changes)
// and theirs (the branch merged in). It reads base→theirs and base→ours
// with Diff, and decides path by path:
//
//   - a path only theirs changed is taken from theirs (created,
//     replaced, deleted, its mode or owner set);
//   - a path only ours changed stays as it is;
//   - a path both changed to the same result needs nothing;
//   - a text file both changed is merged line by line by diff3(1) of
//     GNU diffutils (diff3 -m, as Patch runs diff -u): the changes of
//     each side are taken, and where both changed the same lines the
//     file gets conflict markers (<<<<<<< ours, ||||||| base, =======,
//     >>>>>>> theirs) and a "content" conflict;
//   - everything else both changed is a conflict, and ours stays:
//     a binary file, symlink or device both changed ("binary"), a type
//     changed on one side against any change on the other ("type"), a
//     deletion against a change, also of a path inside a deleted
//     directory ("delete"), renames that collide ("rename": one file
//     renamed to two names, two files renamed to one name, a file
//     renamed on one side and changed on the other), and modes,
//     owners or xattrs changed differently ("mode").
//
// A rename is a deletion and a creation of the same inode number in one
// side (Diff reports it so; st_ino survives a rename). Times alone are
// no change (as for Diff); a file taken from theirs gets theirs' times,
// xattrs and mode.
//
// A conflict at or below a path of MergeOptions.Ours keeps ours there
// (no markers); of MergeOptions.Theirs, takes theirs. Such a conflict
// is still listed, with Resolved set.
//
// Applying a plan (ApplyMerge) writes through the view's own
// operations, so a plan's changes are ordinary changes of the branch:
// snapshots, diff and apply see them as if a program had made them. The
// plan holds the merged texts in files of its own (MergePlan.Close
// removes them), not in memory; the files taken from theirs are read
// from the theirs view when applied.

// ConflictKind classifies a MergeConflict.
type ConflictKind string

const (
	ConflictContent ConflictKind = "content" // both changed the same lines of a text file: markers written
	ConflictBinary  ConflictKind = "binary"  // both changed a file that is not text (or a symlink, a device) differently
	ConflictType    ConflictKind = "type"    // a type changed on one side, the path changed on the other
	ConflictDelete  ConflictKind = "delete"  // deleted on one side, changed on the other
	ConflictRename  ConflictKind = "rename"  // renames that collide
	ConflictMode    ConflictKind = "mode"    // mode, owner or xattrs changed differently on both sides
)

// MergeConflict is one path both sides changed in ways the merge cannot
// combine.
type MergeConflict struct {
	Path   string       `json:"path"`
	Kind   ConflictKind `json:"kind"`
	Detail string       `json:"detail"`
	// Markers: the file holds conflict markers after the merge.
	Markers bool `json:"markers,omitempty"`
	// Resolved is "ours" or "theirs" when --ours or --theirs chose the
	// side; "" when the conflict remains.
	Resolved string `json:"resolved,omitempty"`
}

// MergeAction is what a merge does to one path of ours.
type MergeAction string

const (
	MergeTake     MergeAction = "take"     // theirs' version written (created or replaced)
	MergeDelete   MergeAction = "delete"   // removed, as theirs removed it
	MergeAttrs    MergeAction = "attrs"    // theirs' mode, owner and xattrs set
	MergeLines    MergeAction = "merge"    // both sides' changes combined line by line
	MergeMarkers  MergeAction = "conflict" // written with conflict markers
	mergeKeepOurs MergeAction = ""         // nothing done (internal)
)

// MergeChange is one path a merge changes in ours.
type MergeChange struct {
	Path   string      `json:"path"`
	Action MergeAction `json:"action"`
}

// MergeOptions tune PlanMerge.
type MergeOptions struct {
	// Ours and Theirs are paths ("" or "." is the whole tree) whose
	// conflicts, at or below them, are resolved for that side.
	Ours, Theirs []string
	// OursLabel, BaseLabel and TheirsLabel name the sides in conflict
	// markers (default: ours, base, theirs).
	OursLabel, BaseLabel, TheirsLabel string
}

// MergePlan is what PlanMerge decided: the changes to make to ours, in
// path order, and the conflicts.
type MergePlan struct {
	Changes   []MergeChange
	Conflicts []MergeConflict
	// Step, when set, is called by ApplyMerge before each change it
	// makes (done of total made so far): a test's hook.
	Step   func(done, total int)
	ops    []mergeOp
	theirs *FS
	// stamps: every path the plan changes or removes (a directory it
	// removes or replaces with everything in it), as ours had it when
	// planned; ApplyMerge checks them first (see ErrMergeStale).
	stamps map[string]mergeStamp
	// dir holds the merged texts, one file each (a plan of many large
	// files holds none of them in memory); Close removes it.
	dir   string
	files int
	// deep: the paths of stamps whose whole subtree is stamped.
	deep map[string]bool
}

// tempFile returns the name of a new file in p.dir, made on first use.
func (p *MergePlan) tempFile() (string, error) {
	if p.dir == "" {
		dir, err := os.MkdirTemp("", "agentfs-merge-")
		if err != nil {
			return "", err
		}
		p.dir = dir
	}
	p.files++
	return filepath.Join(p.dir, fmt.Sprintf("merged-%d", p.files)), nil
}

// Close removes the merged texts the plan holds: after ApplyMerge, or
// when the plan is not applied.
func (p *MergePlan) Close() error {
	if p == nil || p.dir == "" {
		return nil
	}
	return os.RemoveAll(p.dir)
}

// ErrMergeStale is ApplyMerge's error when a path the plan changes is
// no longer as the plan saw it in ours (a program wrote the branch
// after the plan was made): nothing was changed, and the merge is to
// be planned again.
var ErrMergeStale = errors.New("the branch changed while the merge was planned")

// mergeStamp is what a path of ours was when a merge was planned:
// enough to tell that it was changed since (any write changes the
// ctime), not what it holds.
type mergeStamp struct {
	exists     bool
	mode       uint32 // with the type
	ino        uint64
	size       int64
	uid, gid   uint32
	mtim, ctim unix.Timespec
}

func stampOf(n *Node, st *unix.Stat_t) mergeStamp {
	if n == nil {
		return mergeStamp{}
	}
	return mergeStamp{exists: true, mode: st.Mode, ino: st.Ino, size: st.Size, uid: st.Uid, gid: st.Gid, mtim: st.Mtim, ctim: st.Ctim}
}

// Unresolved counts the conflicts that remain.
func (p *MergePlan) Unresolved() int {
	n := 0
	for _, c := range p.Conflicts {
		if c.Resolved == "" {
			n++
		}
	}
	return n
}

// mergeOp is one change of the plan.
type mergeOp struct {
	path   string
	action MergeAction
	data   string   // MergeLines, MergeMarkers: the file holding the new data (in MergePlan.dir)
	attrs  *attrSet // MergeAttrs: the mode, owner and xattrs to set
}

// attrSet is what a merge calls a path's attributes: mode, owner and
// xattrs (x nil: the view has none to tell, and they are left alone).
type attrSet struct {
	info *FileInfo
	x    map[string]string
}

func (a attrSet) same(b attrSet) bool {
	return sameInfoAttrs(a.info, b.info) && maps.Equal(a.x, b.x)
}

// attrsAt returns p's attributes in v, fi being its FileInfo there.
func attrsAt(v *FS, p string, fi *FileInfo) (attrSet, error) {
	n, _, err := v.lookupPath(p)
	if err != nil || n == nil {
		return attrSet{info: fi}, err
	}
	defer v.release(n)
	x, err := v.xattrs(n)
	return attrSet{info: fi, x: x}, err
}

// attrSets returns p's attributes in base, ours and theirs, which all
// have it (o and t are the sides' changes of p).
func (m *merger) attrSets(p string, o, t *Change) (b, ours, theirs attrSet, err error) {
	if b, err = attrsAt(m.base, p, o.Old); err != nil {
		return
	}
	if ours, err = attrsAt(m.ours.view, p, o.New); err != nil {
		return
	}
	theirs, err = attrsAt(m.theirs.view, p, t.New)
	return
}

// maxMergeText is the largest file merged line by line; a larger one
// both sides changed is a conflict.
const maxMergeText = 64 << 20

// side is one side's changes from base: by path, and its renames.
type side struct {
	view    *FS
	changes map[string]*Change
	order   []string          // the changed paths in Diff's order (a subtree after its directory)
	renames map[string]string // source → destination
	renamed map[string]string // destination → source
}

func loadSide(base, v *FS) (*side, error) {
	s := &side{view: v, changes: map[string]*Change{}, renames: map[string]string{}, renamed: map[string]string{}}
	gone := map[uint64]string{}
	var made []*Change
	err := Diff(base, v, func(c Change) error {
		s.changes[c.Path] = &c
		s.order = append(s.order, c.Path)
		switch {
		case c.Kind == Deleted && c.Old.Type != "dir":
			gone[c.Old.Ino] = c.Path
		case c.Kind == Created && c.New.Type != "dir":
			made = append(made, &c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(s.order, comparePaths) // as Diff gives them; made sure of, for the binary searches
	for _, c := range made {
		if src, ok := gone[c.New.Ino]; ok {
			s.renames[src], s.renamed[c.Path] = c.Path, src
		}
	}
	return s, nil
}

// PlanMerge decides how to merge theirs into ours, both changed from
// base (see "Merge" above). It reads the three views and changes none.
func PlanMerge(base, ours, theirs *FS, o MergeOptions) (*MergePlan, error) {
	if err := sameLower(base, ours); err != nil {
		return nil, err
	}
	if err := sameLower(base, theirs); err != nil {
		return nil, err
	}
	if o.OursLabel == "" {
		o.OursLabel = "ours"
	}
	if o.BaseLabel == "" {
		o.BaseLabel = "base"
	}
	if o.TheirsLabel == "" {
		o.TheirsLabel = "theirs"
	}
	so, err := loadSide(base, ours)
	if err != nil {
		return nil, fmt.Errorf("merge: comparing ours with the base: %w", err)
	}
	st, err := loadSide(base, theirs)
	if err != nil {
		return nil, fmt.Errorf("merge: comparing theirs with the base: %w", err)
	}
	m := &merger{base: base, o: o, ours: so, theirs: st, plan: &MergePlan{theirs: theirs}, decided: map[string]bool{}}
	paths := make([]string, 0, len(st.changes))
	for p := range st.changes {
		paths = append(paths, p)
	}
	// Paths only ours changed need nothing.
	slices.SortFunc(paths, comparePaths)
	for _, p := range paths {
		if err := errors.Join(m.path(p), m.err); err != nil {
			return nil, err
		}
	}
	m.keepConflictingRenameSources()
	if err := m.stamp(); err != nil {
		return nil, fmt.Errorf("merge: reading ours: %w", err)
	}
	return m.plan, nil
}

// stamp records, for every path the plan changes, what ours has there
// (see MergePlan.stamps); below a directory a delete or take may
// remove, every path (walked down from it, not looked up from the root
// each).
func (m *merger) stamp() error {
	m.plan.stamps, m.plan.deep = map[string]mergeStamp{}, map[string]bool{}
	v := m.ours.view
	for _, op := range m.plan.ops {
		deep := op.action == MergeDelete || op.action == MergeTake
		if _, ok := m.plan.stamps[op.path]; ok && (!deep || m.plan.deep[op.path]) {
			continue
		}
		n, st, err := v.lookupPath(op.path)
		if err != nil {
			return err
		}
		m.plan.stamps[op.path] = stampOf(n, &st)
		if deep && n != nil {
			m.plan.deep[op.path] = true
			err = walkStamps(v, n, op.path, func(q string, c *Node, st *unix.Stat_t) error {
				m.plan.stamps[q] = stampOf(c, st)
				return nil
			})
		}
		v.release(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// walkStamps calls fn for every path below n (path p) in v, parents
// first; fn must not keep the node.
func walkStamps(v *FS, n *Node, p string, fn func(q string, c *Node, st *unix.Stat_t) error) error {
	if n.mode != unix.S_IFDIR {
		return nil
	}
	names, err := v.childNames(n)
	if err != nil {
		return err
	}
	for _, name := range names {
		q := joinPath(p, name)
		c, st, err := v.lookupChild(n, name)
		if err == nil && c != nil {
			if err = fn(q, c, &st); err == nil {
				err = walkStamps(v, c, q, fn)
			}
			v.release(c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// keepConflictingRenameSources drops the deletion of the source of a
// rename of theirs whose destination is a conflict that keeps ours: the
// file stays where ours has it, and nothing of it is lost.
func (m *merger) keepConflictingRenameSources() {
	keep := map[string]bool{}
	for _, c := range m.plan.Conflicts {
		if src, ok := m.theirs.renamed[c.Path]; ok && c.Resolved != "theirs" {
			keep[src] = true
		}
	}
	if len(keep) == 0 {
		return
	}
	ops := m.plan.ops[:0]
	for _, op := range m.plan.ops {
		if op.action != MergeDelete || !keep[op.path] {
			ops = append(ops, op)
		}
	}
	m.plan.ops = ops
	changes := m.plan.Changes[:0]
	for _, c := range m.plan.Changes {
		if c.Action != MergeDelete || !keep[c.Path] {
			changes = append(changes, c)
		}
	}
	m.plan.Changes = changes
}

type merger struct {
	base         *FS
	o            MergeOptions
	ours, theirs *side
	plan         *MergePlan
	// decided: paths below which nothing more is done (a conflict on a
	// directory, or its removal).
	decided map[string]bool
	err     error // of reading a view where no error can be returned
}

// decide marks p as a path below which nothing more is done.
func (m *merger) decide(p string) { m.decided[p] = true }

// decidedAbove reports whether a directory above p was decided.
func (m *merger) decidedAbove(p string) bool {
	for d := parentPath(p); d != ""; d = parentPath(d) {
		if m.decided[d] {
			return true
		}
	}
	return false
}

// under reports whether p is at or below a path of ps ("" and "." are
// the whole tree).
func under(p string, ps []string) bool {
	for _, q := range ps {
		q = strings.Trim(q, "/")
		if q == "" || q == "." || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

func (m *merger) op(op mergeOp) {
	m.plan.ops = append(m.plan.ops, op)
	if op.action != mergeKeepOurs {
		m.plan.Changes = append(m.plan.Changes, MergeChange{Path: op.path, Action: op.action})
	}
}

// conflict records a conflict at p. Unless a side is chosen for p, ours
// stays (with markers: the merged data holds them); with --theirs,
// theirs is taken.
func (m *merger) conflict(p string, kind ConflictKind, markers string, format string, a ...any) {
	c := MergeConflict{Path: p, Kind: kind, Detail: fmt.Sprintf(format, a...)}
	switch {
	case under(p, m.o.Theirs):
		c.Resolved = "theirs"
		m.take(p)
	case under(p, m.o.Ours):
		c.Resolved = "ours"
	case markers != "":
		c.Markers = true
		m.op(mergeOp{path: p, action: MergeMarkers, data: markers})
	}
	m.plan.Conflicts = append(m.plan.Conflicts, c)
	if c.Resolved != "theirs" {
		m.decide(p)
	}
}

// take makes p in ours what it is in theirs.
func (m *merger) take(p string) {
	c := m.theirs.changes[p]
	switch {
	case c == nil:
		// A path theirs did not change: theirs has it as the base had
		// it.
		m.op(mergeOp{path: p, action: MergeTake})
	case c.Kind == Deleted:
		m.op(mergeOp{path: p, action: MergeDelete})
		m.decide(p)
	case c.Kind == ModeChanged:
		a, err := attrsAt(m.theirs.view, p, c.New)
		if err != nil {
			m.err = errors.Join(m.err, err)
			return
		}
		m.op(mergeOp{path: p, action: MergeAttrs, attrs: &a})
	default:
		m.op(mergeOp{path: p, action: MergeTake})
	}
}

func (m *merger) path(p string) error {
	if p == "" {
		return nil // the root's own mode: ours stays
	}
	if m.decidedAbove(p) {
		return nil
	}
	t, o := m.theirs.changes[p], m.ours.changes[p]
	// A rename of theirs whose source ours changed, or renamed
	// elsewhere.
	if src, ok := m.theirs.renamed[p]; ok {
		if dst, ok := m.ours.renames[src]; ok && dst != p {
			m.conflict(p, ConflictRename, "", "%s was renamed to %s in %s and to %s in %s", src, dst, m.o.OursLabel, p, m.o.TheirsLabel)
			return nil
		}
		if oc := m.ours.changes[src]; oc != nil && oc.Kind != Deleted {
			m.conflict(p, ConflictRename, "", "%s renamed %s to %s; %s changed %s", m.o.TheirsLabel, src, p, m.o.OursLabel, src)
			return nil
		}
	}
	if _, ok := m.theirs.renames[p]; ok && o != nil && o.Kind != Deleted {
		// Reported at the destination; ours keeps its source.
		m.decide(p)
		return nil
	}
	if o == nil {
		// Only theirs changed p. Ours may have removed a directory
		// above it, or changed paths below a directory theirs removes.
		if a := m.oursRemovedAbove(p); a != "" {
			m.conflict(p, ConflictDelete, "", "%s deleted %s; %s changed %s", m.o.OursLabel, a, m.o.TheirsLabel, p)
			return nil
		}
		if (t.Kind == Deleted || t.Kind == TypeChanged) && t.Old.Type == "dir" {
			if q := m.oursChangedBelow(p); q != "" {
				m.conflict(p, ConflictDelete, "", "%s deleted the directory %s; %s changed %s inside it", m.o.TheirsLabel, p, m.o.OursLabel, q)
				return nil
			}
		}
		m.take(p)
		return nil
	}
	return m.both(p, o, t)
}

// oursRemovedAbove returns the nearest directory above p that ours
// deleted or made another type; "" when none.
func (m *merger) oursRemovedAbove(p string) string {
	for d := parentPath(p); d != ""; d = parentPath(d) {
		if c := m.ours.changes[d]; c != nil && (c.Kind == Deleted || c.Kind == TypeChanged) {
			return d
		}
	}
	return ""
}

// oursChangedBelow returns a path below directory p that ours changed
// other than by deleting it; "" when none. The paths below p follow p
// in Diff's order.
func (m *merger) oursChangedBelow(p string) string {
	order := m.ours.order
	i, _ := slices.BinarySearchFunc(order, p, comparePaths)
	for ; i < len(order); i++ {
		q := order[i]
		if q == p {
			continue
		}
		if !strings.HasPrefix(q, p+"/") {
			break
		}
		if m.ours.changes[q].Kind != Deleted {
			return q
		}
	}
	return ""
}

func parentPath(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// both decides path p, which both sides changed.
func (m *merger) both(p string, o, t *Change) error {
	ol, tl := m.o.OursLabel, m.o.TheirsLabel
	switch {
	case o.Kind == Deleted && t.Kind == Deleted:
		return nil
	case o.Kind == Deleted:
		if dst, ok := m.ours.renames[p]; ok {
			m.conflict(p, ConflictRename, "", "%s renamed %s to %s; %s changed %s", ol, p, dst, tl, p)
			return nil
		}
		m.conflict(p, ConflictDelete, "", "%s deleted %s; %s changed it", ol, p, tl)
		return nil
	case t.Kind == Deleted:
		m.conflict(p, ConflictDelete, "", "%s deleted %s; %s changed it", tl, p, ol)
		return nil
	}
	on, tn := o.New, t.New
	if on.Type != tn.Type {
		m.conflict(p, ConflictType, "", "%s is a %s in %s and a %s in %s", p, on.Type, ol, tn.Type, tl)
		return nil
	}
	if m.theirs.renamed[p] != "" || m.ours.renamed[p] != "" {
		if same, err := m.sameFile(p); err != nil || same {
			if err == nil {
				return m.attrs(p, o, t)
			}
			return err
		}
		m.conflict(p, ConflictRename, "", "%s and %s both put a different file at %s (a rename, or a new file)", ol, tl, p)
		return nil
	}
	switch tn.Type {
	case "dir":
		return m.attrs(p, o, t)
	case "file":
	default:
		if same, err := m.sameFile(p); err != nil || same {
			if err == nil {
				return m.attrs(p, o, t)
			}
			return err
		}
		m.conflict(p, ConflictBinary, "", "the %s %s differs in %s and %s", tn.Type, p, ol, tl)
		return nil
	}
	if o.Kind == ModeChanged || t.Kind == ModeChanged {
		// The data changed on one side at most: take it, and merge the
		// attributes.
		if t.Kind != ModeChanged {
			ba, oa, ta, err := m.attrSets(p, o, t)
			if err != nil {
				return err
			}
			switch {
			case ba.same(oa) || oa.same(ta):
				m.op(mergeOp{path: p, action: MergeTake})
			case ba.same(ta):
				m.op(mergeOp{path: p, action: MergeTake})
				m.op(mergeOp{path: p, action: MergeAttrs, attrs: &oa})
			case under(p, m.o.Theirs):
				m.modeConflict(p, o, t) // takes theirs, data and attributes
			default:
				// The data is theirs; the attributes are a conflict that
				// keeps ours.
				m.op(mergeOp{path: p, action: MergeTake})
				m.op(mergeOp{path: p, action: MergeAttrs, attrs: &oa})
				m.modeConflict(p, o, t)
			}
			return nil
		}
		return m.attrs(p, o, t)
	}
	return m.text(p, o, t)
}

func sameInfoAttrs(a, b *FileInfo) bool {
	return a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid
}

// attrs merges the mode, owner and xattrs of p, whose data needs
// nothing more.
func (m *merger) attrs(p string, o, t *Change) error {
	if o.Old == nil || t.Old == nil {
		return nil
	}
	ba, oa, ta, err := m.attrSets(p, o, t)
	switch {
	case err != nil:
		return err
	case oa.same(ta):
	case ba.same(oa):
		m.op(mergeOp{path: p, action: MergeAttrs, attrs: &ta})
	case ba.same(ta):
	default:
		m.modeConflict(p, o, t)
	}
	return nil
}

func (m *merger) modeConflict(p string, o, t *Change) {
	m.conflict(p, ConflictMode, "", "mode, owner or xattrs of %s: %04o %d:%d in %s, %04o %d:%d in %s", p,
		o.New.Mode, o.New.Uid, o.New.Gid, m.o.OursLabel, t.New.Mode, t.New.Uid, t.New.Gid, m.o.TheirsLabel)
}

// text merges regular file p, whose data both sides changed.
func (m *merger) text(p string, o, t *Change) error {
	var data [3][]byte // base, ours, theirs
	for i, v := range []*FS{m.base, m.ours.view, m.theirs.view} {
		b, ok, err := readText(v, p)
		if err != nil {
			return fmt.Errorf("merge: %s: %w", p, err)
		}
		if !ok {
			if same, err := m.sameFile(p); err != nil || same {
				if err == nil {
					return m.attrs(p, o, t)
				}
				return err
			}
			m.conflict(p, ConflictBinary, "", "%s is not text (or larger than %d MiB), and %s and %s changed it differently", p, maxMergeText>>20, m.o.OursLabel, m.o.TheirsLabel)
			return nil
		}
		data[i] = b
	}
	if bytes.Equal(data[1], data[2]) {
		return m.attrs(p, o, t)
	}
	merged, err := m.plan.tempFile()
	if err != nil {
		return fmt.Errorf("merge: %s: %w", p, err)
	}
	clean, err := diff3(data[1], data[0], data[2], m.o.OursLabel, m.o.BaseLabel, m.o.TheirsLabel, merged)
	if err != nil {
		return fmt.Errorf("merge: %s: %w", p, err)
	}
	if !clean {
		m.conflict(p, ConflictContent, merged, "%s and %s changed the same lines of %s", m.o.OursLabel, m.o.TheirsLabel, p)
		return nil
	}
	m.op(mergeOp{path: p, action: MergeLines, data: merged})
	return m.attrs(p, o, t)
}

// readText reads regular file p of v whole; ok is false when it is not
// text or too large to merge. A path v does not have reads as empty
// (a file both sides created merges against nothing).
func readText(v *FS, p string) (data []byte, ok bool, err error) {
	n, st, err := v.lookupPath(p)
	if err != nil || n == nil {
		return nil, err == nil, err
	}
	defer v.release(n)
	if n.mode != unix.S_IFREG {
		return nil, true, nil
	}
	if st.Size > maxMergeText {
		return nil, false, nil
	}
	f, err := v.openData(n)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if text, err := isText(f); err != nil || !text {
		return nil, false, err
	}
	data, err = io.ReadAll(io.NewSectionReader(f, 0, maxMergeText+1))
	return data, err == nil, err
}

// sameFile reports whether p is the same in ours and theirs: type, data
// (or target, device), not counting mode, owner and times.
func (m *merger) sameFile(p string) (bool, error) {
	a, b := m.ours.view, m.theirs.view
	na, sa, err := a.lookupPath(p)
	if err != nil {
		return false, err
	}
	defer a.release(na)
	nb, sb, err := b.lookupPath(p)
	if err != nil {
		return false, err
	}
	defer b.release(nb)
	if na == nil || nb == nil {
		return na == nb, nil
	}
	ia, err := fileInfo(na, &sa)
	if err != nil {
		return false, err
	}
	ib, err := fileInfo(nb, &sb)
	if err != nil {
		return false, err
	}
	if ia.Type != ib.Type || ia.Target != ib.Target || ia.Rdev != ib.Rdev {
		return false, nil
	}
	if ia.Type != "file" {
		return true, nil
	}
	d := &differ{a: a, b: b}
	return d.sameData(na, &sa, nb, &sb, ia, ib)
}
