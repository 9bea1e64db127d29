package overlay

import (
	"errors"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Quotas
//
// A view may be given Limits (Config.Limits): how many objects its
// branch may name (Files) and how many bytes of file data those objects
// may hold (Bytes). The usage is what the branch's entries name, as
// the in-memory index holds them:
//
//   - files: the distinct objects the entries name (a directory, a
//     symlink, a special file, a regular file with all its hard links,
//     a metacopy object: one each; a whiteout: none; the root: none);
//   - bytes: the sum of st_size of the distinct regular files whose
//     data is upper (a metacopy object holds none; a sparse file counts
//     its apparent size, as truncate(1) makes it).
//
// The index is the one place that changes: indexPut and indexDel count
// an object in when the first entry names it and out when the last one
// goes (quotaIn, quotaOut), so every namespace operation, a restore and
// a reload keep the usage right without a rule of their own. A file
// unlinked while open, an O_TMPFILE file and a node a Reload cut loose
// are named by no entry: they are not charged, but their growth is
// still refused past the limit.
//
// Bytes are counted only with a byte limit (quota.charged holds the
// size counted for each data object): the view then sees every change
// of a file's size, because the fs package serves the files of such a
// view through the daemon (no passthrough). Files are always counted.
//
// The operation that would cross a limit fails with EDQUOT before it
// changes anything (but a delete, which is never refused: the
// directories an unlink or rmdir copies up to hold its whiteout may
// take the usage past the file limit): a create, mkdir, symlink, mknod, link of an
// O_TMPFILE file, or a copy-up (of the file and of the directories above
// it) past the file limit; a copy-up with data, a truncate or fallocate
// that extends a file, past the byte limit. A write or copy_file_range
// that extends a file past the byte limit is short, up to the limit, as
// on a file system with quotas; the next one fails with EDQUOT.
//
// The usage is recomputed whenever the index is (re)loaded: at New (a
// mount), at Reload (a restore), and after a failed commit; with a byte
// limit that stats every regular data object of the branch once.
//
// # Locking
//
// files changes only under FS.mu held exclusively (in the index);
// bytes, reserved and charged under quota.mu, taken after FS.mu and
// Node.growMu (FS.mu → Node.growMu → quota.mu). An operation that may
// extend a file holds the node's growMu from the size it reads to the
// size it charges (every change of a file's size takes it), and
// charges what it reserved only if the object is still counted in
// then (an unlink or a reload may have counted it out meanwhile). A copy-up reserves its bytes (reserved)
// before it copies, without FS.mu, and gives the reservation back
// under FS.mu held exclusively, when its entry counts the object in.

// Limits bound the objects and bytes a branch's view may hold in the
// backstore; 0 is no limit.
type Limits struct {
	Files int64
	Bytes int64
}

// Usage is what a branch's view holds in the backstore (see Quotas).
type Usage struct {
	Files int64
	Bytes int64
	// BytesCounted says whether Bytes is the running count kept with a
	// byte limit (else it was summed by Usage when asked).
	BytesCounted bool
}

// QuotaError is the EDQUOT of an operation that would cross a limit;
// Limit is "files" or "bytes".
type QuotaError struct {
	Limit string
}

func (e *QuotaError) Error() string { return "the " + e.Limit + " limit of the branch is reached" }

// Unwrap makes errors.Is(err, unix.EDQUOT) true, and the fs package's
// errno conversion report EDQUOT.
func (e *QuotaError) Unwrap() error { return unix.EDQUOT }

var (
	errFilesQuota = &QuotaError{Limit: "files"}
	errBytesQuota = &QuotaError{Limit: "bytes"}
)

type quota struct {
	limits Limits
	files  atomic.Int64

	mu       sync.Mutex
	bytes    int64
	reserved int64
	charged  map[string]int64
	// loading: the index is being (re)loaded; quotaIn leaves the sizes
	// of the data objects to sizeLoadedLocked, which stats them side by
	// side. Changed under FS.mu held exclusively.
	loading bool

	// hit says an EDQUOT was reported since the usage last went down
	// (QuotaReport).
	hit atomic.Bool
}

// Limits returns the view's limits.
func (v *FS) Limits() Limits { return v.quota.limits }

// BytesLimited reports whether the view has a byte limit: then every
// change of a file's size must go through the view (no passthrough for
// writes).
func (v *FS) BytesLimited() bool { return v.quota.limits.Bytes > 0 }

// Usage returns what the view's branch holds. Without a byte limit the
// bytes are summed from the objects' sizes now (one lstat per regular
// data object), off the requests' path.
func (v *FS) Usage() Usage {
	u := Usage{Files: v.quota.files.Load()}
	if v.BytesLimited() {
		v.quota.mu.Lock()
		u.Bytes, u.BytesCounted = v.quota.bytes, true
		v.quota.mu.Unlock()
		return u
	}
	// The objects are listed under the lock and stat'ed after it, so
	// that namespace changes wait for the listing only.
	v.rlockAside()
	seen := map[string]bool{}
	for _, m := range v.dirs {
		for _, e := range m {
			if e.Type == branch.TypeFile && !e.Metacopy && e.Object != "" {
				seen[e.Object] = true
			}
		}
	}
	v.mu.RUnlock()
	for id := range seen {
		if st, err := v.objs.Lstat(id); err == nil {
			u.Bytes += st.Size
		}
	}
	return u
}

// QuotaReport reports whether err is an EDQUOT that should be logged:
// the first since the usage last went down, so that a program that
// keeps hitting the limit is logged once. limit names it.
func (v *FS) QuotaReport(err error) (limit string, report bool) {
	var qe *QuotaError
	if !errors.As(err, &qe) || v.quota.hit.Swap(true) {
		return "", false
	}
	return qe.Limit, true
}

// resetQuotaLocked starts the count again, before the index is loaded.
// v.mu is held exclusively.
func (v *FS) resetQuotaLocked() {
	v.quota.files.Store(0)
	v.quota.loading = true
	if v.BytesLimited() {
		v.quota.mu.Lock()
		v.quota.bytes = 0
		v.quota.charged = map[string]int64{}
		v.quota.mu.Unlock()
	}
	v.quota.hit.Store(false)
}

// quotaIn counts in object e.Object, which the first entry (e) now
// names. v.mu is held exclusively.
func (v *FS) quotaIn(e *branch.Entry) {
	v.quota.files.Add(1)
	if !v.BytesLimited() || e.Type != branch.TypeFile || e.Metacopy {
		return
	}
	if v.quota.loading {
		v.quota.mu.Lock()
		v.quota.charged[e.Object] = 0 // sized by sizeLoadedLocked
		v.quota.mu.Unlock()
		return
	}
	var size int64
	if st, err := v.objs.Lstat(e.Object); err == nil {
		size = st.Size
	}
	v.quota.mu.Lock()
	v.quota.charged[e.Object] = size
	v.quota.bytes += size
	v.quota.mu.Unlock()
}

// loadWorkers is how many lstat calls sizeLoadedLocked makes at once:
// on a cold cache each may wait for the disk.
const loadWorkers = 8

// sizeLoadedLocked stats the data objects the index loaded and counts
// their sizes in. v.mu is held exclusively.
func (v *FS) sizeLoadedLocked() {
	q := &v.quota
	q.loading = false
	if !v.BytesLimited() || len(q.charged) == 0 {
		return
	}
	ids := make(chan string, loadWorkers)
	sizes := make(chan map[string]int64, loadWorkers)
	for range loadWorkers {
		go func() {
			m := map[string]int64{}
			for id := range ids {
				if st, err := v.objs.Lstat(id); err == nil {
					m[id] = st.Size
				}
			}
			sizes <- m
		}()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for id := range q.charged {
		ids <- id
	}
	close(ids)
	for range loadWorkers {
		for id, size := range <-sizes {
			q.charged[id] = size
			q.bytes += size
		}
	}
}

// quotaOut counts out object e.Object, which no entry names any more.
// v.mu is held exclusively.
func (v *FS) quotaOut(e *branch.Entry) {
	v.quota.files.Add(-1)
	if !v.BytesLimited() {
		return
	}
	v.quota.mu.Lock()
	if size, ok := v.quota.charged[e.Object]; ok {
		v.quota.bytes -= size
		delete(v.quota.charged, e.Object)
	}
	v.quota.mu.Unlock()
}

// quotaMark is the usage before an operation, which rearmQuota compares
// with the usage after it.
type quotaMark struct{ files, bytes int64 }

func (v *FS) quotaMark() quotaMark {
	m := quotaMark{files: v.quota.files.Load()}
	if v.BytesLimited() {
		v.quota.mu.Lock()
		m.bytes = v.quota.bytes
		v.quota.mu.Unlock()
	}
	return m
}

// rearmQuota has the next EDQUOT reported (QuotaReport) when an
// operation that began at mark left the usage lower: a delete, not a
// rename or a thaw, which take an object out and put one in.
func (v *FS) rearmQuota(mark quotaMark) {
	if now := v.quotaMark(); now.files < mark.files || now.bytes < mark.bytes {
		v.quota.hit.Store(false)
	}
}

// needFilesLocked fails with EDQUOT when one more object would cross
// the file limit. v.mu is held exclusively.
func (v *FS) needFilesLocked() error {
	if l := v.quota.limits.Files; l > 0 && v.quota.files.Load()+1 > l {
		return errFilesQuota
	}
	return nil
}

// needBytesLocked fails with EDQUOT when counting in the data of
// object obj, which no entry names yet, would cross the byte limit.
// v.mu is held exclusively.
func (v *FS) needBytesLocked(obj string) error {
	if !v.BytesLimited() {
		return nil
	}
	st, err := v.objs.Lstat(obj)
	if err != nil {
		return err
	}
	q := &v.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes+q.reserved+st.Size > q.limits.Bytes {
		return errBytesQuota
	}
	return nil
}

// reserveBytes reserves size bytes for a copy-up in flight, or fails
// with EDQUOT. The caller gives them back (unreserveBytes) once the
// copy is counted in, or failed.
func (v *FS) reserveBytes(size int64) error {
	if !v.BytesLimited() || size <= 0 {
		return nil
	}
	q := &v.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes+q.reserved+size > q.limits.Bytes {
		return errBytesQuota
	}
	q.reserved += size
	return nil
}

func (v *FS) unreserveBytes(size int64) {
	if !v.BytesLimited() || size <= 0 {
		return
	}
	v.quota.mu.Lock()
	v.quota.reserved -= size
	v.quota.mu.Unlock()
}

// growFd runs op, which changes the size of n's data through fd (a
// descriptor of n's object), with the byte limit kept: endOf gives the
// size op asks for, from the size now (nil when op cannot extend the
// file); partial says op may extend it less (a write), in which case op
// is given the end it may reach (maxEnd), else it fails with EDQUOT
// unless all of it fits. op returns the file's size after it when it
// knows it (-1: stat it). Without a byte limit op just runs (maxEnd -1:
// no bound).
func (v *FS) growFd(n *Node, fd int, endOf func(size int64) int64, partial bool, op func(maxEnd int64) (int64, error)) error {
	if !v.BytesLimited() {
		_, err := op(-1)
		return err
	}
	v.mu.RLock()
	obj := n.object
	v.mu.RUnlock()
	return v.growObject(n, obj, fd, endOf, partial, op)
}

// growFdLocked is growFd with v.mu held (shared is enough).
func (v *FS) growFdLocked(n *Node, fd int, endOf func(size int64) int64, partial bool, op func(maxEnd int64) (int64, error)) error {
	if !v.BytesLimited() {
		_, err := op(-1)
		return err
	}
	return v.growObject(n, n.object, fd, endOf, partial, op)
}

// growObject is growFd on n's object obj. It holds n.growMu, not v.mu,
// while op runs (a write may wait for the kernel's writeback): an
// unlink or a reload may count obj out meanwhile, and then what op
// changed is not counted.
func (v *FS) growObject(n *Node, obj string, fd int, endOf func(size int64) int64, partial bool, op func(maxEnd int64) (int64, error)) error {
	n.growMu.Lock()
	defer n.growMu.Unlock()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	size := st.Size
	q := &v.quota
	q.mu.Lock()
	_, charged := q.charged[obj]
	var got int64
	maxEnd, end := int64(-1), int64(0)
	if endOf != nil {
		end = endOf(size)
	}
	if want := end - size; want > 0 {
		avail := max(q.limits.Bytes-q.bytes-q.reserved, 0)
		got = min(want, avail)
		if got < want {
			if !partial || got == 0 {
				q.mu.Unlock()
				return errBytesQuota
			}
			maxEnd = size + got
		}
		if charged {
			q.bytes += got
			q.charged[obj] += got
		} else {
			q.reserved += got // growth of a file no entry names: bounded, not kept
		}
	}
	q.mu.Unlock()
	after, err := op(maxEnd)
	if after < 0 {
		if serr := unix.Fstat(fd, &st); serr == nil {
			after = st.Size
		} else {
			after = size + got
		}
	}
	// Settle: what the file grew or shrank by, against what was taken.
	delta := after - size
	q.mu.Lock()
	if charged {
		if _, still := q.charged[obj]; still {
			q.bytes += delta - got
			q.charged[obj] += delta - got
		}
	} else {
		q.reserved -= got
	}
	q.mu.Unlock()
	if delta < 0 {
		q.hit.Store(false)
	}
	return err
}
