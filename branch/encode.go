package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Entry encodings, the value of an e/ key. Encoding 1:
//
//	byte     encoding (1)
//	byte     Type
//	byte     flags: 1 Metacopy, 2 Opaque; other bits must be 0
//	uvarint  Ino
//	uvarint  len(Object), Object
//	uvarint  len(Origin), Origin
//	uvarint  len(Redirect), Redirect
//
// and nothing after. Encoding 2 is encoding 1 with a uvarint Epoch
// after Ino. Encode writes the lowest encoding that holds the entry: 1
// when Epoch is 0 (as every entry was before snapshots existed, so that
// agentfs builds older than them still read such entries), 2 otherwise.
// DecodeEntry reads both; a decoder meeting a higher encoding byte
// reports ErrIncompatible (written by a newer agentfs), anything else
// malformed errCorrupt.
const (
	entryEncodingNoEpoch = 1
	entryEncoding        = 2 // the newest
)

const (
	flagMetacopy = 1 << iota
	flagOpaque
	flagsKnown = flagMetacopy | flagOpaque
)

var errCorrupt = errors.New("corrupt entry")

// Encode returns the binary form of e.
func (e *Entry) Encode() []byte {
	b := make([]byte, 0, 3+2*binary.MaxVarintLen64+3+len(e.Object)+len(e.Origin)+len(e.Redirect))
	var flags byte
	if e.Metacopy {
		flags |= flagMetacopy
	}
	if e.Opaque {
		flags |= flagOpaque
	}
	enc := byte(entryEncoding)
	if e.Epoch == 0 {
		enc = entryEncodingNoEpoch
	}
	b = append(b, enc, byte(e.Type), flags)
	b = binary.AppendUvarint(b, e.Ino)
	if enc == entryEncoding {
		b = binary.AppendUvarint(b, e.Epoch)
	}
	for _, s := range []string{e.Object, e.Origin, e.Redirect} {
		b = appendString(b, s)
	}
	return b
}

// DecodeEntry parses the binary form of an entry. It never panics: a
// malformed value is an error.
func DecodeEntry(b []byte) (*Entry, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", errCorrupt, len(b))
	}
	enc := b[0]
	switch {
	case enc > entryEncoding:
		return nil, fmt.Errorf("entry encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", enc, entryEncoding, ErrIncompatible)
	case enc < entryEncodingNoEpoch:
		return nil, fmt.Errorf("%w: encoding %d", errCorrupt, enc)
	}
	e := &Entry{Type: Type(b[1])}
	if e.Type > TypeBlock {
		return nil, fmt.Errorf("%w: type %d", errCorrupt, b[1])
	}
	if b[2]&^flagsKnown != 0 {
		return nil, fmt.Errorf("%w: flags %#x", errCorrupt, b[2])
	}
	e.Metacopy = b[2]&flagMetacopy != 0
	e.Opaque = b[2]&flagOpaque != 0
	b = b[3:]
	ino, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: inode number", errCorrupt)
	}
	e.Ino, b = ino, b[n:]
	if enc == entryEncoding {
		epoch, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: epoch", errCorrupt)
		}
		e.Epoch, b = epoch, b[n:]
	}
	for _, s := range []*string{&e.Object, &e.Origin, &e.Redirect} {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: string length", errCorrupt)
		}
		*s = string(b[n : n+int(l)])
		b = b[n+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(b))
	}
	return e, nil
}

// appendString appends s with a uvarint length prefix.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the fields of a record; the first malformed field sets
// err, and every later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uint64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail("short record")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) string() string {
	if d.err != nil {
		return ""
	}
	l, n := binary.Uvarint(d.b)
	if n <= 0 || l > uint64(len(d.b)-n) {
		d.fail("string length")
		return ""
	}
	s := string(d.b[n : n+int(l)])
	d.b = d.b[n+int(l):]
	return s
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = errors.New(why)
	}
}

// finish returns the first error, or an error if bytes are left over.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return d.err
}
