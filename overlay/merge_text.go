package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// diff3 merges the changes from base to ours and from base to theirs,
// line by line, with diff3 -m of GNU diffutils: where both changed the
// same lines the output holds both, between conflict markers labelled
// with the three names (the base's lines too, as git's diff3 style
// shows them), and clean is false.
//
// GNU diff3 is the maintained diff3 (Patch runs diff -u of the same
// package): no Go library of it could be had as a module here
// (github.com/epiclabs-io/diff3, github.com/nasdf/diff3 and the
// diferenco package of github.com/antgroup/hugescm were all refused),
// go-git v5 has no merge, and the merge is not to be hand-written.
//
// diff3 compares its inputs with diff(1) twice, so it is given files,
// not pipes: the three texts are written to a private temporary
// directory, removed before diff3 returns. The merged text is written
// to a new file named out.
func diff3(ours, base, theirs []byte, oursLabel, baseLabel, theirsLabel, out string) (clean bool, err error) {
	dir, err := os.MkdirTemp("", "agentfs-merge-")
	if err != nil {
		return false, fmt.Errorf("diff3: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }() // our own temporary files
	// diff3 -m glues a conflict marker to a last line without a
	// newline ("b||||||| base"): every text is given one, and the
	// merged text ends with one or not as the sides say, three-way.
	endsNL := func(b []byte) bool { return len(b) == 0 || b[len(b)-1] == '\n' }
	finalNL := endsNL(ours)
	if finalNL == endsNL(base) {
		finalNL = endsNL(theirs)
	}
	var names []string
	for i, data := range [][]byte{ours, base, theirs} {
		if !endsNL(data) {
			data = append(data[:len(data):len(data)], '\n')
		}
		name := filepath.Join(dir, []string{"ours", "base", "theirs"}[i])
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return false, fmt.Errorf("diff3: %w", err)
		}
		names = append(names, name)
	}
	cmd := exec.Command("diff3", "-m", "-L", oursLabel, "-L", baseLabel, "-L", theirsLabel, names[0], names[1], names[2])
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("diff3: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	err = errors.Join(cmd.Run(), f.Close())
	var exit *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return false, fmt.Errorf("diff3(1) is missing: install GNU diffutils")
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		clean = false // conflicts: the markers are in the output
	case err != nil:
		return false, fmt.Errorf("diff3 -m: %w: %s", err, strings.TrimSpace(stderr.String()))
	default:
		clean = true
	}
	if !finalNL {
		if err := dropFinalNewline(out, ">>>>>>> "+theirsLabel); err != nil {
			return false, fmt.Errorf("diff3: %w", err)
		}
	}
	return clean, nil
}

// dropFinalNewline removes the newline that ends file name, unless its
// last line is marker (a conflict's end keeps its line).
func dropFinalNewline(name, marker string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	tail := make([]byte, min(fi.Size(), int64(len(marker))+2))
	if _, err := f.ReadAt(tail, fi.Size()-int64(len(tail))); err != nil {
		return err
	}
	if tail[len(tail)-1] != '\n' || bytes.HasSuffix(tail, []byte("\n"+marker+"\n")) || int64(len(tail)) == fi.Size() && string(tail) == marker+"\n" {
		return nil
	}
	return f.Truncate(fi.Size() - 1)
}
