package cli

import (
	"fmt"
	"io"

	"github.com/agentfs/agentfs/ctl"
)

// changeLetters are the one-letter kinds of agentfs diff.
var changeLetters = map[string]string{
	ctl.Created: "A", ctl.Deleted: "D", ctl.Modified: "M", ctl.ModeChanged: "P", ctl.TypeChanged: "T",
}

// ChangePath is a change's path as listed: directories end in "/".
func ChangePath(c ctl.Change) string {
	p := Printable(c.Path)
	if c.Path == "" {
		p = "."
	}
	if fi := c.New; fi != nil && fi.Type == "dir" || fi == nil && c.Old != nil && c.Old.Type == "dir" {
		p += "/"
	}
	return p
}

// PrintChanges lists changes one a line, with a letter for the kind.
func PrintChanges(w io.Writer, changes []ctl.Change) error {
	for _, c := range changes {
		letter := changeLetters[c.Kind]
		if letter == "" {
			letter = "?"
		}
		detail := ""
		switch {
		case c.Kind == ctl.TypeChanged:
			detail = fmt.Sprintf("  (%s to %s)", c.Old.Type, c.New.Type)
		case c.Kind == ctl.ModeChanged || c.AttrsChanged:
			detail = attrChange(c.Old, c.New)
		}
		if c.Hidden {
			detail += "  (a hidden path: agentfs apply --force writes it)"
		}
		if _, err := fmt.Fprintf(w, "%s  %s%s\n", letter, ChangePath(c), detail); err != nil {
			return err
		}
	}
	return nil
}

// attrChange describes a change of mode or owner ("" when only xattrs
// changed).
func attrChange(a, b *ctl.FileInfo) string {
	s := ""
	if a.Mode != b.Mode {
		s += fmt.Sprintf(", mode %04o to %04o", a.Mode, b.Mode)
	}
	if a.Uid != b.Uid || a.Gid != b.Gid {
		s += fmt.Sprintf(", owner %d:%d to %d:%d", a.Uid, a.Gid, b.Uid, b.Gid)
	}
	if s == "" {
		return "  (xattrs)"
	}
	return "  (" + s[2:] + ")"
}
