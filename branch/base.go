package branch

import (
	"encoding/binary"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// # Bases
//
// A branch remembers what each lower path looked like when the branch
// first shadowed it (a copy-up, a metacopy, a whiteout, a rename onto
// or away from it, a file created where the lower tree had nothing):
// its base. `agentfs apply` compares the base with the lower path as it
// is now, and refuses to overwrite a path that changed since (see
// overlay/apply.go for what "changed" means). This package only stores
// bases; the overlay decides when to record one and what it holds.
//
// Key and value:
//
//	base/<layer id><path>   the base of the lower path in that layer
//	                        (the path in key form, as for e/)
//
//	encoding 1: [1][flags: 1 Exists][uvarint Seen]
//	            and when Exists: uvarint Dev, Ino, Mode, Uid, Gid,
//	            Size; varint Mtime, Ctime
//
// Bases are written in the same commit (Batch) as the entries whose
// change made them, so that a crash never leaves an entry without its
// base. They belong to the layer as its entries do: a snapshot reads
// them at its timestamp, CreateLayer copies them, ResetTo resets them,
// DeleteLayer deletes them.
//
// Compatibility: bases need no store feature. An agentfs older than
// them reads the store as before and ignores these keys; it records no
// bases for the paths it shadows, so apply judges such a path as one
// never shadowed (see overlay/apply.go), and a base it left in place
// may be older than the entry at its path, which can only make apply
// report a conflict (that --force overrides), never hide one.
const baseEncoding = 1

const baseExists = 1

var basePfx = []byte("base/")

// basePrefix returns base/<id>, the prefix of all bases of a layer.
func basePrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, basePfx...), id)
}

// Base is what a lower path looked like when a branch first shadowed
// it.
type Base struct {
	// Exists is false when the lower tree had nothing at the path.
	Exists bool
	// Seen is when the base was recorded (Unix ns, the kernel's coarse
	// real-time clock, which is what it stamps ctimes with).
	Seen int64
	// The lower inode, when Exists.
	Dev, Ino     uint64
	Mode         uint32 // st_mode, file type included
	Uid, Gid     uint32
	Size         int64
	Mtime, Ctime int64 // Unix ns
}

// Encode returns the binary form of b.
func (b *Base) Encode() []byte {
	out := make([]byte, 0, 2+10*binary.MaxVarintLen64)
	var flags byte
	if b.Exists {
		flags |= baseExists
	}
	out = append(out, baseEncoding, flags)
	out = binary.AppendUvarint(out, uint64(b.Seen))
	if b.Exists {
		for _, v := range []uint64{b.Dev, b.Ino, uint64(b.Mode), uint64(b.Uid), uint64(b.Gid), uint64(b.Size)} {
			out = binary.AppendUvarint(out, v)
		}
		out = binary.AppendVarint(out, b.Mtime)
		out = binary.AppendVarint(out, b.Ctime)
	}
	return out
}

var errCorruptBase = errors.New("corrupt base")

// DecodeBase parses the binary form of a base. It never panics.
func DecodeBase(v []byte) (*Base, error) {
	if len(v) < 3 {
		return nil, fmt.Errorf("%w: %d bytes", errCorruptBase, len(v))
	}
	if v[0] > baseEncoding {
		return nil, fmt.Errorf("base encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", v[0], baseEncoding, ErrIncompatible)
	}
	if v[0] != baseEncoding || v[1]&^baseExists != 0 {
		return nil, fmt.Errorf("%w: encoding %d, flags %#x", errCorruptBase, v[0], v[1])
	}
	b := &Base{Exists: v[1]&baseExists != 0}
	v = v[2:]
	uv := func() uint64 {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			v = nil
			return 0
		}
		v = v[n:]
		return x
	}
	ok := true
	sv := func() int64 {
		x, n := binary.Varint(v)
		if n <= 0 {
			ok = false
			return 0
		}
		v = v[n:]
		return x
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: no time", errCorruptBase)
	}
	b.Seen = int64(uv())
	if b.Exists {
		fields := make([]uint64, 6)
		for i := range fields {
			if len(v) == 0 {
				return nil, fmt.Errorf("%w: short", errCorruptBase)
			}
			fields[i] = uv()
		}
		b.Dev, b.Ino, b.Mode, b.Uid, b.Gid, b.Size = fields[0], fields[1], uint32(fields[2]), uint32(fields[3]), uint32(fields[4]), int64(fields[5])
		b.Mtime, b.Ctime = sv(), sv()
	}
	if !ok || v == nil || len(v) != 0 {
		return nil, fmt.Errorf("%w: malformed fields", errCorruptBase)
	}
	return b, nil
}

// Base returns the base recorded for path; ErrNotFound if there is
// none. It reads through the layer's chain, as Get does.
func (l *Layer) Base(path string) (*Base, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("branch %q: %w", l.name, err)
	}
	var b *Base
	err := l.br.getRaw(path, func(v []byte) error {
		var err error
		b, err = DecodeBase(v)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("branch %q: base of %q: %w", l.name, path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("branch %q: base of %q: %w", l.name, path, err)
	}
	return b, nil
}

// Bases calls fn with every base of the layer, in path order, through
// its chain. It reads one consistent state; an error from fn stops it
// and is returned as is.
func (l *Layer) Bases(fn func(path string, b *Base) error) error {
	return l.br.walk(nil, false, func(path string, v []byte) error {
		b, err := DecodeBase(v)
		if err != nil {
			return &walkError{fmt.Errorf("base of %q: %w", path, err)}
		}
		return fn(path, b)
	})
}
