// Command agentfs-core is the full agentfs program: every command, the
// daemon, the mount helper and the daemon's helper processes. Users run
// agentfs (cmd/agentfs), the thin front, which runs the commands that
// only talk to a daemon itself and hands everything else to this
// program, installed beside it (package cli says how, and why).
package main

import (
	"io"
	"os"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/daemon"
)

func init() {
	// The commands of package cli given -s SESSION open the session's
	// store in this program.
	cli.DialSession = dialSession
	// The daemon and unmount delete a private store in a process of
	// this program (daemon/trash.go).
	if self, err := os.Executable(); err == nil {
		daemon.Remover = []string{self, daemon.RemoverCommand}
	}
}

func main() {
	if isMountHelper() {
		os.Exit(runMountHelper(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) == 2 && os.Args[1] == contenthash.HelperCommand {
		// The daemon's hashing process (contenthash/helper.go).
		os.Exit(contenthash.RunHelper())
	}
	if len(os.Args) >= 2 && os.Args[1] == daemon.RemoverCommand {
		// The deletion of a private store (daemon/trash.go).
		os.Exit(daemon.RunRemover(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args with every command: the shell's
// completion, which is no command of the table, then cli.Run.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == completeCommand {
		// The shell's completion (cmd_completion.go): the words are
		// not agentfs's flags.
		return runComplete(args[1:], stdout)
	}
	return cli.Run(args, stdout, stderr)
}
