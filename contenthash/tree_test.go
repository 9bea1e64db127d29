package contenthash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// hexSum is the SHA-256 of b in hex.
func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestHashDirDefinition checks HashDir against the definition written
// out by hand for a small tree: a file, a symlink, a fifo and a
// subdirectory, names in byte order ("B" before "a").
func TestHashDirDefinition(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("hello\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "B")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	sub := hexSum(nil) // an empty directory: no records
	top := hexSum([]byte("l 0777 " + hexSum([]byte("a")) + " B\x00" +
		"f 0640 " + hexSum([]byte("hello\n")) + " a\x00" +
		"p 0600 " + hexSum(nil) + " pipe\x00" +
		"d 0700 " + sub + " sub\x00"))
	want := hexSum([]byte("agentfs-merkle-1\nd 0750 " + top + " \x00"))
	m, err := HashDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.Root != want {
		t.Errorf("root %s, want %s", m.Root, want)
	}
	if m.Files != 4 || m.Bytes != 6 || len(m.Entries) != 5 {
		t.Errorf("files %d bytes %d entries %d, want 4, 6, 5", m.Files, m.Bytes, len(m.Entries))
	}
	var got []string
	for _, e := range m.Entries {
		got = append(got, e.Path+":"+e.Type+e.Mode)
	}
	if fmt.Sprint(got) != "[:d0750 B:l0777 a:f0640 pipe:p0600 sub:d0700]" {
		t.Errorf("entries in path order: %v", got)
	}
	if m.Entries[0].SHA256 != top || m.Entries[4].SHA256 != sub {
		t.Errorf("directory node hashes %s, %s; want %s, %s", m.Entries[0].SHA256, m.Entries[4].SHA256, top, sub)
	}
}

// TestBuilderRefusesOutOfOrder: a path outside the directories walked
// is an error, not a wrong root.
func TestBuilderRefusesOutOfOrder(t *testing.T) {
	b := newBuilder(false)
	if err := b.dir("", unix.S_IFDIR|0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.dir("x", unix.S_IFDIR|0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.leaf(Entry{Path: "y/z", Type: "f"}, 0o644, Digest{}); err == nil {
		t.Errorf("a file in a directory not walked: no error")
	}
}
