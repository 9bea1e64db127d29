package branch

import (
	"encoding/binary"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// devSlotPfx prefixes the numbers of the (device, inode range) pairs of
// lower files on other filesystems than the lower root's:
//
//	dev/<st_dev, uint64><st_ino >> 48, uint64>   the slot, uint64
//
// Slots are 0, 1, 2, ... in the order the pairs were first met, never
// reused: overlay shows such a file's st_ino as 1<<62 | slot<<48 | the
// low 48 bits of its own (overlay/ino.go), and an entry keeps the
// number its file had when it was copied up, so a slot given once must
// mean the same pair for good. Stores without these keys (made before
// them) read as having none. A read-only store numbers the pairs it does
// not know in memory, after the ones it holds.
var devSlotPfx = []byte("dev/")

func devSlotKey(dev, high uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append([]byte{}, devSlotPfx...), dev), high)
}

// DeviceSlot returns the slot of (dev, high) (see devSlotPfx), giving
// it the next one, durably, when it has none.
func (s *Store) DeviceSlot(dev, high uint64) (uint64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	if s.slots == nil {
		if err := s.loadSlotsLocked(); err != nil {
			return 0, err
		}
	}
	key := [2]uint64{dev, high}
	if n, ok := s.slots[key]; ok {
		return n, nil
	}
	n := uint64(len(s.slots))
	if !s.ro {
		err := s.update(func(txn *badger.Txn) ([]op, error) {
			return []op{{key: devSlotKey(dev, high), val: binary.BigEndian.AppendUint64(nil, n)}}, nil
		})
		if err != nil {
			return 0, fmt.Errorf("store %s: numbering a filesystem's inodes: %w", s.dir, err)
		}
	}
	s.slots[key] = n
	return n, nil
}

// loadSlotsLocked reads the slots given. Requires s.slotMu.
func (s *Store) loadSlotsLocked() error {
	slots := map[[2]uint64]uint64{}
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: devSlotPfx, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()[len(devSlotPfx):]
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(k) != 16 || len(v) != 8 {
				return errors.New("a device slot key or value of the wrong size")
			}
			slots[[2]uint64{binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(k[8:])}] = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s: reading the numbers of filesystems: %w", s.dir, err)
	}
	s.slots = slots
	return nil
}
