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
// directory, removed before diff3 returns.
func diff3(ours, base, theirs []byte, oursLabel, baseLabel, theirsLabel string) (merged []byte, clean bool, err error) {
	dir, err := os.MkdirTemp("", "agentfs-merge-")
	if err != nil {
		return nil, false, fmt.Errorf("diff3: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }() // our own temporary files
	var names []string
	for i, data := range [][]byte{ours, base, theirs} {
		name := filepath.Join(dir, []string{"ours", "base", "theirs"}[i])
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return nil, false, fmt.Errorf("diff3: %w", err)
		}
		names = append(names, name)
	}
	cmd := exec.Command("diff3", "-m", "-L", oursLabel, "-L", baseLabel, "-L", theirsLabel, names[0], names[1], names[2])
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return nil, false, fmt.Errorf("diff3(1) is missing: install GNU diffutils")
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return out.Bytes(), false, nil // conflicts: the markers are in the output
	case err != nil:
		return nil, false, fmt.Errorf("diff3 -m: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), true, nil
}
