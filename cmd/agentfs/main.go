// Command agentfs is agentfs's thin front: the program users run. It
// links package cli and what the commands there need (the control
// protocol, pflag, x/sys) and nothing else, so that it starts in the
// floor of a Go program: it runs version, --help, status, and the
// snapshot, branch, tag and restore commands that talk to a mount's
// daemon itself, and hands every other command line whole to agentfs-core,
// the full program installed beside it (same arguments, same
// environment, same process: exec). Package cli says why.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentfs/agentfs/cli"
)

// coreName is the full program's file name, in this one's directory.
const coreName = "agentfs-core"

func main() {
	if filepath.Base(os.Args[0]) != cli.MountHelperName {
		if code, handled := cli.RunFront(os.Args[1:], os.Stdout, os.Stderr); handled {
			os.Exit(code)
		}
	}
	os.Exit(execCore())
}

// corePath is where the full program is: $AGENTFS_CORE when set (for
// tests), else agentfs-core beside this executable (its directory once
// symlinks are resolved).
func corePath() (string, error) {
	if p := os.Getenv("AGENTFS_CORE"); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding agentfs's own executable, beside which agentfs-core is: %w", err)
	}
	return filepath.Join(filepath.Dir(self), coreName), nil
}

// execCore runs agentfs-core in this process with this process's
// arguments and environment; it returns only if it could not.
func execCore() int {
	p, err := corePath()
	if err == nil {
		err = syscall.Exec(p, os.Args, os.Environ())
		err = fmt.Errorf("running %s: %w", p, err)
	}
	fmt.Fprintf(os.Stderr, "agentfs: %v: agentfs-core, which runs this command, must be installed beside agentfs (make install puts both in the same directory; AGENTFS_CORE=PATH names another)\n", err)
	return cli.ExitError
}
