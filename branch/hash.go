package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// # Content hashes
//
// The store keeps the SHA-256 of file contents, and each snapshot's
// Merkle root, under keys of their own (see "Key layout"). This package
// only stores them: computing them, and what a root commits to, is
// package contenthash's. None of these keys is ever needed to read a
// store: an agentfs that does not know them ignores them, which is why
// they need no feature/ key.
//
//	hash/o/<object id>        ObjectHash of a regular file's object
//	hash/c/<sha256><object>   empty: the objects by contents (an index)
//	hash/l/<dev><ino>         LowerHash of a project file (two uint64)
//	hash/s/<snapshot id>      SnapshotRoot of a snapshot
//
// An object named by a snapshot never changes (the branch clones it
// before changing it), so its hash, once computed, stays true; a
// project file's hash is true while its size, mtime and ctime are
// those recorded. A snapshot's root record carries the snapshot's Ts,
// so that a record left by an agentfs that deleted the snapshot
// without knowing these keys is never taken for a new snapshot that
// drew the same id. DeleteSnapshot deletes the root in its commit.

// Digest is a SHA-256.
type Digest [32]byte

// ObjectHash is the content hash of an object's data, and the size
// and mtime the object had when it was read.
type ObjectHash struct {
	Sum   Digest
	Size  int64
	Mtime int64 // Unix ns
}

// LowerHash is the content hash of a project file, valid while the
// file at (Dev, Ino) has this Size, Mtime and Ctime.
type LowerHash struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64 // Unix ns
	Sum          Digest
}

// SnapshotRoot is a snapshot's Merkle root and what it counts.
type SnapshotRoot struct {
	Ts       uint64 // the snapshot's Ts (see above)
	Root     Digest
	Files    int64 // paths in the tree (the root directory excluded)
	Bytes    int64 // bytes of the regular files' contents
	Computed time.Time
}

const hashEncoding = 1

var (
	hashObjPfx   = []byte("hash/o/")
	hashIndexPfx = []byte("hash/c/")
	hashLowerPfx = []byte("hash/l/")
	hashRootPfx  = []byte("hash/s/")
)

func hashObjKey(id string) []byte { return append(append([]byte{}, hashObjPfx...), id...) }
func hashIndexKey(sum Digest, id string) []byte {
	return append(append(append([]byte{}, hashIndexPfx...), sum[:]...), id...)
}
func hashLowerKey(dev, ino uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append([]byte{}, hashLowerPfx...), dev), ino)
}
func hashRootKey(id string) []byte { return append(append([]byte{}, hashRootPfx...), id...) }

func (h ObjectHash) encode() []byte {
	b := append([]byte{hashEncoding}, h.Sum[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Size))
	return binary.BigEndian.AppendUint64(b, uint64(h.Mtime))
}

func decodeObjectHash(b []byte) (ObjectHash, error) {
	if len(b) != 1+32+16 || b[0] != hashEncoding {
		return ObjectHash{}, fmt.Errorf("corrupt object hash record (% x)", b)
	}
	var h ObjectHash
	copy(h.Sum[:], b[1:33])
	h.Size = int64(binary.BigEndian.Uint64(b[33:]))
	h.Mtime = int64(binary.BigEndian.Uint64(b[41:]))
	return h, nil
}

func (h LowerHash) encode() []byte {
	b := []byte{hashEncoding}
	for _, v := range []int64{h.Size, h.Mtime, h.Ctime} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return append(b, h.Sum[:]...)
}

func decodeLowerHash(dev, ino uint64, b []byte) (LowerHash, error) {
	if len(b) != 1+24+32 || b[0] != hashEncoding {
		return LowerHash{}, fmt.Errorf("corrupt project file hash record (% x)", b)
	}
	h := LowerHash{Dev: dev, Ino: ino}
	h.Size = int64(binary.BigEndian.Uint64(b[1:]))
	h.Mtime = int64(binary.BigEndian.Uint64(b[9:]))
	h.Ctime = int64(binary.BigEndian.Uint64(b[17:]))
	copy(h.Sum[:], b[25:])
	return h, nil
}

