package contenthash

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Hashes for other readers
//
// A push to a remote names objects by the SHA-256 of their bytes: it
// asks here first (KnownObject, KnownProjectFile), and reads only what
// no record answers; what it reads and hashes it hands back (Learn), so
// that the next push, or the worker, reads it no more.

// KnownObject returns the recorded SHA-256 of object id's contents,
// when there is one and the object still has the size and mtime it
// was hashed with (an object a snapshot names never changes; an id is
// used again for new contents only once the object was removed).
func (h *Hasher) KnownObject(id string) (Digest, bool, error) {
	oh, ok, err := h.objectHash(id)
	if err != nil || !ok {
		return Digest{}, false, err
	}
	st, err := h.cfg.Objects.Lstat(id)
	if err != nil {
		if isMissing(err) {
			return Digest{}, false, nil
		}
		return Digest{}, false, err
	}
	if st.Size != oh.Size || st.Mtim.Nano() != oh.Mtime {
		return Digest{}, false, nil
	}
	return oh.Sum, true, nil
}

// KnownProjectFile returns the recorded SHA-256 of the project file
// whose lstat is st (the store's record, else the user's cache), when
// the file still has the size, mtime and ctime it was hashed with.
func (h *Hasher) KnownProjectFile(st *unix.Stat_t) (Digest, bool, error) {
	lh, ok, err := h.cfg.Meta.LowerHashOf(st.Dev, st.Ino)
	if err != nil {
		return Digest{}, false, err
	}
	if ok && lh.Size == st.Size && lh.Mtime == st.Mtim.Nano() && lh.Ctime == st.Ctim.Nano() {
		return lh.Sum, true, nil
	}
	if c := h.cfg.LowerCache; c != nil {
		lh, ok, err := c.get(st.Dev, st.Ino)
		if err != nil {
			h.log.Warn("the cache of project file hashes", "err", err)
		}
		if ok && lh.Size == st.Size && lh.Mtime == st.Mtim.Nano() && lh.Ctime == st.Ctim.Nano() {
			return lh.Sum, true, nil
		}
	}
	return Digest{}, false, nil
}

// Learned is what a reader hashed: objects by id, and project files,
// each with the lstat it had before it was read and the fstat after
// (of the descriptor read).
type Learned struct {
	Objects map[string]LearnedFile
	Project []LearnedFile
}

// LearnedFile is one file a reader hashed.
type LearnedFile struct {
	Sum           Digest
	Before, After unix.Stat_t
	Start         time.Time // when the reading started
}

// Learn records what a reader hashed, where it is true of the file as
// it stays: an object whose size and mtime did not change while it
// was read (as the worker records them); a project file unchanged
// while read and changed long enough before (racyWindow). Nothing is
// recorded in a read-only store.
func (h *Hasher) Learn(l Learned) error {
	hs := branch.Hashes{Objects: map[string]branch.ObjectHash{}}
	for id, f := range l.Objects {
		if f.Before.Size == f.After.Size && f.Before.Mtim == f.After.Mtim {
			hs.Objects[id] = branch.ObjectHash{Sum: f.Sum, Size: f.After.Size, Mtime: f.After.Mtim.Nano()}
		}
	}
	for _, f := range l.Project {
		if sameFile(&f.Before, &f.After) && settled(&f.Before, f.Start) {
			hs.Lower = append(hs.Lower, branch.LowerHash{Dev: f.Before.Dev, Ino: f.Before.Ino, Size: f.Before.Size,
				Mtime: f.Before.Mtim.Nano(), Ctime: f.Before.Ctim.Nano(), Sum: f.Sum})
		}
	}
	if len(hs.Objects) == 0 && len(hs.Lower) == 0 {
		return nil
	}
	return h.record(hs)
}

// sameFile reports whether two stats are of one file in one state.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}
