package branch

import (
	"errors"
	"testing"
)

var sampleEntries = []*Entry{
	{Type: TypeWhiteout},
	{Type: TypeFile, Ino: 1<<63 | 7, Object: "0123456789abcdef"},
	{Type: TypeFile, Ino: 42, Object: "aa", Metacopy: true, Origin: "a/b c"},
	{Type: TypeDir, Ino: 9, Object: "bb", Opaque: true},
	{Type: TypeDir, Ino: 9, Object: "bb", Redirect: "x/y"},
	{Type: TypeBlock, Ino: 1<<64 - 1, Object: "\x00\xff"},
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range sampleEntries {
		got, err := DecodeEntry(e.Encode())
		if err != nil {
			t.Fatalf("DecodeEntry(Encode(%+v)): %v", e, err)
		}
		if *got != *e {
			t.Errorf("round trip = %+v, want %+v", got, e)
		}
	}
}

func TestDecodeEntryRejects(t *testing.T) {
	good := (&Entry{Type: TypeFile, Ino: 300, Object: "obj"}).Encode()
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errCorrupt},
		{"short", good[:3], errCorrupt},
		{"encoding 0", append([]byte{0}, good[1:]...), errCorrupt},
		{"newer encoding", append([]byte{2}, good[1:]...), ErrIncompatible},
		{"type", append([]byte{1, 8}, good[2:]...), errCorrupt},
		{"flags", append([]byte{1, 1, 4}, good[3:]...), errCorrupt},
		{"truncated string", good[:len(good)-1], errCorrupt},
		{"trailing", append(append([]byte{}, good...), 0), errCorrupt},
		{"huge length", []byte{1, 1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1}, errCorrupt},
		{"unterminated varint", []byte{1, 1, 0, 0x80, 0x80}, errCorrupt},
	} {
		_, err := DecodeEntry(c.b)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: DecodeEntry(% x) = %v, want %v", c.name, c.b, err, c.want)
		}
	}
}

// FuzzDecodeEntry checks that no input makes DecodeEntry panic, and
// that whatever it accepts survives a round trip. Run it with
//
//	go test -run '^$' -fuzz FuzzDecodeEntry -fuzztime 20s ./branch
//
// plain go test runs only the seed corpus.
func FuzzDecodeEntry(f *testing.F) {
	for _, e := range sampleEntries {
		f.Add(e.Encode())
	}
	f.Add([]byte{1, 2, 3, 4})
	f.Add([]byte{1, 1, 3, 0x80, 0x00, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if e != nil {
				t.Fatalf("DecodeEntry returned an entry with error %v", err)
			}
			return
		}
		again, err := DecodeEntry(e.Encode())
		if err != nil {
			t.Fatalf("re-decode of %+v: %v", e, err)
		}
		if *again != *e {
			t.Fatalf("re-decode = %+v, want %+v", again, e)
		}
	})
}
