package branch

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Keys; see "Key layout" in the package doc.
var (
	formatKey  = []byte("format")
	featurePfx = []byte("feature/")
	infoPfx    = []byte("info/")
	layerPfx   = []byte("layer/")
	layerSeq   = []byte("seq/layer")
	inoSeq     = []byte("seq/ino")
	pendingKey = []byte("commit/pending")
	entryPfx   = []byte("e/")
	snapPfx    = []byte("snap/")
	tagPfx     = []byte("tag/")
)

// featureSnapshots marks a store that holds, or held, snapshots.
const featureSnapshots = "snapshots"

// maxPathLen bounds a path so that its key stays far below badger's
// 65,000-byte key limit.
const maxPathLen = 60000

func infoKey(k string) []byte    { return append(append([]byte{}, infoPfx...), k...) }
func layerKey(n string) []byte   { return append(append([]byte{}, layerPfx...), n...) }
func featureKey(n string) []byte { return append(append([]byte{}, featurePfx...), n...) }
func snapKey(id string) []byte   { return append(append([]byte{}, snapPfx...), id...) }
func tagKey(n string) []byte     { return append(append([]byte{}, tagPfx...), n...) }

// layerPrefix returns e/<id>, the key of the layer's root entry and the
// prefix of all its entries.
func layerPrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, entryPfx...), id)
}

// appendPath appends the key form of a valid path: each component
// preceded by 0x00.
func appendPath(b []byte, path string) []byte {
	if path == "" {
		return b
	}
	b = append(b, 0)
	for i := 0; i < len(path); i++ {
		if c := path[i]; c == '/' {
			b = append(b, 0)
		} else {
			b = append(b, c)
		}
	}
	return b
}

// pathOf turns the part of an entry key after the layer prefix back
// into a path.
func pathOf(k []byte) string {
	if len(k) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.Grow(len(k) - 1)
	for _, c := range k[1:] {
		if c == 0 {
			c = '/'
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// checkPath returns an error wrapping ErrInvalidPath unless path is ""
// or "/"-separated non-empty components without NUL, "." or "..", and
// without a leading or trailing slash.
func checkPath(path string) error {
	if path == "" {
		return nil
	}
	if len(path) > maxPathLen {
		return fmt.Errorf("path of %d bytes (at most %d): %w", len(path), maxPathLen, ErrInvalidPath)
	}
	if strings.IndexByte(path, 0) >= 0 {
		return fmt.Errorf("path %q contains NUL: %w", path, ErrInvalidPath)
	}
	for c := range strings.SplitSeq(path, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("path %q: empty, \".\" or \"..\" component: %w", path, ErrInvalidPath)
		}
	}
	return nil
}
