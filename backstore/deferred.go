package backstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// # Objects made at their first use
//
// A deferred object is a pending regular file (pending.go) whose inode
// is not made yet: the store keeps its attributes (size, mode, owner,
// atime, mtime) in memory and in the journal, and makes the inode the
// first time something needs it. A mount started from a remote
// snapshot names thousands of files that are never opened; making an
// inode for each at the start costs far more than the rest of the
// start (ten thousand inodes take about a second on ext4), so Defer
// only gives out ids and journals them, in one synced write.
//
// What needs an inode makes it: Loc (the overlay's fd-relative calls:
// chmod, chown, utimens, xattrs), Open, OpenRead, OpenStream, Fetched,
// Clone, CopyAttrs, ReplaceAttrs, Dedupe, SyncData. What does not,
// answers from the record, with no system call: Lstat (a sparse file of
// the size, no blocks; its ctime is the time of Defer, or of the Open
// that read the journal, or of the last TouchDeferred: a hard link),
// Deferred (so that a caller can answer an xattr read with none: a
// deferred object has no xattrs), Objects (which lists deferred ids
// too), Remove and Recycle (which drop the record).
//
// Making is atomic: the inode is made unnamed (O_TMPFILE) in its
// shard, given its owner, size, mode and times, and only then linked
// under its id (linkat, which fails when the name exists). So after a
// crash an object's name is absent or whole: a deferred id whose name
// exists was made, and nothing half made is ever seen. Making journals
// nothing: the record stays in the journal until the object is filled
// or removed ("ID -"), and the name, once there, wins over it: Open
// drops the records of the ids that have names (one listing of the
// shards), and a making drops its record once the name is there, so
// that a record in memory stands for an object with no name. Two makings of one object at
// once make two inodes, and the second link fails EEXIST: the first
// stands. Where O_TMPFILE is not supported the inode is made under the
// name ID.new in the shard (not an object id: Objects skips it) and
// linked from there; a crash may leave that name, which the next making
// of the object removes first.
//
// The journal's line of a deferred object (pending.go):
//
//	ID KEY SIZE MODE UID GID ATIME MTIME
//
// (MODE in octal, the times in ns). The object is pending on KEY as
// well; its later lines ("ID KEY OFFSET ATIME MTIME", "ID -") are those
// of any pending object, and a checkpoint says it was made.
//
// New ids (create, makeIdle) skip deferred ids, which O_EXCL cannot
// see: a deferred id has no name yet.

// A Deferred describes a regular file object to be made at its first
// use (Defer).
type Deferred struct {
	Key  string // the key of its bytes (pending on it, as MarkPending)
	Size int64
	Mode uint32 // permission bits (07777)
	// Uid and Gid are its owner when running as root; otherwise the
	// object is the daemon's.
	Uid, Gid     uint32
	Atime, Mtime int64 // ns
}

// deferredObj is a deferred object's record.
type deferredObj struct {
	Deferred
	ctime int64 // ns: shown by Lstat
}

// appendLine appends the journal line of d for id to b.
func (d *deferredObj) appendLine(b []byte, id string) []byte {
	b = append(append(append(append(b, id...), ' '), d.Key...), ' ')
	b = append(strconv.AppendInt(b, d.Size, 10), ' ')
	b = append(strconv.AppendUint(b, uint64(d.Mode), 8), ' ')
	b = append(strconv.AppendUint(b, uint64(d.Uid), 10), ' ')
	b = append(strconv.AppendUint(b, uint64(d.Gid), 10), ' ')
	b = append(strconv.AppendInt(b, d.Atime, 10), ' ')
	return append(strconv.AppendInt(b, d.Mtime, 10), '\n')
}

// parseDeferred parses the fields of a journal line of a deferred
// object (ok false for a line a crash cut short).
func parseDeferred(fields []string, ctime int64) (string, *deferredObj, bool) {
	if len(fields) != 8 || shardOf(fields[0]) < 0 {
		return "", nil, false
	}
	var n [6]int64
	for i, f := range fields[2:] {
		base := 10
		if i == 1 {
			base = 8
		}
		v, err := strconv.ParseInt(f, base, 64)
		if err != nil {
			return "", nil, false
		}
		n[i] = v
	}
	if n[0] < 0 || n[1] < 0 || n[1] > 07777 || n[2] < 0 || n[3] < 0 || n[2] > 1<<32-1 || n[3] > 1<<32-1 {
		return "", nil, false
	}
	d := &deferredObj{Deferred: Deferred{Key: fields[1], Size: n[0], Mode: uint32(n[1]),
		Uid: uint32(n[2]), Gid: uint32(n[3]), Atime: n[4], Mtime: n[5]}, ctime: ctime}
	return fields[0], d, true
}

