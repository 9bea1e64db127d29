package workspace

import (
	"math"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

// # Trees for records
//
// ReadTrees gives read-only access to what refs name, path by path, as
// a record of a session (package record) reads its before- and
// after-states: the attributes of a path, its contents, a symlink's
// target. The views are the ones Diff and Export read, held open under
// opMu for the call.

// RefTree is a read-only tree of a ref. Paths are relative to the
// project root, '/'-separated ("" is the root). Errors wrap ENOENT when
// there is no such file.
type RefTree struct {
	v   *overlay.FS
	ref string
}

// Ref is what the tree was opened for, as ReadTrees was given it (a
// snapshot id, a tag, a branch, "lower"): a hash of its files can be
// looked up by it.
func (t *RefTree) Ref() string { return t.ref }

// Lstat returns the attributes of the file at p (a final symlink not
// followed).
func (t *RefTree) Lstat(p string) (unix.Stat_t, error) { return t.v.StatPath(p) }

// ReadFile returns the contents of the regular file at p.
func (t *RefTree) ReadFile(p string) ([]byte, error) { return t.v.ReadFile(p, math.MaxInt) }

// Readlink returns the target of the symlink at p.
func (t *RefTree) Readlink(p string) (string, error) { return t.v.ReadlinkPath(p) }

// ReadTrees opens what each ref names ("lower", a branch, a snapshot
// id or tag, as Diff names them) and calls fn with their trees, in the
// same order. The trees are valid during fn only.
func (w *Workspace) ReadTrees(refs []string, fn func(trees []*RefTree) error) error {
	_, err := locked(w, func() (struct{}, error) {
		trees := make([]*RefTree, 0, len(refs))
		for _, ref := range refs {
			v, err := w.openRefLocked(ref)
			if err != nil {
				return struct{}{}, err
			}
			defer v.close()
			trees = append(trees, &RefTree{v: v.fs, ref: ref})
		}
		return struct{}{}, fn(trees)
	})
	return err
}
