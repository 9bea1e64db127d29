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
	{Type: TypeFile, Ino: 3, Object: "cc", Epoch: 1},
	{Type: TypeDir, Ino: 4, Object: "dd", Opaque: true, Epoch: 1<<64 - 1},
}

// TestEntryEncodings decodes fixed bytes of each encoding: encoding 1 is
// what every agentfs before snapshots wrote, and still what Encode
// writes for Epoch 0.
func TestEntryEncodings(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want Entry
	}{
		{"encoding 1", []byte{1, 1, 1, 0xac, 0x02, 2, 'o', 'b', 1, 'a', 0}, Entry{Type: TypeFile, Ino: 300, Object: "ob", Metacopy: true, Origin: "a"}},
		{"encoding 2", []byte{2, 2, 2, 9, 0x81, 0x01, 1, 'd', 0, 1, 'r'}, Entry{Type: TypeDir, Ino: 9, Epoch: 129, Object: "d", Opaque: true, Redirect: "r"}},
		{"encoding 2, epoch 0", []byte{2, 1, 0, 5, 0, 0, 0, 0}, Entry{Type: TypeFile, Ino: 5}},
	} {
		got, err := DecodeEntry(c.b)
		if err != nil {
			t.Errorf("%s: DecodeEntry(% x): %v", c.name, c.b, err)
			continue
		}
		if *got != c.want {
			t.Errorf("%s: DecodeEntry(% x) = %+v, want %+v", c.name, c.b, got, c.want)
		}
	}
	for _, c := range []struct {
		e       Entry
		wantEnc byte
	}{{Entry{Type: TypeFile, Ino: 1}, 1}, {Entry{Type: TypeFile, Ino: 1, Epoch: 1}, 2}} {
		if got := c.e.Encode()[0]; got != c.wantEnc {
			t.Errorf("Encode(%+v) uses encoding %d, want %d", c.e, got, c.wantEnc)
		}
	}
	if got, want := (&Entry{Type: TypeFile, Ino: 300, Object: "ob", Metacopy: true, Origin: "a"}).Encode(), []byte{1, 1, 1, 0xac, 0x02, 2, 'o', 'b', 1, 'a', 0}; string(got) != string(want) {
		t.Errorf("Encode with Epoch 0 = % x, want the encoding 1 bytes % x", got, want)
	}
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
		{"newer encoding", append([]byte{3}, good[1:]...), ErrIncompatible},
		{"unterminated epoch", []byte{2, 1, 0, 1, 0x80}, errCorrupt},
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
