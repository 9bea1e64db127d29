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
// files through pipes: given /proc/self/fd of the files themselves, it
// would open them again without O_NOATIME and change the atime of the
// lower files. A file counts as
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
		view  *FS
		n     *Node
		reg   bool
		label *string
		pfx   string
	}{{a, na, regA, &la, "a/"}, {b, nb, regB, &lb, "b/"}} {
		if !s.reg {
			continue
		}
		f, err := s.view.openData(s.n)
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
	var srcs, pws []*os.File
	closeAll := func() {
		for _, f := range append(cmd.ExtraFiles, pws...) {
			f.Close()
		}
	}
	for _, f := range files {
		if f == nil {
			args = append(args, "/dev/null")
			continue
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			closeAll()
			return fmt.Errorf("patch: %w", err)
		}
		srcs, pws = append(srcs, f), append(pws, pw)
		cmd.ExtraFiles = append(cmd.ExtraFiles, pr)
		args = append(args, fmt.Sprintf("/proc/self/fd/%d", 2+len(cmd.ExtraFiles)))
	}
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close() // diff has its own copy
	}
	if err != nil {
		for _, pw := range pws {
			pw.Close()
		}
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("patch: diff(1) is missing: install GNU diffutils")
		}
		return fmt.Errorf("patch: diff -u %s %s: %w", la, lb, err)
	}
	feed := func(src, pw *os.File) error {
		_, err := io.Copy(pw, io.NewSectionReader(src, 0, 1<<62))
		pw.Close()
		if errors.Is(err, unix.EPIPE) {
			err = nil // diff stopped reading: its error says why
		}
		return err
	}
	feedErrs := make(chan error, len(pws))
	for i := range pws {
		go func() { feedErrs <- feed(srcs[i], pws[i]) }()
	}
	var feedErr error
	for range pws {
		feedErr = errors.Join(feedErr, <-feedErrs)
	}
	err = cmd.Wait()
	if feedErr != nil {
		return fmt.Errorf("patch: reading %s or %s: %w", la, lb, feedErr)
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
