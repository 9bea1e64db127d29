package branch

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNameLen bounds branch and tag names, in bytes.
const maxNameLen = 100

// checkName returns an error wrapping ErrInvalidName unless name is a
// valid branch or tag name (kind says which, for the message): see
// "Names" in the package doc.
func checkName(kind, name string) error {
	why := ""
	switch {
	case name == "":
		why = "it is empty"
	case len(name) > maxNameLen:
		why = fmt.Sprintf("it is longer than %d bytes", maxNameLen)
	case !utf8.ValidString(name):
		why = "it is not valid UTF-8"
	case strings.ContainsFunc(name, unicode.IsControl):
		why = "it contains a control character"
	case strings.Contains(name, "/"):
		why = `it contains "/"`
	case name == "." || name == "..":
		why = `"." and ".." are reserved`
	case name[0] == '-':
		why = `it starts with "-" (it would read as an option)`
	case looksLikeSnapshotID(name):
		why = "4 to 8 hex digits read as a snapshot id"
	default:
		return nil
	}
	return fmt.Errorf("%s name %q: %s: %w", kind, name, why, ErrInvalidName)
}

// looksLikeSnapshotID reports whether ref is a snapshot id or an id
// prefix long enough to use: 4 to 8 lowercase hex digits.
func looksLikeSnapshotID(ref string) bool {
	if len(ref) < minIDPrefix || len(ref) > snapIDLen {
		return false
	}
	for i := 0; i < len(ref); i++ {
		if c := ref[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
