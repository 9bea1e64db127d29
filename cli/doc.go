// Package cli is agentfs's command line: the command table (every
// command's name and one-line summary), the registry the commands'
// implementations register into, the dispatch (Run: flags, help, exit
// codes, error messages), and the commands that only talk to a running
// daemon over its control file: version, status, snapshot create, list,
// show and delete, branch create, list, delete and switch, tag and
// restore.
//
// # Two programs, one command line
//
// agentfs is two executables installed side by side. cmd/agentfs, the
// thin front, links this package alone and runs what it registers
// (RunFront); anything else, and any of those commands given a flag
// that needs more than the control file (-s SESSION opens a store), it
// hands whole to agentfs-core (cmd/agentfs-core), which links every
// package and registers every other command into the same registry
// (Run). Go runs the init of every package linked at every start, and
// the store's, the remotes' and the MCP server's dependencies cost
// milliseconds of it (docs/benchmarks.md, "CLI start"): the front
// starts in the floor of a Go program.
//
// # Invariants
//
//   - This package imports the standard library, pflag, x/sys and the
//     light packages of this module (ctl, kernelinfo) only:
//     TestFrontImports (cmd/agentfs) fails when a heavy one creeps in.
//   - A command behaves the same in both programs: the same code runs
//     it. A command run by the front that finds it needs the full
//     program returns errNeedsCore before it has printed anything, and
//     the front runs agentfs-core with the same arguments.
//   - Every top-level command's summary is in the table (commands.go),
//     so that agentfs --help lists every command in the front too;
//     Register refuses a top-level command that is not in it.
package cli
