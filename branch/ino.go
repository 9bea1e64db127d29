package branch

import (
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// inoLease is how many inode numbers one commit to seq/ino reserves.
const inoLease = 1024

// inoHigh marks the inode numbers this store hands out, so that they
// never collide with the lower filesystem's (which stay below 1<<63 on
// every filesystem agentfs meets).
const inoHigh = 1 << 63

// AllocIno returns a new inode number, (1<<63)|n, never handed out
// before by this store, across reopens and crashes. It is safe for
// concurrent use and increasing within one Open.
func (s *Store) AllocIno() (uint64, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	s.inoMu.Lock()
	defer s.inoMu.Unlock()
	if s.inoNext == s.inoEnd {
		if err := s.leaseInosLocked(); err != nil {
			return 0, err
		}
	}
	n := s.inoNext
	s.inoNext++
	return inoHigh | n, nil
}

// leaseInosLocked reserves the next block of inode numbers. Requires
// s.inoMu.
func (s *Store) leaseInosLocked() error {
	var start uint64
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		v, err := getValue(txn, inoSeq)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", inoSeq, err)
		}
		if len(v) != 8 {
			return nil, fmt.Errorf("corrupt %s (% x)", inoSeq, v)
		}
		start = binary.BigEndian.Uint64(v)
		if start >= inoHigh-inoLease {
			return nil, fmt.Errorf("inode numbers exhausted")
		}
		return []op{{key: inoSeq, val: binary.BigEndian.AppendUint64(nil, start+inoLease)}}, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: allocating inode numbers: %w", s.dir, err)
	}
	s.inoNext, s.inoEnd = start, start+inoLease
	return nil
}
