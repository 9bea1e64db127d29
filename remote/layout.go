package remote

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"
)

// Sum is the SHA-256 of an object's bytes: its name in a remote.
type Sum [sha256.Size]byte

func (s Sum) String() string { return hex.EncodeToString(s[:]) }

// ParseSum reads the 64 lowercase hex digits of a Sum.
func ParseSum(s string) (Sum, error) {
	var sum Sum
	if len(s) != 2*len(sum) || strings.ToLower(s) != s {
		return sum, fmt.Errorf("%q is no SHA-256 (64 lowercase hex digits)", s)
	}
	if _, err := hex.Decode(sum[:], []byte(s)); err != nil {
		return sum, fmt.Errorf("%q is no SHA-256 (64 lowercase hex digits)", s)
	}
	return sum, nil
}

// Format is the version of the layout, written in the marker.
const Format = 1

// The names below the prefix (see the package doc).
const (
	markerName   = "agentfs-remote.json"
	objectsDir   = "objects/sha256"
	snapshotsDir = "snapshots"
	sessionsDir  = "sessions"
)

// Kind is a kind of metadata document.
type Kind string

// The kinds of documents.
const (
	KindSnapshot Kind = snapshotsDir
	KindSession  Kind = sessionsDir
)

// key returns the key of name below the remote's prefix.
func (l Location) key(name string) string {
	if l.Prefix == "" {
		return name
	}
	return l.Prefix + "/" + name
}

// ObjectKey returns the key of the object whose bytes hash to sum:
// PREFIX/objects/sha256/ab/abcd…, sharded by its first two digits so
// that listing the objects of one shard stays short.
func (l Location) ObjectKey(sum Sum) string {
	h := sum.String()
	return l.key(path.Join(objectsDir, h[:2], h))
}

// shardPrefix returns the key prefix of the shard of objects whose
// sums start with the two hex digits shard.
func (l Location) shardPrefix(shard string) string {
	return l.key(path.Join(objectsDir, shard)) + "/"
}

// DocKey returns the key of the document of kind named name:
// PREFIX/KIND/NAME.json.
func (l Location) DocKey(kind Kind, name string) string {
	return l.key(path.Join(string(kind), name+".json"))
}

// MarkerKey returns the key of the marker that says a prefix is an
// agentfs remote and which format it has.
func (l Location) MarkerKey() string { return l.key(markerName) }

// checkDocName refuses a document name that would not stay one key
// component.
func checkDocName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 200 {
		return fmt.Errorf("%q cannot name a document in a remote (1 to 200 bytes, no / or NUL, not . or ..)", name)
	}
	return nil
}