func (r SnapshotRoot) encode() []byte {
	b := binary.BigEndian.AppendUint64([]byte{hashEncoding}, r.Ts)
	b = append(b, r.Root[:]...)
	for _, v := range []int64{r.Files, r.Bytes, r.Computed.UnixNano()} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func decodeSnapshotRoot(b []byte) (SnapshotRoot, error) {
	if len(b) != 1+8+32+24 || b[0] != hashEncoding {
		return SnapshotRoot{}, fmt.Errorf("corrupt snapshot root record (% x)", b)
	}
	r := SnapshotRoot{Ts: binary.BigEndian.Uint64(b[1:])}
	copy(r.Root[:], b[9:41])
	r.Files = int64(binary.BigEndian.Uint64(b[41:]))
	r.Bytes = int64(binary.BigEndian.Uint64(b[49:]))
	r.Computed = time.Unix(0, int64(binary.BigEndian.Uint64(b[57:])))
	return r, nil
}

// ObjectHashes returns the recorded hashes of the objects ids (those
// without one are left out).
func (s *Store) ObjectHashes(ids []string) (map[string]ObjectHash, error) {
	out := make(map[string]ObjectHash, len(ids))
	err := s.view(func(txn *badger.Txn) error {
		for _, id := range ids {
			v, err := getValue(txn, hashObjKey(id))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			h, err := decodeObjectHash(v)
			if err != nil {
				return fmt.Errorf("object %s: %w", id, err)
			}
			out[id] = h
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: reading object hashes: %w", s.dir, err)
	}
	return out, nil
}

// ObjectsWithHash returns the objects recorded with contents sum (in
// id order). Some may have been removed since: the caller checks.
func (s *Store) ObjectsWithHash(sum Digest) ([]string, error) {
	var ids []string
	pfx := append(append([]byte{}, hashIndexPfx...), sum[:]...)
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ids = append(ids, string(it.Item().Key()[len(pfx):]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: finding objects by hash: %w", s.dir, err)
	}
	return ids, nil
}

// LowerHashOf returns the recorded hash of the project file (dev, ino);
// ok is false when none is recorded. The caller compares size and times.
func (s *Store) LowerHashOf(dev, ino uint64) (h LowerHash, ok bool, err error) {
	err = s.view(func(txn *badger.Txn) error {
		v, err := getValue(txn, hashLowerKey(dev, ino))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		h, err = decodeLowerHash(dev, ino, v)
		ok = err == nil
		return err
	})
	if err != nil {
		return LowerHash{}, false, fmt.Errorf("store %s: reading a project file's hash: %w", s.dir, err)
	}
	return h, ok, nil
}

// SnapshotRootOf returns snap's recorded root; ok is false when none is
// recorded for it yet.
func (s *Store) SnapshotRootOf(snap Snapshot) (r SnapshotRoot, ok bool, err error) {
	err = s.view(func(txn *badger.Txn) error {
		v, err := getValue(txn, hashRootKey(snap.ID))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r, err = decodeSnapshotRoot(v); err != nil {
			return err
		}
		ok = r.Ts == snap.Ts
		return nil
	})
	if err != nil {
		return SnapshotRoot{}, false, fmt.Errorf("store %s: snapshot %s: reading its root: %w", s.dir, snap.ID, err)
	}
	return r, ok, nil
}

// Hashes is a set of hash records to write at once (PutHashes).
type Hashes struct {
	Objects map[string]ObjectHash
	Lower   []LowerHash
	Roots   map[string]SnapshotRoot // by snapshot id
}

// maxHashOps bounds the writes of one commit of PutHashes, so that the
// commit lock is held briefly (file operations commit under it).
const maxHashOps = 2000

// PutHashes records h, in commits of at most maxHashOps writes; the
// roots go in the last, after the hashes they were computed from. A
// root for a snapshot that no longer exists is not written.
func (s *Store) PutHashes(h Hashes) error {
	var ops []op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := s.apply(ops)
		ops = ops[:0]
		return err
	}
	for id, oh := range h.Objects {
		ops = append(ops, op{key: hashObjKey(id), val: oh.encode()}, op{key: hashIndexKey(oh.Sum, id), val: []byte{}})
		if len(ops) >= maxHashOps {
			if err := flush(); err != nil {
				return fmt.Errorf("store %s: recording object hashes: %w", s.dir, err)
			}
		}
	}
	for _, lh := range h.Lower {
		ops = append(ops, op{key: hashLowerKey(lh.Dev, lh.Ino), val: lh.encode()})
		if len(ops) >= maxHashOps {
			if err := flush(); err != nil {
				return fmt.Errorf("store %s: recording project file hashes: %w", s.dir, err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("store %s: recording hashes: %w", s.dir, err)
	}
	if len(h.Roots) == 0 {
		return nil
	}
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		var ops []op
		for id, r := range h.Roots {
			snap, err := getSnapshot(txn, id)
			if errors.Is(err, ErrNotFound) || err == nil && snap.Ts != r.Ts {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, err
			}
			ops = append(ops, op{key: hashRootKey(id), val: r.encode()})
		}
		return ops, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: recording snapshot roots: %w", s.dir, err)
	}
	return nil
}

// DropObjectHashes deletes the hash records of objects ids (removed
// objects), and their index keys.
func (s *Store) DropObjectHashes(ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), maxHashOps/2)
		chunk := ids[:n]
		ids = ids[n:]
		err := s.update(func(txn *badger.Txn) ([]op, error) {
			var ops []op
			for _, id := range chunk {
				v, err := getValue(txn, hashObjKey(id))
				if errors.Is(err, badger.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
				ops = append(ops, op{key: hashObjKey(id), del: true})
				if h, err := decodeObjectHash(v); err == nil {
					ops = append(ops, op{key: hashIndexKey(h.Sum, id), del: true})
				}
			}
			return ops, nil
		})
		if err != nil {
			return fmt.Errorf("store %s: dropping object hashes: %w", s.dir, err)
		}
	}
	return nil
}

// HashedObjects returns the ids of every object with a recorded hash.
func (s *Store) HashedObjects() ([]string, error) {
	var ids []string
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: hashObjPfx})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ids = append(ids, string(it.Item().Key()[len(hashObjPfx):]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: listing object hashes: %w", s.dir, err)
	}
	return ids, nil
}
