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
	var names []string
	for i, data := range [][]byte{ours, base, theirs} {
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
		return false, nil // conflicts: the markers are in the output
	case err != nil:
		return false, fmt.Errorf("diff3 -m: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return true, nil
}
