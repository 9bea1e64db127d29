package autosnap

import (
	"fmt"
	"strings"
)

// Labels of automatic snapshots.
const (
	// maxLabelPath bounds one path in a label, in bytes (the end of a
	// longer path is kept).
	maxLabelPath = 80
	// listedPaths is how many paths a label names before "and N more".
	listedPaths = 3
)

// ChangeLabel says what changed: "edited a.go", "edited a.go, b.go and
// c.go", "edited a.go, b.go and 12 more". more counts changed paths not
// in paths.
func ChangeLabel(paths []string, more int) string {
	if len(paths) == 0 {
		if more > 0 {
			return "edited " + plural(more, "file") + " (too many changes at once to name them)"
		}
		return "edited files"
	}
	total := len(paths) + more
	shown := paths
	if total > listedPaths {
		shown = paths[:listedPaths-1]
	}
	names := make([]string, len(shown))
	for i, p := range shown {
		names[i] = shortPath(p)
	}
	if rest := total - len(shown); rest > 0 {
		return "edited " + strings.Join(names, ", ") + " and " + fmt.Sprint(rest) + " more"
	}
	if len(names) == 1 {
		return "edited " + names[0]
	}
	return "edited " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// shortPath keeps the end of a long path: "…/deep/dir/file.go".
func shortPath(p string) string {
	if len(p) <= maxLabelPath {
		return p
	}
	tail := p[len(p)-maxLabelPath:]
	if i := strings.IndexByte(tail, '/'); i >= 0 && i < len(tail)-1 {
		tail = tail[i:]
	} else {
		tail = "/" + tail
	}
	return "…" + strings.ToValidUTF8(tail, "")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
