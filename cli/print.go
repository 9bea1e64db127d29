package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// TimeString shows t in local time to the second, or "-" when unknown.
func TimeString(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// Printable returns s as it can be shown in a table row: quoted (Go
// syntax) when it has control characters, "-" when empty.
func Printable(s string) string {
	switch {
	case s == "":
		return "-"
	case strings.ContainsFunc(s, unicode.IsControl):
		return strconv.Quote(s)
	}
	return s
}

// HumanBytes shows a size in B, KiB, MiB...
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ShortCommand shows a command line in a message: its first line, cut
// to 60 characters.
func ShortCommand(cmd string) string {
	if i := strings.IndexByte(cmd, '\n'); i >= 0 {
		cmd = cmd[:i] + " ..."
	}
	if r := []rune(cmd); len(r) > 60 {
		cmd = string(r[:57]) + "..."
	}
	return Printable(cmd)
}