// Defer gives out an id for each of files, objects to be made at their
// first use (see above), pending on their keys, and journals them
// (synced) before it returns. Running as non-root, the objects are the
// daemon's, whatever Uid and Gid say.
func (s *Store) Defer(files []Deferred) ([]string, error) {
	now := time.Now().UnixNano()
	recs := make([]*deferredObj, len(files))
	for i, f := range files {
		if f.Key == "" || f.Key == "-" || strings.ContainsAny(f.Key, " \n") || f.Size < 0 {
			return nil, fmt.Errorf("deferred object (key %q, size %d): %w", f.Key, f.Size, ErrBadID)
		}
		f.Mode &= 07777
		if !s.root {
			f.Uid, f.Gid = uint32(unix.Geteuid()), uint32(unix.Getegid())
		}
		recs[i] = &deferredObj{Deferred: f, ctime: now}
	}
	ids := make([]string, len(files))
	// The ids are drawn all at once, and reserved under one hold of
	// pendMu; one that is taken (by a name or a record: with 64 random
	// bits, never in practice) is drawn again alone.
	random := make([]byte, len(files)*idLen/2)
	rand.Read(random) // never fails (crypto/rand documents it)
	for i := range ids {
		if id := hex.EncodeToString(random[i*idLen/2 : (i+1)*idLen/2]); !s.named(id) {
			ids[i] = id
		}
	}
	b := make([]byte, 0, len(files)*(idLen+64+64))
	s.pendMu.Lock()
	if len(s.deferred) == 0 {
		s.deferred = make(map[string]*deferredObj, len(files))
	}
	if len(recs) > 0 {
		s.anyDeferred.Store(true) // before the first is reserved
	}
	for i, d := range recs {
		for {
			id := ids[i]
			if _, taken := s.deferred[id]; id != "" && !taken {
				s.deferred[id] = d // reserved: create and makeIdle skip it
				break
			}
			s.pendMu.Unlock()
			for id = newID(); s.named(id); id = newID() {
			}
			ids[i] = id
			s.pendMu.Lock()
		}
		b = d.appendLine(b, ids[i])
	}
	s.pendMu.Unlock()
	if err := s.journal(string(b)); err != nil {
		s.pendMu.Lock()
		for _, id := range ids {
			s.dropDeferredLocked(id)
		}
		s.pendMu.Unlock()
		return nil, err
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if len(s.pending) == 0 {
		s.pending = make(map[string]string, len(ids))
	}
	for i, id := range ids {
		s.pending[id] = recs[i].Key
		delete(s.resume, id)
	}
	s.anyPending.Store(len(s.pending) > 0)
	return ids, nil
}

// named reports whether id has a name in a shard (that of another
// object, or an idle one), which O_EXCL would have seen: Defer does not
// give it out. A shard not made yet holds none.
func (s *Store) named(id string) bool {
	for _, p := range []*part{s.main, s.spill} {
		if p == nil {
			continue
		}
		if fd := p.shards[shardOf(id)].Load(); fd >= 0 {
			var st unix.Stat_t
			if unix.Fstatat(int(fd), id, &st, unix.AT_SYMLINK_NOFOLLOW) != unix.ENOENT {
				return true
			}
		}
	}
	return false
}

// Deferred reports whether object id is deferred: not made yet, so
// with no xattrs (its attributes are Lstat's).
func (s *Store) Deferred(id string) bool {
	if !s.anyDeferred.Load() {
		return false
	}
	s.pendMu.Lock()
	_, ok := s.deferred[id]
	s.pendMu.Unlock()
	return ok
}

// TouchDeferred sets the ctime Lstat shows of object id to now, if it
// is deferred (ok false when it is not), and makes nothing: what a new
// hard link to it or a rename changes of its inode, kept in memory as
// the rest of its ctime is.
func (s *Store) TouchDeferred(id string) bool {
	if !s.anyDeferred.Load() {
		return false
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	d, ok := s.deferred[id]
	if ok {
		d.ctime = time.Now().UnixNano()
	}
	return ok
}

// DeferredCount returns how many objects are deferred.
func (s *Store) DeferredCount() int {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return len(s.deferred)
}

// record returns the record of id if it is deferred.
func (s *Store) record(id string) (deferredObj, bool) {
	if !s.anyDeferred.Load() {
		return deferredObj{}, false
	}
	s.pendMu.Lock()
	d, ok := s.deferred[id]
	s.pendMu.Unlock()
	if !ok {
		return deferredObj{}, false
	}
	return *d, true
}

// deferredStat is the Lstat of a deferred object not made yet: a
// sparse regular file as making it would leave it.
func (s *Store) deferredStat(d *deferredObj) unix.Stat_t {
	return unix.Stat_t{
		Dev:     s.dev,
		Nlink:   1,
		Mode:    unix.S_IFREG | d.Mode,
		Uid:     d.Uid,
		Gid:     d.Gid,
		Size:    d.Size,
		Blksize: s.blksize,
		Atim:    unix.NsecToTimespec(d.Atime),
		Mtim:    unix.NsecToTimespec(d.Mtime),
		Ctim:    unix.NsecToTimespec(d.ctime),
	}
}

// made makes object id if it is deferred (see above); nothing for any
// other object.
func (s *Store) made(id string) error {
	d, ok := s.record(id)
	if !ok {
		return nil
	}
	p := s.partFor(d.Size)
	dirfd, err := p.shard(shardOf(id))
	if err != nil {
		return fmt.Errorf("object %s: %w", id, err)
	}
	if err := s.makeDeferredAt(id, &d, dirfd, false); err != nil {
		return fmt.Errorf("object %s: making it: %w", id, err)
	}
	if p == s.spill {
		s.mu.Lock()
		s.spilled[id] = struct{}{}
		s.mu.Unlock()
	}
	s.pendMu.Lock()
	s.dropDeferredLocked(id)
	s.pendMu.Unlock()
	return nil
}

// makeDeferredAt makes the inode of d and links it as id in dirfd
// (done when the name exists: made already). named: under ID.new, as
// where O_TMPFILE is not supported.
func (s *Store) makeDeferredAt(id string, d *deferredObj, dirfd int, named bool) error {
	tmp := ""
	fd, err := -1, error(unix.EOPNOTSUPP)
	if !named {
		fd, err = unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0600)
	}
	if err != nil {
		// No O_TMPFILE here: made under a name no object has.
		tmp = id + ".new"
		if err := unix.Unlinkat(dirfd, tmp, 0); err != nil && err != unix.ENOENT {
			return err
		}
		if fd, err = unix.Openat(dirfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0600); err != nil {
			return err
		}
		defer func() { _ = unix.Unlinkat(dirfd, tmp, 0) }()
	}
	defer unix.Close(fd)
	if s.root {
		if err := unmappedOwner(unix.Fchown(fd, int(d.Uid), int(d.Gid))); err != nil {
			return err
		}
	}
	if err := unix.Ftruncate(fd, d.Size); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, d.Mode); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(d.Atime), unix.NsecToTimespec(d.Mtime)}
	if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	if tmp != "" {
		err = unix.Linkat(dirfd, tmp, dirfd, id, 0)
	} else {
		err = unix.Linkat(fd, "", dirfd, id, unix.AT_EMPTY_PATH)
		if err == unix.ENOENT || err == unix.EPERM {
			// AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH.
			err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, id, unix.AT_SYMLINK_FOLLOW)
		}
	}
	if err == unix.EEXIST {
		return nil // made by another meanwhile, or before a crash
	}
	return err
}

// dropDeferredLocked forgets the record of id (made, or removed: the
// caller journals that). pendMu is held.
func (s *Store) dropDeferredLocked(id string) {
	delete(s.deferred, id)
}

// deferredIDs returns the ids of the deferred objects.
func (s *Store) deferredIDs() map[string]struct{} {
	if !s.anyDeferred.Load() {
		return nil
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	out := make(map[string]struct{}, len(s.deferred))
	for id := range s.deferred {
		out[id] = struct{}{}
	}
	return out
}

// Drop removes the objects ids as Remove does, with one journal write
// for all of them.
func (s *Store) Drop(ids []string) error {
	s.jmu.Lock() // as forgetPending (pending.go)
	defer s.jmu.Unlock()
	var b strings.Builder
	for _, id := range ids {
		if err := s.removeName(id); err != nil {
			return err
		}
		if s.forgetLocal(id) {
			b.WriteString(id + " -\n")
		}
	}
	// At worst the journal keeps them: see forgetPending.
	_ = s.journal(b.String())
	return nil
}
