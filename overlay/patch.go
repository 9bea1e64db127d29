package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// # Patch
//
// Patch shows what changed in a file's data as a unified diff, made by
// diff(1) from GNU diffutils (`diff -u`), which reads the two views'
// files through /proc/self/fd, so nothing is copied. A file counts as
// binary when its first 8 KiB hold a NUL byte or it is not valid
// UTF-8; binary files get one line, "Binary files a/x and b/x differ",
// as git and diff print it. A side that is not a regular file (absent,
// a directory, a symlink...) is /dev/null, so a created file is all
// added lines and a deleted one all removed lines.

// binaryProbe is how much of a file the NUL test reads.
const binaryProbe = 8 << 10

// Patch writes to w the unified diff of the data of the file at
// c.Path from view a to view b, with a/path and b/path labels. It
// writes nothing when the data are the same or neither side is a
// regular file.
func Patch(a, b *FS, c Change, w io.Writer) error {
	na, sa, err := a.lookupPath(c.Path)
	if err != nil {
		return fmt.Errorf("patch: %s: %w", c.Path, err)
	}
	defer a.release(na)
	nb, sb, err := b.lookupPath(c.Path)
	if err != nil {
		return fmt.Errorf("patch: %s: %w", c.Path, err)
	}
	defer b.release(nb)
	regA, regB := na != nil && na.mode == unix.S_IFREG, nb != nil && nb.mode == unix.S_IFREG
	if !regA && !regB {
		return nil
	}
	if regA && regB {
		d := &differ{a: a, b: b}
		if same, err := d.sameData(na, &sa, nb, &sb, nil, nil); err != nil || same {
			return err
		}
	}
	la, lb := "/dev/null", "/dev/null"
	var files [2]*os.File
	for i, s := range []struct {
		fs    *FS
		n     *Node
		reg   bool
		label *string
		pfx   string
	}{{a, na, regA, &la, "a/"}, {b, nb, regB, &lb, "b/"}} {
		if !s.reg {
			continue
		}
		f, err := s.fs.openData(s.n)
		if err != nil {
			return fmt.Errorf("patch: %s: %w", c.Path, err)
		}
		defer f.Close()
		files[i], *s.label = f, s.pfx+c.Path
	}
	for _, f := range files {
		if f == nil {
			continue
		}
		text, err := isText(f)
		if err != nil {
			return fmt.Errorf("patch: %s: %w", c.Path, err)
		}
		if !text {
			_, err := fmt.Fprintf(w, "Binary files %s and %s differ\n", la, lb)
			return err
		}
	}
	return diffU(la, lb, files, w)
}

// diffU runs diff -u on files (nil: /dev/null) with labels la and lb.
func diffU(la, lb string, files [2]*os.File, w io.Writer) error {
	args := []string{"-u", "--label", la, "--label", lb}
	cmd := exec.Command("diff")
	for _, f := range files {
		if f == nil {
			args = append(args, "/dev/null")
			continue
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		args = append(args, fmt.Sprintf("/proc/self/fd/%d", 2+len(cmd.ExtraFiles)))
	}
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("patch: diff(1) is missing: install GNU diffutils")
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil // the files differ: the usual case
	}
	if err != nil {
		return fmt.Errorf("patch: diff -u %s %s: %w: %s", la, lb, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// isText reports whether f holds text: no NUL in its first 8 KiB, and
// valid UTF-8 throughout.
func isText(f *os.File) (bool, error) {
	buf := make([]byte, 64<<10)
	pending := 0 // bytes of a rune cut at the end of the last chunk
	for off := int64(0); ; {
		n, err := f.ReadAt(buf[pending:], off)
		if err != nil && err != io.EOF {
			return false, err
		}
		eof := err == io.EOF
		chunk := buf[:pending+n]
		if off == 0 && bytes.IndexByte(chunk[:min(len(chunk), binaryProbe)], 0) >= 0 {
			return false, nil
		}
		off += int64(n)
		whole := len(chunk)
		if !eof {
			whole = cutRune(chunk)
		}
		if !utf8.Valid(chunk[:whole]) {
			return false, nil
		}
		if eof {
			return true, nil
		}
		pending = copy(buf, chunk[whole:])
	}
}

// cutRune returns the length of b without an incomplete rune at its
// end.
func cutRune(b []byte) int {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return len(b) - i
			}
			break
		}
	}
	return len(b)
}
